"""Change 49 side by side: example 18 (8x8 matvec, N=2^14, ``hoisted=False``) with each later
rotation's digits' own rows read from the source's transform (``own``: the code,
``rotate_keyswitch(..., c_ntt=)``), transformed as before (``fused``: c_ntt dropped, the code of
change 48), that waiting for the source's transform first (``fused_wait``: the cost of the
wait alone), and the ModUp and inner product as two launches (``two``). Graph device us and
``Graph.launch`` host us (four rounds alternated) and eager host ms, one process; every variant
checked bit-identical to the code's eager call first.

Needs change 49's code (``c_ntt``). It ran on change 49's first form (the first rotation
publishing the source); ``change49_own_rows.patch`` keeps the second form (the source's
transform a task of its own), on which this probe measures that structure instead.

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s20/own_rows.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


from bench._example18 import (  # noqa: E402
    built_backend,
    compare_backends,
    example18,
    two_launch_backend,
)


def transformed_own_rows(engine):
    """``built_backend(engine)`` whose ``rotate_keyswitch`` ignores ``c_ntt`` (every digit's own
    row transformed: change 48)."""
    backend = built_backend(engine)
    fused = backend.rotate_keyswitch

    def without_c_ntt(*args, c_ntt=None, **kwargs):
        return fused(*args, **kwargs)

    backend.rotate_keyswitch = without_c_ntt
    return backend


def early_wait(engine):
    """``transformed_own_rows(engine)`` that waits for the source's transform before its
    automorphism (not after the column kernel): the wait the own rows need, without the saving."""
    backend = transformed_own_rows(engine)
    fused = backend.rotate_keyswitch

    def waiting_first(*args, before_c0=None, **kwargs):
        if before_c0 is not None:
            before_c0()
        return fused(*args, **kwargs)

    backend.rotate_keyswitch = waiting_first
    return backend


def main() -> None:
    engine, _, ct, fn, ref = example18()
    variants = {"two": two_launch_backend(engine), "fused": transformed_own_rows(engine),
                "fused_wait": early_wait(engine), "own": engine.backend}
    keys = ([f"{v} device_us" for v in variants]
            + [f"{v} launch_us" for v in ("fused", "own")]
            + ["fused eager_ms", "own eager_ms"])
    compare_backends(engine, variants, fn, ct, ref, keys)


if __name__ == "__main__":
    main()
