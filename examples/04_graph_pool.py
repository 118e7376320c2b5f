"""Pattern 4: several graph programs (one per matrix) sharing scratch in one CudaGraphPool.

Each program keeps its own input buffer and retained output; temporaries come from the
pool's shared scratch, and the pool's event chain keeps members from running at once,
so replay order may differ from capture order. Needs a CUDA GPU.

    python examples/04_graph_pool.py
"""

import sys
from functools import partial

import numpy as np

from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

if (reason := cuda_unavailable_reason()) is not None:
    print(f"CudaGraphPool needs a CUDA GPU: {reason}.")
    sys.exit(0)

from fhelium_cupy.ckks import CkksEngine, linalg
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram
from fhelium_cupy.runtime.pool import CudaGraphPool

engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
n = 8
rng = np.random.default_rng(0)
rotation_keys = engine.rotation_keys(linalg.required_rotation_steps(n))


def encrypt(x):
    return engine.encrypt_message(linalg.periodic_message(x, engine.num_slots))


matrices = [rng.uniform(-1, 1, (n, n)) / n for _ in range(4)]  # e.g. four layers of a model
prototype = encrypt(np.zeros(n))
with CudaGraphPool("cuda") as pool:
    programs = []
    for matrix in matrices:
        schedule = partial(linalg.matrix_vector, engine=engine,
                           diagonals=linalg.encode_diagonals(engine, matrix), rotation_keys=rotation_keys)
        programs.append(CudaGraphProgram.capture(schedule, example_inputs=(prototype,), pool=pool))
    print(f"{len(programs)} programs share {pool.scratch_reserved_bytes / 2**20:.1f} MiB of scratch")
    x = rng.uniform(-1, 1, n)
    ct = encrypt(x)
    outputs = [program.replay(ct) for program in reversed(programs)]  # any order; outputs are separate
    for matrix, out in zip(reversed(matrices), outputs):
        y = engine.decrypt_message(out, real=True)[:n]
        print(f"max abs error {np.max(np.abs(y - matrix @ x)):.3e}")
# closing the pool closes its member programs
