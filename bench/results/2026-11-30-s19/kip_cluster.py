"""Prepared in the nineteenth session, not yet run (its device time was spent): example 18 (8x8
matvec, N=2^14, ``hoisted=False``) with the fused ModUp-and-inner-product kernel in one block a
(chunk, row) (``one``: the default) against its cluster form (``c2``, ``c4``, ``c8``:
``FHE_KIP_CLUSTER_LAUNCH=1`` with clusters of 2, 4, 8 blocks, each taking every 2nd / 4th / 8th
digit), and the ModUp and inner product as two launches (``two``). Graph device us (four
rounds alternated) and eager host ms, one process; every variant checked bit-identical to the
code's eager call first.

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s19/kip_cluster.py
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


def main() -> None:
    engine, _, ct, fn, ref = example18()
    variants = {"two": two_launch_backend(engine), "one": engine.backend}
    for size in (2, 4, 8):
        variants[f"c{size}"] = built_backend(engine, "-DFHE_KIP_CLUSTER_LAUNCH=1", f"-DFHE_NTT_KIP_CLUSTER={size}")
    keys = ([f"{v} device_us" for v in variants]
            + ["one eager_ms", "c4 eager_ms"])
    compare_backends(engine, variants, fn, ct, ref, keys)


if __name__ == "__main__":
    main()
