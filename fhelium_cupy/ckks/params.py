"""CKKS parameter sets: an unchecked literal, a validated frozen ``Parameters`` and presets.

Lattigo style: ``ParametersLiteral`` holds public, unchecked fields (ring size, prime sizes
or explicit primes, scale, digit count); ``Parameters.from_literal`` validates them
(NTT-friendly primes below 2**61, distinct, digit partition, special primes whose product
is at least half the largest digit's, sigma >= ``SIGMA_MIN_128`` and the 128-bit bound on
log2(QP)) and returns an immutable object. Presets are named literals.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..errors import ConfigurationError, InsecureParametersError
from .primes import MAX_MODULUS_BITS, generate_ntt_primes, is_ntt_friendly

__all__ = [
    "PRESETS",
    "SECURITY_BOUNDS_128",
    "SIGMA_MAX",
    "SIGMA_MIN_128",
    "Parameters",
    "ParametersLiteral",
    "balanced_digits",
    "preset_names",
]

SECURITY_BOUNDS_128: Mapping[int, int] = MappingProxyType({4096: 106, 8192: 214, 16384: 430, 32768: 868, 65536: 1747})
"""Maximum log2(QP) for 128-bit security per ring degree N (read-only: no code in the process
can loosen the check by editing it): uniform ternary secret, error of
standard deviation 3.19 (Bossuat et al., "Security Guidelines for Implementing Homomorphic
Encryption", 2024; the table FHElium uses). They are a few bits below the 2018 HE standard's
109 / 218 / 438 / 881 and the 1772 for N=2^16 this project used before: where the sources
differ, the stricter bound holds."""

SIGMA_MIN_128 = 3.19
"""Smallest error standard deviation the 128-bit bounds assume (the tables' 3.19, the rounded
8/sqrt(2 pi) = 3.1915 of the 2018 standard; FHElium's default sigma)."""

SIGMA_MAX = 1024.0
"""Largest error standard deviation a parameter set takes: the sampler's table grows with sigma
(10 sigma entries, built at key generation), and errors this wide already cost about 8 bits of
every prime's precision; 1e9 exhausted memory, 1e6 took 6 s an encryption."""


@dataclass(frozen=True)
class ParametersLiteral:
    """Unchecked description of a CKKS parameter set.

    Attributes:
        log_n: log2 of the ring degree N (slots = N/2).
        q_bits: bit sizes of the Q chain, first prime first (it is dropped by the first
            rescale; the last one is the terminal prime). Ignored when ``q_moduli`` is set.
        p_bits: bit sizes of the special primes. Ignored when ``p_moduli`` is set.
        scale: default encoding scale (e.g. ``2.0**40``).
        dnum: number of key-switching digits (contiguous, balanced groups of Q primes);
            ``None`` means one digit per Q prime.
        q_moduli / p_moduli: explicit primes (override the bit sizes).
        sigma: standard deviation of the discrete Gaussian error.
        name: label (part of the context identity).
    """

    log_n: int
    q_bits: tuple[int, ...] = ()
    p_bits: tuple[int, ...] = ()
    scale: float = 2.0**40
    dnum: int | None = None
    q_moduli: tuple[int, ...] = ()
    p_moduli: tuple[int, ...] = ()
    sigma: float = 3.2
    name: str = "custom"


def balanced_digits(q_count: int, dnum: int) -> tuple[tuple[int, ...], ...]:
    """Contiguous partition of Q ids ``0..q_count-1`` into ``dnum`` digits whose sizes differ by at most one."""
    base, extra = divmod(q_count, dnum)
    digits, start = [], 0
    for d in range(dnum):
        size = base + (1 if d < extra else 0)
        digits.append(tuple(range(start, start + size)))
        start += size
    return tuple(digits)


def _explicit_moduli(values: object, field_name: str) -> tuple[int, ...]:
    """Explicit moduli as ints: integers only (``int(1073872897.9)`` would silently be another
    prime), bools refused."""
    out = []
    for v in values:  # type: ignore[attr-defined]
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ConfigurationError(f"{field_name} must hold integers, got {type(v).__name__} {v!r}")
        out.append(int(v))
    return tuple(out)


def _generate_chain(bits: tuple[int, ...], n: int, *, balanced: bool, exclude: set[int]) -> tuple[int, ...]:
    by_size: dict[int, list[int]] = {}
    for b in bits:
        by_size.setdefault(b, [])
    for size in by_size:
        count = sum(1 for b in bits if b == size)
        by_size[size] = list(generate_ntt_primes(size, count, n, balanced=balanced, exclude=exclude))
        exclude.update(by_size[size])
    return tuple(by_size[b].pop(0) for b in bits)


@dataclass(frozen=True)
class Parameters:
    """Validated, immutable CKKS parameters. Build with ``from_literal`` or ``preset``.

    Every instance made by ``from_literal``, direct construction or ``dataclasses.replace`` is
    validated: moduli, scale, sigma, digit partition, special primes and the 128-bit security
    bound. A copy or an unpickled object skips ``__post_init__``; ``CkksContext`` checks it
    again against the security bound only. A set that misses the bound exists only with
    ``insecure=True``.

    Attributes:
        name: label of the set.
        ring_degree: N.
        q_moduli: Q chain (prime id ``i`` = ``q_moduli[i]``), first prime dropped first.
        p_moduli: special primes (prime ids ``len(q_moduli) ..``).
        scale: default encoding scale.
        digits: level-0 partition of Q prime ids into contiguous key-switching digits.
        sigma: error standard deviation.
        insecure: the caller's opt-in to a set below 128-bit security (``from_literal`` sets it
            to whether the set is insecure: ``security_issue()`` is not None).

    Raises:
        ConfigurationError: bad ring degree, moduli, scale, sigma or digits, or special primes
            whose product P is below half the largest digit's (key switching would amplify its
            error by their ratio).
        InsecureParametersError: the set is below 128-bit security and ``insecure`` is False.
    """

    name: str
    ring_degree: int
    q_moduli: tuple[int, ...]
    p_moduli: tuple[int, ...]
    scale: float
    digits: tuple[tuple[int, ...], ...]
    sigma: float = 3.2
    insecure: bool = field(default=False)

    def __post_init__(self) -> None:
        require_opt_in_flag(self.insecure)
        n = self.ring_degree
        if not isinstance(n, int) or n < 2 or n & (n - 1) or n > 1 << 17:
            raise ConfigurationError(f"ring_degree must be a power of two in [2, 2**17], got {n!r}")
        q, p = self.q_moduli, self.p_moduli
        if not q:
            raise ConfigurationError("the Q chain needs at least one prime (q_bits or q_moduli)")
        if not p:
            raise ConfigurationError("hybrid key switching needs at least one special prime (p_bits or p_moduli)")
        for m in q + p:
            if not isinstance(m, int):
                raise ConfigurationError(f"moduli must be ints, got {type(m).__name__} {m!r}")
            if m.bit_length() > MAX_MODULUS_BITS:
                raise ConfigurationError(
                    f"modulus {m} has {m.bit_length()} bits; every modulus must be below 2**{MAX_MODULUS_BITS}"
                )
            if not is_ntt_friendly(m, n):
                raise ConfigurationError(
                    f"modulus {m} is not an NTT-friendly prime for N={n}: it must be an odd prime with q = 1 (mod {2 * n})"
                )
        if len(set(q + p)) != len(q) + len(p):
            raise ConfigurationError("moduli must be pairwise distinct")
        if not isinstance(self.scale, float) or not math.isfinite(self.scale) or self.scale <= 1.0:
            raise ConfigurationError(f"scale must be a finite float > 1, got {self.scale!r}")
        if not isinstance(self.sigma, float) or not math.isfinite(self.sigma) or not 0 < self.sigma <= SIGMA_MAX:
            raise ConfigurationError(f"sigma must be a float in (0, {SIGMA_MAX:g}], got {self.sigma!r}")
        flat = tuple(i for d in self.digits for i in d)
        if any(not d for d in self.digits) or flat != tuple(range(len(q))):
            raise ConfigurationError(
                f"digits must partition the Q prime ids 0..{len(q) - 1} into contiguous non-empty groups, "
                f"got {self.digits!r}"
            )
        # Hybrid key switching divides a digit's product by P: with P much smaller than a digit
        # the key-switching error grows by their ratio and every rotation decrypts to noise.
        digit_product = max(math.prod(q[i] for i in d) for d in self.digits)
        if 2 * math.prod(p) < digit_product:
            raise ConfigurationError(
                f"the special primes' product P ({math.log2(math.prod(p)):.1f} bits) must be at least half the "
                f"largest digit's product ({math.log2(digit_product):.1f} bits), or key switching amplifies its "
                "error by their ratio: add special primes, make them larger, or use more digits (dnum)"
            )
        issue = self.security_issue()
        if issue is not None and not self.insecure:
            raise InsecureParametersError(f"{issue}; pass insecure=True (CLI: --insecure) for testing only")

    def security_issue(self) -> str | None:
        """Why this set is below 128-bit security (HE standard, ternary secret), or None.

        Checked: a tabulated bound for N, log2(QP) within it, and an error of standard
        deviation at least ``SIGMA_MIN_128`` (the bounds assume it; with a much smaller error
        the secret follows from the public key).
        """
        n = self.ring_degree
        bound = SECURITY_BOUNDS_128.get(n)
        if bound is None:
            return f"no 128-bit HE-standard bound is tabulated for N={n} (known: {sorted(SECURITY_BOUNDS_128)})"
        if self.log2_qp > bound:
            return (
                f"log2(QP) = {self.log2_qp:.1f} bits exceeds the 128-bit HE-standard bound of {bound} bits "
                f"for N={n}; use fewer or smaller primes or a larger N"
            )
        if self.sigma < SIGMA_MIN_128:
            return f"sigma = {self.sigma!r} is below the {SIGMA_MIN_128:.4f} that the 128-bit HE-standard bounds assume"
        return None

    @classmethod
    def from_literal(cls, literal: ParametersLiteral, *, insecure: bool = False) -> Parameters:
        """Validate ``literal`` (generating primes from bit sizes when needed).

        ``insecure`` must be a bool: a string such as ``"false"`` read from a config file is
        refused, not taken as an opt-in.

        Raises:
            ConfigurationError: bad ring size, non-NTT-friendly / duplicate / oversize
                primes, bad scale, sigma or digit count, or special primes below half the
                largest digit.
            InsecureParametersError: the set is below 128-bit security (``security_issue``:
                log2(QP) above the bound for N, no tabulated bound for N, or sigma below
                ``SIGMA_MIN_128``) and ``insecure`` is False.
            TypeError: ``insecure`` is not a bool.
        """
        require_opt_in_flag(insecure)
        if not isinstance(literal, ParametersLiteral):
            raise ConfigurationError(f"expected a ParametersLiteral, got {type(literal).__name__}")
        if not isinstance(literal.log_n, int) or not 1 <= literal.log_n <= 17:
            raise ConfigurationError(f"log_n must be an int in [1, 17], got {literal.log_n!r}")
        n = 1 << literal.log_n
        try:
            taken: set[int] = set()
            q = _explicit_moduli(literal.q_moduli, "q_moduli") or _generate_chain(
                tuple(literal.q_bits), n, balanced=True, exclude=taken
            )
            taken.update(q)
            p = _explicit_moduli(literal.p_moduli, "p_moduli") or _generate_chain(
                tuple(literal.p_bits), n, balanced=False, exclude=taken
            )
        except ValueError as error:
            raise ConfigurationError(f"cannot generate primes for {literal.name!r}: {error}") from error
        scale = float(literal.scale)
        sigma = float(literal.sigma)
        dnum = len(q) if literal.dnum is None else literal.dnum
        if q and (not isinstance(dnum, int) or not 1 <= dnum <= len(q)):
            raise ConfigurationError(f"dnum must be an int in [1, {len(q)}], got {literal.dnum!r}")
        # validated (the bound included) by __post_init__, once
        params = cls(name=literal.name, ring_degree=n, q_moduli=q, p_moduli=p, scale=scale,
                     digits=balanced_digits(len(q), dnum) if q else (), sigma=sigma, insecure=insecure)
        if insecure and params.security_issue() is None:
            params = replace(params, insecure=False)  # opted in, but secure: recorded as secure
        return params

    @classmethod
    def preset(cls, name: str, *, insecure: bool = False) -> Parameters:
        """Validated preset by name (see ``preset_names()``)."""
        require_opt_in_flag(insecure)
        try:
            literal = PRESETS[name]
        except KeyError:
            raise ConfigurationError(f"unknown CKKS preset {name!r}; known presets: {', '.join(preset_names())}") from None
        return cls.from_literal(literal, insecure=insecure)

    @property
    def num_slots(self) -> int:
        """N/2 complex slots."""
        return self.ring_degree // 2

    @property
    def moduli(self) -> tuple[int, ...]:
        """Q primes then P primes (index = prime id)."""
        return self.q_moduli + self.p_moduli

    @property
    def max_level(self) -> int:
        """Last level (only the terminal prime left)."""
        return len(self.q_moduli) - 1

    @property
    def dnum(self) -> int:
        return len(self.digits)

    @property
    def log2_qp(self) -> float:
        return sum(math.log2(m) for m in self.moduli)

    def describe(self) -> dict[str, object]:
        """Canonical JSON-ready description (the input of the context identity hash)."""
        return {
            "scheme": "ckks-rns-hybrid",
            "version": 1,
            "name": self.name,
            "ring_degree": self.ring_degree,
            "q_moduli": list(self.q_moduli),
            "p_moduli": list(self.p_moduli),
            "scale": self.scale.hex(),
            "digits": [list(d) for d in self.digits],
            "sigma": self.sigma.hex(),
            "secret": "ternary-uniform",
            "galois_generator": 5,
        }


PRESETS: dict[str, ParametersLiteral] = {
    "test-n4096-scale40": ParametersLiteral(
        log_n=12, q_bits=(40, 40, 49), p_bits=(49,), scale=2.0**40, name="test-n4096-scale40"
    ),
    "test-n4096-scale30": ParametersLiteral(
        log_n=12, q_bits=(30, 30, 40), p_bits=(45,), scale=2.0**30, name="test-n4096-scale30"
    ),
    "slots8192-scale40-depth7": ParametersLiteral(
        log_n=14, q_bits=(40,) * 8, p_bits=(60,), scale=2.0**40, dnum=8, name="slots8192-scale40-depth7"
    ),
    "slots16384-scale40-depth16": ParametersLiteral(
        log_n=15, q_bits=(40,) * 17, p_bits=(60, 60), scale=2.0**40, dnum=6, name="slots16384-scale40-depth16"
    ),
    "slots32768-scale40-depth34": ParametersLiteral(
        log_n=16, q_bits=(40,) * 35, p_bits=(60,) * 4, scale=2.0**40, dnum=7, name="slots32768-scale40-depth34"
    ),
    # fewer, larger key-switching digits: 4 digits of <= 9 Q primes over 6 P primes (P >= each
    # digit), so a key switch runs dnum * (L + K) = 160 instead of 7 * 39 = 273 limb NTTs.
    "slots32768-scale40-depth33-dnum4": ParametersLiteral(
        log_n=16, q_bits=(40,) * 34, p_bits=(60,) * 6, scale=2.0**40, dnum=4,
        name="slots32768-scale40-depth33-dnum4",
    ),
}


def require_opt_in_flag(insecure: object) -> None:
    """The ``insecure`` opt-in is a real bool (``"false"`` or ``1`` would read as True).

    Raises:
        TypeError: anything but ``True`` or ``False``.
    """
    if not isinstance(insecure, bool):
        raise TypeError(f"insecure must be True or False, got {type(insecure).__name__} {insecure!r}")


def preset_names() -> tuple[str, ...]:
    """Names of the built-in presets (``test-*`` ones need ``insecure=True``)."""
    return tuple(PRESETS)
