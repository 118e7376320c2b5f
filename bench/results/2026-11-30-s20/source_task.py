"""Change 49 (second form) side by side: example 18 (8x8 matvec, N=2^14, ``hoisted=False``)
with the source's transform as a task of its own and every rotation in one pass reading its
digits' own rows from that transform (``own``: the code), the same without the own rows
(``split``: ``c_ntt`` dropped, every digit transformed), the batch as change 48 left it
(``s19``: the first rotation's ModUp transforms the source, the later ones run in one pass),
and the ModUp and inner product as two launches (``two``). Graph device us and
``Graph.launch`` host us (four rounds alternated), eager host ms; one process; every variant
checked bit-identical to the code's eager call first.

Needs ``change49_own_rows.patch`` applied (change 49's code and
``bench._example18.first_rotation_unfused_backend``).

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s20/source_task.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from own_rows import transformed_own_rows  # noqa: E402  (rotate_keyswitch ignoring c_ntt)

from bench._example18 import (  # noqa: E402
    compare_backends,
    example18,
    first_rotation_unfused_backend,
    two_launch_backend,
)


def main() -> None:
    engine, _, ct, fn, ref = example18()
    variants = {"two": two_launch_backend(engine), "s19": first_rotation_unfused_backend(engine),
                "split": transformed_own_rows(engine), "own": engine.backend}
    keys = ([f"{v} device_us" for v in variants]
            + [f"{v} launch_us" for v in ("s19", "own")]
            + ["s19 eager_ms", "own eager_ms"])
    compare_backends(engine, variants, fn, ct, ref, keys)


if __name__ == "__main__":
    main()
