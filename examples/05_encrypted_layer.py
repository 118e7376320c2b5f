"""Pattern 5: an encrypted dense layer with a square activation, captured as one graph.

``y = (A x) ** 2`` slot-wise on an encrypted ``x``: the double-hoisted matrix-vector product
(one ModUp, one ModDown and the rescale in the same division, with NTT output for the
product that follows), then a ciphertext product
whose relinearization also rescales (``relinearize(..., rescale=True)``: one rounding
division by ``P q`` instead of a ModDown and a rescale). The whole layer is one
``CudaGraphProgram``; its replays decrypt to the cleartext layer.

Without a GPU it runs the same layer eagerly on the NumPy engine (an insecure test preset,
for speed) and says that capture needs one.

    python examples/05_encrypted_layer.py
"""

import sys

import numpy as np

from fhelium_cupy.ckks import CkksEngine, linalg
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

reason = cuda_unavailable_reason()
if reason is None:
    engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
else:
    print(f"no GPU ({reason}): the layer runs eagerly on the NumPy engine, insecure test preset; capture needs a GPU")
    engine = CkksEngine("test-n4096-scale40", device="cpu", insecure=True)
n = 8
rng = np.random.default_rng(5)
matrix = rng.uniform(-1, 1, (n, n)) / n
rotation_keys = engine.rotation_keys(linalg.required_rotation_steps(n))
diagonals = linalg.encode_diagonals(engine, matrix)
relinearization_key = engine.relinearization_key()


def layer(ct):
    """Encrypted ``(A x) ** 2``: level 0 in, level 2 out (two primes consumed)."""
    # NTT output: the product below takes NTT values, and the matvec's division then
    # transforms back only the rows it divides out
    z = linalg.matrix_vector(ct, engine=engine, diagonals=diagonals, rotation_keys=rotation_keys, output_domain="ntt")
    return engine.relinearize(engine.multiply(z, z), relinearization_key, rescale=True)


def encrypt(x):
    return engine.encrypt_message(linalg.periodic_message(x, engine.num_slots))


def report(label, y, x):
    got = engine.decrypt_message(y, real=True)[:n]
    print(f"{label}: level {y.level}, max abs error {np.max(np.abs(got - (matrix @ x) ** 2)):.3e}")


if reason is not None:  # no GPU: the same layer, eager
    for i in range(3):
        x = rng.uniform(-1, 1, n)
        report(f"eager {i}", layer(encrypt(x)), x)
    sys.exit(0)

from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402 - the GPU path only

program = CudaGraphProgram.capture(layer, example_inputs=(encrypt(np.zeros(n)),))
print(f"captured in {program.stats.capture_seconds:.3f} s; first replay {program.stats.first_replay_seconds * 1e3:.2f} ms")

with program:
    for i in range(3):
        x = rng.uniform(-1, 1, n)
        report(f"replay {i}", program.replay(encrypt(x)), x)  # borrowed: read before the next replay
