"""Pattern 7: share a decrypted result without exposing the key (noise flooding).

A decryption holds the computation's error, and the error depends on the secret key: a
party that sees decrypted results of computations it knows can recover the key (Li and
Micciancio). Before a result leaves the key owner, decrypt it with noise flooding:

1. calibrate: run the same computation on sample inputs under throwaway keys (a second engine
   of the same preset) and measure its error with ``measure_error_bits``;
2. decrypt the real result with ``flooding=NoiseFlooding(error_bits=..., queries=...)``: fresh
   Gaussian noise that hides that error, sized for how many flooded results under this key
   may be seen over its lifetime.

Flooding costs precision: a slot gets an extra error of standard deviation about
``sigma * sqrt(N / 2) / scale`` (``NoiseFlooding.slot_noise``). At the presets' scale 2**40, N=2^14 and 1000 shared results
that is about 0.1, so results meant to be shared want a larger scale: this example uses a
``ParametersLiteral`` with scale 2**50 (50-bit primes to rescale by, a 60-bit last prime),
which brings it to about 1.5e-4. It prints the owner's own error and the shared result's.

Runs anywhere: on a GPU at N=2^14 (128-bit secure), otherwise on the NumPy engine at N=2^12
(insecure, fast).

    python examples/07_shared_result_noise_flooding.py
"""

import numpy as np

from fhelium_cupy.ckks import CkksEngine, NoiseFlooding, ParametersLiteral, linalg
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

if cuda_unavailable_reason() is None:
    log_n, device, insecure = 14, "cuda", False
else:
    print(f"no GPU ({cuda_unavailable_reason()}): NumPy engines, insecure N=2^12")
    log_n, device, insecure = 12, "cpu", True
preset = ParametersLiteral(log_n=log_n, q_bits=(50, 50, 60), p_bits=(61,), scale=2.0**50, name="shared-results-scale50")

n = 8
rng = np.random.default_rng(7)  # public test data; the engines' secrets come from the OS CSPRNG
matrix = rng.uniform(-1, 1, (n, n)) / n


def evaluate(engine: CkksEngine, x: np.ndarray):
    """The computation whose results are shared: A x, encrypted."""
    ct = engine.encrypt_message(linalg.periodic_message(x, engine.num_slots))
    diagonals = linalg.encode_diagonals(engine, matrix)
    keys = engine.rotation_keys(linalg.required_rotation_steps(n))
    return linalg.matrix_vector(ct, engine=engine, diagonals=diagonals, rotation_keys=keys)


# -- 1. calibration: throwaway keys, sample inputs, one bit of margin ----------------------
probe = CkksEngine(preset, device=device, insecure=insecure)
samples = [rng.uniform(-1, 1, n) for _ in range(4)]
measured = [probe.measure_error_bits(evaluate(probe, x), linalg.periodic_message(matrix @ x, probe.num_slots))
            for x in samples]
flooding = NoiseFlooding(error_bits=max(measured) + 1, queries=1000)
print(f"calibrated error 2**{max(measured):.1f}; flooding sigma 2**{flooding.sigma_bits:.1f} "
      f"({flooding.queries} shared results, {flooding.statistical_security}-bit statistical security)")

# -- 2. the owner's real computation ------------------------------------------------------
owner = CkksEngine(preset, device=device, insecure=insecure)
x = rng.uniform(-1, 1, n)
y = evaluate(owner, x)
private = owner.decrypt_message(y, real=True)[:n]  # stays with the owner
shared = owner.decrypt_message(y, real=True, flooding=flooding)[:n]  # may leave
expected = matrix @ x
spread = flooding.slot_noise(owner.context.ring_degree, y.scale)

print("A @ x          :", np.round(expected, 4))
print("shared result  :", np.round(shared, 4))
print(f"owner's own view: max abs error {np.max(np.abs(private - expected)):.3e}")
print(f"shared result: largest error {np.max(np.abs(shared - expected)):.2e} "
      f"(flooding noise per slot: standard deviation {spread:.2e})")
