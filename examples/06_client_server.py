"""Pattern 6: a client holds the secret, a server computes on ciphertexts and never sees it.

The client makes its keys, writes its public key, the rotation keys of an 8x8 matrix-vector
product and its encrypted input to files (``save_value``). The server, an engine with no
secret of its own, loads them (``load_value`` checks each file against its parameters),
computes ``A x`` on the ciphertext, adds a bias it encrypts itself under the client's public
key (``encrypt_message(..., public_key=)``), and writes the result. Only the client can
decrypt it.

Runs anywhere: on a GPU with the secure N=2^14 preset, otherwise on the NumPy engine with
the fast insecure N=2^12 test preset.

    python examples/06_client_server.py
"""

import tempfile
from pathlib import Path

import numpy as np

from fhelium_cupy.ckks import CkksEngine, linalg, load_value, save_value
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

if cuda_unavailable_reason() is None:
    preset, device, insecure = "slots8192-scale40-depth7", "cuda", False
else:
    print(f"no GPU ({cuda_unavailable_reason()}): NumPy engines, insecure test preset")
    preset, device, insecure = "test-n4096-scale40", "cpu", True

n = 8
rng = np.random.default_rng(6)  # public test data; the engines' secrets come from the OS CSPRNG
matrix = rng.uniform(-1, 1, (n, n)) / n  # the server's
bias = rng.uniform(-1, 1, n) / 4  # the server's
x = rng.uniform(-1, 1, n)  # the client's
steps = linalg.required_rotation_steps(n)

with tempfile.TemporaryDirectory() as folder:
    wire = Path(folder)

    # -- client: keys, then only public material leaves ----------------------------------
    client = CkksEngine(preset, device=device, insecure=insecure)
    client.generate_keys()
    save_value(client.keys.public_key, wire / "public_key.npz")
    for step, key in client.rotation_keys(steps).items():
        save_value(key, wire / f"rotation_{step}.npz")
    save_value(client.encrypt_message(linalg.periodic_message(x, client.num_slots)), wire / "x.npz")

    # -- server: no secret; every file checked against its own parameters ---------------
    server = CkksEngine(preset, device=device, insecure=insecure)
    public_key = load_value(wire / "public_key.npz", engine=server)
    keys = {step: load_value(wire / f"rotation_{step}.npz", engine=server) for step in steps}
    ct = load_value(wire / "x.npz", engine=server)
    y = linalg.matrix_vector(ct, engine=server, diagonals=linalg.encode_diagonals(server, matrix), rotation_keys=keys)
    b = server.encrypt_message(linalg.periodic_message(bias, server.num_slots), level=y.level, scale=y.scale,
                               public_key=public_key)
    save_value(server.add(y, b), wire / "y.npz")

    # -- client: decrypt ------------------------------------------------------------------
    result = client.decrypt_message(load_value(wire / "y.npz", engine=client), real=True)[:n]

print("A @ x + b :", np.round(matrix @ x + bias, 6))
print("decrypted :", np.round(result, 6))
print(f"max abs error {np.max(np.abs(result - (matrix @ x + bias))):.3e}")
