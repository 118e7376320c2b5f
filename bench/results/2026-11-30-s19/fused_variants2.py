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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, example18, graph_device_us, launch_host_us  # noqa: E402
from bench._timing import cuda_sync, time_host  # noqa: E402
from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402
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

    programs = {}
    for name in variants:
        use(name)
        try:
            assert np.array_equal(fn(ct).data.get(), ref), name
            programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        finally:
            use(None)
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref), name
        print(f"{name}: eager and graph bit-identical to the code's eager call", flush=True)

    stream = cupy.cuda.Stream(non_blocking=True)

    def measure(key: str) -> float:
        name, what = key.split()
        if what == "device_us":
            return graph_device_us(programs[name].cuda_graph, stream)
        if what == "launch_us":
            return launch_host_us(programs[name].cuda_graph, stream, 8)
        use(name)
        try:
            return time_host(lambda: fn(ct), runs=30, warmup=3, synchronize=cuda_sync)["median_ms"]
        finally:
            use(None)

    keys = [f"{v} device_us" for v in variants] + [f"{v} launch_us" for v in ("two", "load")]
    alternate(keys + ["two eager_ms", "load eager_ms"], 4, measure, digits=3)


if __name__ == "__main__":
    main()
