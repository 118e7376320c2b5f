"""Pattern 1: an ordinary eager call of the encrypted matrix-vector evaluator.

Runs anywhere: on a GPU with the secure N=2^14 preset, otherwise on the NumPy engine with
the fast insecure N=2^12 test preset (seconds).

    python examples/01_eager_call.py
"""

from functools import partial

import numpy as np

from fhelium_cupy.ckks import CkksEngine, linalg
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

if cuda_unavailable_reason() is None:
    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
else:
    print(f"no GPU ({cuda_unavailable_reason()}): NumPy engine, insecure test preset")
    engine = CkksEngine("test-n4096-scale40", device="cpu", insecure=True)

n = 8
rng = np.random.default_rng(0)  # public test data; the engine's secrets come from the OS CSPRNG
matrix = rng.uniform(-1, 1, (n, n)) / n
x = rng.uniform(-1, 1, n)

rotation_keys = engine.rotation_keys(linalg.required_rotation_steps(n))
diagonals = linalg.encode_diagonals(engine, matrix)
schedule = partial(linalg.matrix_vector, engine=engine, diagonals=diagonals, rotation_keys=rotation_keys)

source = engine.encrypt_message(linalg.periodic_message(x, engine.num_slots))
output = schedule(source)  # eager: every kernel launched from Python
y = engine.decrypt_message(output, real=True)[:n]
print("A @ x     :", np.round(matrix @ x, 6))
print("decrypted :", np.round(y, 6))
print(f"max abs error {np.max(np.abs(y - matrix @ x)):.3e}")
