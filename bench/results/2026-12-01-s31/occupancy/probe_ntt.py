"""ncu probe (run from the tree's root): forward + inverse NTT of a [2, 34, 2^16] ciphertext on
bench/kernels_gpu.py's n16d4 context, the backend built with the -D defines of $PROBE_DEFINES
(space separated), the profiled range one call after three warmups."""
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
import cupy as cp  # noqa: E402

from bench.kernels_gpu import make_sets  # noqa: E402
from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend  # noqa: E402
from fhelium_cupy.runtime.kernels import KernelOptions  # noqa: E402

ctx = make_sets()["n16d4"][1]
defines = tuple(os.environ.get("PROBE_DEFINES", "").split())
be = CupyBackend(ctx, kernel_options=KernelOptions(extra=defines))
rows = tuple(range(ctx.q_count))
rng = np.random.default_rng(1)
a = be.asarray(np.stack([rng.integers(0, ctx.moduli[r], (2, ctx.ring_degree), dtype=np.uint64) for r in rows], axis=-2))
for _ in range(3):
    be.ntt_inverse(be.ntt_forward(a, rows), rows)
cp.cuda.Device().synchronize()
cp.cuda.runtime.profilerStart()
be.ntt_inverse(be.ntt_forward(a, rows), rows)
cp.cuda.Device().synchronize()
cp.cuda.runtime.profilerStop()
print("ok", defines)
