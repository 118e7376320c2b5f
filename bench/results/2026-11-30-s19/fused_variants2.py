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

import cupy  # noqa: E402

from bench._example18 import alternate, capture_checked, example18, variant_measure  # noqa: E402
from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend  # noqa: E402
from fhelium_cupy.runtime.kernels import KernelOptions  # noqa: E402


def main() -> None:
    engine, _, ct, fn, ref = example18()
    default = engine.backend

    def built(*defines: str) -> CupyBackend:
        return CupyBackend(engine.context, "cuda", kernel_options=KernelOptions(extra=defines))

    two = built()
    two.rotate_keyswitch = lambda *args, **kwargs: None
    variants = {"two": two, "copy": built("-DFHE_KIP_GALOIS_LOAD=0"), "load": default,
                "shared": built("-DFHE_NTT_KIP_SHARED_ACC=1")}

    def use(name: str | None) -> None:
        engine.backend = variants[name] if name else default

    programs = capture_checked(list(variants), use, lambda: use(None), fn, ct, ref)

    stream = cupy.cuda.Stream(non_blocking=True)

    measure = variant_measure(programs, use, lambda: use(None), fn, ct, stream)
    keys = [f"{v} device_us" for v in variants] + [f"{v} launch_us" for v in ("two", "load")]
    alternate(keys + ["two eager_ms", "load eager_ms"], 4, measure, digits=3)


if __name__ == "__main__":
    main()
