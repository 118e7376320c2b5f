"""Pattern 2: capture the evaluator once, replay it with new encrypted inputs.

Needs a CUDA GPU (prints why and exits 0 without one).

    python examples/02_capture_and_replay.py
"""

import sys
from functools import partial

import numpy as np

from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

if (reason := cuda_unavailable_reason()) is not None:
    print(f"CUDA Graph capture needs a CUDA GPU: {reason}. Try examples/01_eager_call.py on this machine.")
    sys.exit(0)

from fhelium_cupy.ckks import CkksEngine, linalg
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
n = 8
rng = np.random.default_rng(0)
matrix = rng.uniform(-1, 1, (n, n)) / n
rotation_keys = engine.rotation_keys(linalg.required_rotation_steps(n))
diagonals = linalg.encode_diagonals(engine, matrix)
schedule = partial(linalg.matrix_vector, engine=engine, diagonals=diagonals, rotation_keys=rotation_keys)


def encrypt(x):
    return engine.encrypt_message(linalg.periodic_message(x, engine.num_slots))


# Keys and diagonals are static state of the closure; the ciphertext is the dynamic input.
program = CudaGraphProgram.capture(schedule, example_inputs=(encrypt(np.zeros(n)),))
print(f"captured in {program.stats.capture_seconds:.3f} s (warmup {program.stats.warmup_seconds:.3f} s)")

with program:
    kept = []
    for i in range(3):
        x = rng.uniform(-1, 1, n)
        borrowed = program.replay(encrypt(x))  # graph storage: overwritten by the next replay
        y = engine.decrypt_message(borrowed, real=True)[:n]
        print(f"replay {i}: max abs error {np.max(np.abs(y - matrix @ x)):.3e}")
        kept.append((x, program.replay(encrypt(x), copy_output=True)))  # owned: survives later replays
    for i, (x, owned) in enumerate(kept):
        y = engine.decrypt_message(owned, real=True)[:n]
        print(f"owned copy {i} after all replays: max abs error {np.max(np.abs(y - matrix @ x)):.3e}")
