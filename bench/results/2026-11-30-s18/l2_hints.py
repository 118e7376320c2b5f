"""Can example 18's serial tail read its inputs from L2? (8x8 matvec, N=2^14, ``hoisted=False``.)

The tail after the join (product-sum of the rotation batch with the diagonals, inverse NTT,
rescale) costs 35 us inside the matvec against 21.7 us alone, because the batch (16 MB,
written by the branches' ModDown combines) and the diagonals (8.4 MB of Q limbs) come from
DRAM after 130+ MB of keys and digits went through the 50 MB L2. Variants, each a graph of
its own, four rounds alternated (graph device us):

  base:     the code;
  store:    the combine's stores with an L2 evict_last policy (a backend built with
            -DFHE_COMBINE_STORE_L2_LAST=1), so the batch stays in L2;
  prefetch: a kernel before the fork prefetches the diagonals into L2 (prefetch.global.
            L2::evict_last, one 128-byte line per thread);
  both:     the two together.

Usage, from the repository root: python3 bench/results/2026-11-30-s18/l2_hints.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, example18, graph_device_us  # noqa: E402
from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402
from fhelium_cupy.runtime.kernels import KernelOptions  # noqa: E402

PREFETCH = cupy.RawKernel(
    r"""extern "C" __global__ void prefetch_l2_last(const unsigned long long* p, long long words) {
        const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 16;  // 128 bytes
        if (i < words) asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(p + i));
    }""",
    "prefetch_l2_last",
)


def main() -> None:
    engine, _, ct, fn, ref = example18()
    diagonals = fn.keywords["diagonals"]

    words = diagonals.data.size
    lines = -(-words // 16)
    original = CupyBackend.run_independent

    def prefetching(self, tasks) -> None:
        PREFETCH((-(-lines // 256),), (256,), (diagonals.data, np.int64(words)))
        original(self, tasks)

    default = engine.backend
    stored = CupyBackend(engine.context, "cuda", kernel_options=KernelOptions(extra=("-DFHE_COMBINE_STORE_L2_LAST=1",)))
    variants = {"base": (default, original), "store": (stored, original), "prefetch": (default, prefetching),
                "both": (stored, prefetching)}
    programs = {}
    for name, (backend, run) in variants.items():
        engine.backend = backend
        CupyBackend.run_independent = run
        try:
            assert np.array_equal(fn(ct).data.get(), ref), name
            programs[name] = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        finally:
            engine.backend = default
            CupyBackend.run_independent = original
        assert np.array_equal(programs[name].replay(ct, copy_output=True, synchronize=True).data.get(), ref), name
        print(f"{name}: eager and graph bit-identical to the code's eager call", flush=True)

    stream = cupy.cuda.Stream(non_blocking=True)
    alternate(list(programs), 4, lambda name: graph_device_us(programs[name].cuda_graph, stream))


if __name__ == "__main__":
    main()
