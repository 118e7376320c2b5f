"""Noise flooding for decryptions whose results leave the secret holder (IND-CPA-D).

A CKKS decryption returns the message *plus the ciphertext's error*, and the error is a
function of the secret: Li and Micciancio (EUROCRYPT 2021) recover the secret key from
a few decrypted results of known computations. When decrypted values are shared (with
the server that computed them, with other parties), the decryptor should add fresh
noise large enough to hide the error before decoding. Li, Micciancio, Schultz and
Sorrell (CRYPTO 2022) prove that discrete Gaussian noise suffices; this module takes its
standard deviation as OpenFHE's ``NOISE_FLOODING_DECRYPT`` does (OpenFHE's
``CKKS_NOISE_FLOODING.md``, which drops a ``sqrt(2n)`` factor of that paper's Corollary 2):

    sigma = sqrt(12 * tau) * 2**(s / 2) * t

for ``tau`` decryptions an adversary may see, ``s`` bits of statistical security (at least
30 is the usual advice) and ``t`` a bound on the ciphertext's error. Here ``t`` bounds the
error's largest coefficient (``CkksEngine.measure_error_bits``), a larger and so more
conservative number than OpenFHE's estimate from the spread of the imaginary parts.
:class:`NoiseFlooding` holds the three numbers; ``CkksEngine.decrypt(..., flooding=...)``
adds the noise, from the OS CSPRNG, to the decrypted polynomial's coefficients before it is
decoded.

What the guarantee assumes: ``t`` bounds the error of every ciphertext decrypted under the
key, which holds when an honest-but-curious evaluator runs the agreed computation on inputs
like those of the calibration. A ``t`` measured on sample inputs is an estimate, not a worst
case (CKKS error grows with the messages), so calibrate on the largest inputs the
application allows and add a margin; a malicious evaluator can inflate the error, and no
flooding sized in advance covers that. ``tau`` counts every flooded decryption under the
secret key over its lifetime (each batch entry, each repeated decryption), not only those of
one computation. :data:`FLOODED_DECRYPTIONS` counts them per secret key in this process, and
``CkksEngine.decrypt`` refuses a flooded decryption that would take the count past the
``queries`` of its ``NoiseFlooding``; decryptions in other processes, or before a key was
saved and loaded again, are the caller's to count.

The price is precision: a slot's real and imaginary parts each get an extra error of
standard deviation about ``sigma * sqrt(N / 2) / scale`` (:meth:`NoiseFlooding.slot_noise`).
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["FLOODED_DECRYPTIONS", "MAX_FLOODING_SIGMA_BITS", "FloodedDecryptionLedger", "NoiseFlooding"]

MAX_FLOODING_SIGMA_BITS = 56.0
"""The largest flooding noise: its 9-sigma tail (the sampler's cut) stays below 2**62, the bound
of the library's int64 coefficients."""

_MAX_QUERIES = 1 << 64
_MAX_STATISTICAL_SECURITY = 128


@dataclass(frozen=True)
class NoiseFlooding:
    """How much noise a flooded decryption adds: ``sigma = sqrt(12 * queries) * 2**(statistical_security
    / 2) * 2**error_bits`` (module docstring).

    Args:
        error_bits: ``log2`` of a bound on the error of the ciphertexts decrypted, in coefficient
            units (the largest |coefficient| of ``phase - scale * message``); measure it with
            ``CkksEngine.measure_error_bits`` on the largest sample inputs, and add a margin.
            At most 64.
        queries: how many flooded decryptions under this secret key an adversary may see, over
            the key's lifetime (each batch entry counts). At most 2**64.
        statistical_security: ``s`` (30 or more is the usual advice; at most 128).

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
        try:
            e = float(e)
        except OverflowError:
            e = math.inf
        if not 0.0 <= e <= 64.0:  # NaN fails too
            raise ValueError(f"error_bits must be in [0, 64], got {self.error_bits!r}")
        for name, value, high in (("queries", q, _MAX_QUERIES), ("statistical_security", s, _MAX_STATISTICAL_SECURITY)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if not 1 <= int(value) <= high:
                raise ValueError(f"{name} must be in [1, {high}], got {value}")
        object.__setattr__(self, "error_bits", e)
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

    def slot_noise(self, ring_degree: int, scale: float) -> float:
        """Standard deviation the flooding adds to a decoded slot's real (or imaginary) part at
        ``ring_degree`` N and ``scale``: ``sigma * sqrt(N / 2) / scale``."""
        return self.sigma * math.sqrt(ring_degree / 2) / scale

    def check_fits(self, modulus_bits: float, level: int) -> None:
        """ValueError unless 16 sigma (the sampler's 9-sigma tail with a margin) stays below half
        the level's modulus (``modulus_bits = log2`` of it): past that the flooded phase wraps
        around. The message itself must leave room too: ``|scale * m + e| + 9 sigma`` below half
        the modulus, which this cannot check."""
        if self.sigma_bits + 5 >= modulus_bits:
            raise ValueError(
                f"flooding noise of sigma = 2**{self.sigma_bits:.1f} does not fit the modulus of level {level} "
                f"(2**{modulus_bits:.1f}); decrypt at a level with more primes or flood less"
            )

    @classmethod
    def checked(cls, flooding: object) -> NoiseFlooding:
        """A freshly validated copy of ``flooding`` (a ``NoiseFlooding`` and nothing else): fields
        changed after construction (``object.__setattr__``, unpickling) are checked again.

        Raises:
            TypeError: ``flooding`` is not exactly a ``NoiseFlooding``; a field of the wrong type.
            ValueError: a field out of range.
        """
        if type(flooding) is not cls:
            raise TypeError(f"flooding must be a NoiseFlooding or None, got {type(flooding).__name__}")
        return cls(flooding.error_bits, flooding.queries, flooding.statistical_security)  # type: ignore[attr-defined]


class FloodedDecryptionLedger:
    """Flooded decryptions made under each secret key (by ``key_id``) in this process.

    The flooding noise is sized for ``queries`` decryptions an adversary may see; past that
    count the guarantee is gone, so :meth:`reserve` refuses a decryption that would exceed the
    ``queries`` of the ``NoiseFlooding`` it uses. Thread-safe. Counts only grow (a refused or
    failed decryption adds nothing); they live as long as the process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def count(self, key_id: str) -> int:
        """Flooded decryptions made under the secret ``key_id`` so far (each batch entry counts)."""
        with self._lock:
            return self._counts.get(key_id, 0)

    @contextmanager
    def reserve(self, key_id: str, entries: int, flooding: NoiseFlooding) -> Iterator[None]:
        """Count ``entries`` flooded decryptions under ``key_id`` for the ``with`` body, which
        makes them; taken back if the body raises (no result left it).

        Raises:
            ValueError: the count would pass ``flooding.queries``; nothing is counted.
        """
        with self._lock:
            used = self._counts.get(key_id, 0)
            if used + entries > flooding.queries:
                raise ValueError(
                    f"flooded decryption refused: {used} flooded decryptions were made under secret {key_id} in this "
                    f"process and this one adds {entries}, past the {flooding.queries} queries its NoiseFlooding is "
                    "sized for; size one for more queries (more noise) or decrypt under a new key"
                )
            self._counts[key_id] = used + entries
        try:
            yield
        except BaseException:
            with self._lock:
                self._counts[key_id] -= entries
            raise


FLOODED_DECRYPTIONS = FloodedDecryptionLedger()
"""The process's ledger, which ``CkksEngine.decrypt(..., flooding=...)`` counts in."""
