"""Change 48's follow-ups side by side: example 18 (8x8 matvec, N=2^14, ``hoisted=False``)
with the ModUp and inner product as two launches (``two``), fused with a rotated copy of c1
before the ModUp (``copy``: change 48 as first committed, ``FHE_KIP_GALOIS_LOAD=0``), fused with
the ModUp's column kernel reading c1 through the Galois map (``load``: the default now), and
that with the fused kernel's sums in shared memory (``shared``: ``FHE_NTT_KIP_SHARED_ACC=1``).
Graph device us (four rounds alternated), ``Graph.launch`` host us and eager host ms, one
process; every variant bit-identical to the code's eager call.

Usage, from the repository root: python3 bench/results/2026-11-30-s19/fused_variants2.py
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
    variants = {"two": two_launch_backend(engine), "copy": built_backend(engine, "-DFHE_KIP_GALOIS_LOAD=0"),
                "load": engine.backend, "shared": built_backend(engine, "-DFHE_NTT_KIP_SHARED_ACC=1")}
    keys = [f"{v} device_us" for v in variants] + [f"{v} launch_us" for v in ("two", "load")]
    compare_backends(engine, variants, fn, ct, ref, keys + ["two eager_ms", "load eager_ms"])


if __name__ == "__main__":
    main()
