"""Pattern 3: copy pinned host inputs on a transfer stream, replay on a compute stream.

``copy_inputs_from`` enqueues the host-to-device copy and returns a CopyHandle;
``replay_prepared(copy_handle=...)`` makes the compute stream wait for it (no host block)
and launches the graph. The next copy automatically waits for the previous replay, so
it never overwrites inputs the graph is still reading. Needs a CUDA GPU.

    python examples/03_pinned_transfer_replay_prepared.py
"""

import sys
from functools import partial

import numpy as np

from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

if (reason := cuda_unavailable_reason()) is not None:
    print(f"pinned transfers and graph replay need a CUDA GPU: {reason}.")
    sys.exit(0)

import cupy

from fhelium_cupy.ckks import CkksEngine, linalg
from fhelium_cupy.runtime import pin_value_tree
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


program = CudaGraphProgram.capture(schedule, example_inputs=(encrypt(np.zeros(n)),))

# Requests arrive as host-resident ciphertexts (e.g. deserialized); pin them once.
requests = []
for _ in range(4):
    x = rng.uniform(-1, 1, n)
    requests.append((x, pin_value_tree(encrypt(x))))  # page-locked host copy, same signature

transfer = cupy.cuda.Stream(non_blocking=True)
compute = cupy.cuda.Stream(non_blocking=True)
with program:
    for i, (x, pinned) in enumerate(requests):
        handle = program.copy_inputs_from(pinned, stream=transfer, non_blocking=True)
        with compute:
            owned = program.replay_prepared(copy_handle=handle, copy_output=True)
        compute.synchronize()
        y = engine.decrypt_message(owned, real=True)[:n]
        print(f"request {i}: {handle.bytes_copied / 2**20:.1f} MiB H2D, max abs error {np.max(np.abs(y - matrix @ x)):.3e}")
