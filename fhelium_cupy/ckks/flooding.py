"""Noise flooding for decryptions whose results leave the secret holder (IND-CPA-D).

A CKKS decryption returns the message *plus the ciphertext's error*, and the error is a
function of the secret: Li and Micciancio (EUROCRYPT 2021) recover the secret key from
a few decrypted results of known computations. When decrypted values are shared (with
the server that computed them, with other parties), the decryptor should add fresh
noise large enough to hide the error before decoding. Li, Micciancio, Schultz and
Sorrell (CRYPTO 2022) prove that Gaussian noise suffices; OpenFHE's
``NOISE_FLOODING_DECRYPT`` takes its standard deviation as

    sigma = sqrt(12 * tau) * 2**(s / 2) * t

for ``tau`` decryption queries an adversary may see, ``s`` bits of statistical security
(at least 30 is the usual advice) and ``t`` a bound on the ciphertext's error (its largest
coefficient). :class:`NoiseFlooding` holds those three numbers; ``CkksEngine.decrypt(...,
flooding=...)`` adds the noise to the decrypted polynomial's coefficients, from the OS
CSPRNG, before it is decoded. ``CkksEngine.measure_error_bits`` measures ``log2 t`` for a
computation on inputs whose result is known.

The price is precision: a slot then carries an extra error of about ``sigma * sqrt(N) /
scale`` (the norm of N coefficients of standard deviation sigma through the decoding).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from .encoding import integers_to_rns
from .sampling import sample_rounded_gaussian

__all__ = ["MAX_FLOODING_SIGMA_BITS", "NoiseFlooding", "flood_residues"]

MAX_FLOODING_SIGMA_BITS = 56.0
"""The largest flooding noise: 9 sigma (the sampler's tail) stays below 2**62, the bound of the
library's int64 coefficients."""


@dataclass(frozen=True)
class NoiseFlooding:
    """How much noise a flooded decryption adds: ``sigma = sqrt(12 * queries) * 2**(statistical_security
    / 2) * 2**error_bits`` (module docstring).

    Args:
        error_bits: ``log2`` of a bound on the error of the ciphertexts decrypted, in coefficient
            units (the largest |coefficient| of ``phase - scale * message``); measure it with
            ``CkksEngine.measure_error_bits`` on sample inputs, with a margin.
        queries: how many decrypted results of this computation an adversary may see.
        statistical_security: ``s``; an adversary succeeds with probability at most ``2**-s``
            (30 or more is the usual advice).

    Raises:
        TypeError: a field of the wrong type (bools are refused).
        ValueError: a field out of range, or a sigma above ``2**MAX_FLOODING_SIGMA_BITS``.
    """

    error_bits: float
    queries: int
    statistical_security: int = 30

    def __post_init__(self) -> None:
        e, q, s = self.error_bits, self.queries, self.statistical_security
        if isinstance(e, bool) or not isinstance(e, numbers.Real):
            raise TypeError(f"error_bits must be a real number, got {type(e).__name__}")
        if not math.isfinite(float(e)) or float(e) < 0:
            raise ValueError(f"error_bits must be finite and >= 0, got {e!r}")
        for name, value, low in (("queries", q, 1), ("statistical_security", s, 1)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        object.__setattr__(self, "error_bits", float(e))
        object.__setattr__(self, "queries", int(q))
        object.__setattr__(self, "statistical_security", int(s))
        if self.sigma_bits > MAX_FLOODING_SIGMA_BITS:
            raise ValueError(
                f"the flooding noise would be sigma = 2**{self.sigma_bits:.1f}, above the largest supported "
                f"2**{MAX_FLOODING_SIGMA_BITS:.0f} (int64 coefficients): fewer queries, a lower statistical "
                "security or a computation with less error"
            )

    @property
    def sigma_bits(self) -> float:
        """``log2`` of the noise's standard deviation."""
        return 0.5 * math.log2(12 * self.queries) + self.statistical_security / 2 + self.error_bits

    @property
    def sigma(self) -> float:
        """The noise's standard deviation, in coefficient units."""
        return 2.0**self.sigma_bits

    def check_fits(self, modulus_bits: float, level: int) -> None:
        """ValueError unless the noise's tail (16 sigma) stays below half the level's modulus
        (``modulus_bits = log2`` of it): past that the flooded phase wraps around."""
        if self.sigma_bits + 5 >= modulus_bits:
            raise ValueError(
                f"flooding noise of sigma = 2**{self.sigma_bits:.1f} does not fit the modulus of level {level} "
                f"(2**{modulus_bits:.1f}); decrypt at a level with more primes or flood less"
            )


def flood_residues(residues: np.ndarray, moduli, sigma: float) -> np.ndarray:
    """``residues [*batch, L, N]`` (canonical uint64) plus one fresh rounded Gaussian polynomial of
    standard deviation ``sigma`` per batch entry, reduced mod each of the L ``moduli``."""
    residues = np.asarray(residues, dtype=np.uint64)
    lead, n = residues.shape[:-2], residues.shape[-1]
    noise = integers_to_rns(sample_rounded_gaussian(lead + (n,), sigma), moduli)
    q = np.array([int(m) for m in moduli], dtype=np.uint64)[:, None]
    total = residues + noise  # both below q < 2**63: no wrap
    return np.where(total >= q, total - q, total)
