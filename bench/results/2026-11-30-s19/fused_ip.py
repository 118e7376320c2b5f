"""Change 48 side by side: example 18 (8x8 matvec, N=2^14, ``hoisted=False``) with each later
rotation's ModUp chunk stages and key inner product in one kernel (``fused``:
``CupyBackend.rotate_keyswitch``) against the ModUp and the inner product as two launches with
the digits stored between them (``two``: the code before). Graph device us, ``Graph.launch``
host us and eager host ms, four rounds alternated, one process; both bit-identical to the
code's eager call. Also the example at n=16 (graph device us only, three rounds).

Usage, from the repository root: python3 bench/results/2026-11-30-s19/fused_ip.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, capture_checked, example18, variant_measure  # noqa: E402


def compare(n: int, rounds: int, eager: bool) -> None:
    """Both variants of example 18 at size ``n``: checked, then measured side by side."""
    engine, _, ct, fn, ref = example18(n)
    backend = engine.backend
    variants = {"fused": backend.rotate_keyswitch, "two": lambda *args, **kwargs: None}

    def use(name: str) -> None:
        backend.rotate_keyswitch = variants[name]

    programs = capture_checked(list(variants), use, lambda: use("fused"), fn, ct, ref, prefix=f"n={n} ")
    stream = cupy.cuda.Stream(non_blocking=True)

    measure = variant_measure(programs, use, lambda: use("fused"), fn, ct, stream)

    whats = ("device_us", "launch_us", "eager_ms") if eager else ("device_us",)
    print(f"n={n}", flush=True)
    alternate([f"{v} {w}" for v in variants for w in whats], rounds, measure, digits=3)
    for program in programs.values():
        program.close()


def main() -> None:
    compare(8, 4, eager=True)
    compare(16, 3, eager=False)


if __name__ == "__main__":
    main()
