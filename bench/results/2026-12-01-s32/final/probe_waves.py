"""Wave-quantization probe (run from the tree's root): device time of the forward and inverse
NTT of a [2, r, 2^16] ciphertext for r = 28..34 Q rows of bench/kernels_gpu.py's n16d4 context,
with the `_f64` chunk kernels (4 blocks an SM: 528 blocks a wave) and without them
(FHE_NTT_F64_CHUNK=0: 3 blocks, 396 a wave). The chunk grid is 2 x r x 16 blocks, so r = 33 is
exactly two `_f64` waves and r = 34 two and 32 blocks. 20 back-to-back calls a sample, CUDA
events, median of 15 samples; prints one line per (variant, r) and writes JSON to argv[1]."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
import cupy as cp  # noqa: E402

from bench.kernels_gpu import make_sets  # noqa: E402
from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend  # noqa: E402
from fhelium_cupy.runtime.kernels import KernelOptions  # noqa: E402

ctx = make_sets(["n16d4"])["n16d4"][1]
out = {}
for variant, defines in (("f64", ()), ("main", ("-DFHE_NTT_F64_CHUNK=0",)), ("f64_b", ()), ("main_b", ("-DFHE_NTT_F64_CHUNK=0",))):
    be = CupyBackend(ctx, kernel_options=KernelOptions(extra=defines))
    rng = np.random.default_rng(1)
    for r in range(28, 35):
        rows = tuple(range(r))
        a = be.asarray(np.stack([rng.integers(0, ctx.moduli[i], (2, ctx.ring_degree), dtype=np.uint64) for i in rows], axis=-2))
        res = {}
        for name, fn in (("forward", lambda: be.ntt_forward(a, rows)), ("inverse", lambda: be.ntt_inverse(a, rows))):  # noqa: B023 (called within the iteration)
            for _ in range(5):
                fn()
            times = []
            for _ in range(15):
                s, e = cp.cuda.Event(), cp.cuda.Event()
                s.record()
                for _ in range(20):
                    fn()
                e.record()
                e.synchronize()
                times.append(cp.cuda.get_elapsed_time(s, e) * 1e3 / 20)
            res[name] = float(np.median(times))
        out[f"{variant}/{r}"] = res
        print(f"{variant:7s} rows {r:2d} blocks {2 * r * 16:5d}  forward {res['forward']:6.2f} us  inverse {res['inverse']:6.2f} us"
              f"  per row {res['forward'] / (2 * r):5.3f} / {res['inverse'] / (2 * r):5.3f}", flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
