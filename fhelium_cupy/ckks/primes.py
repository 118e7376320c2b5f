"""NTT-friendly primes: deterministic primality, prime chains and primitive 2N-th roots."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "MAX_MODULUS_BITS",
    "generate_ntt_primes",
    "is_ntt_friendly",
    "is_prime",
    "primitive_root_2n",
]

MAX_MODULUS_BITS = 61
"""Every modulus is below ``2**61`` (the GPU kernels need ``q < 2**62`` for lazy ranges)."""

_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin primality test, exact for every ``n < 3.3 * 10**24``."""
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in _WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def is_ntt_friendly(q: int, ring_degree: int) -> bool:
    """True when ``q`` is an odd prime below ``2**61`` with ``q = 1 (mod 2N)``."""
    return 2 < q < (1 << MAX_MODULUS_BITS) and q % (2 * ring_degree) == 1 and is_prime(q)


def generate_ntt_primes(
    bits: int,
    count: int,
    ring_degree: int,
    *,
    balanced: bool = True,
    exclude: Iterable[int] = (),
) -> tuple[int, ...]:
    """Deterministic NTT-friendly primes close to ``2**bits``.

    Candidates are ``2**bits + 1 + k * 2N``. With ``balanced=True`` the search alternates
    below and above ``2**bits`` (so "40-bit" primes have bit length 40 or 41 and their
    product stays close to ``2**(40 * count)``, which keeps rescaled scales near 2^40; at
    ``bits = 61`` only below, every candidate above being out of range);
    otherwise it walks downward only (bit length exactly ``bits``).

    Args:
        bits: target size; ``2**bits`` is the centre of the search.
        count: number of primes to return.
        ring_degree: N; every prime is ``1 mod 2N``.
        balanced: alternate below/above ``2**bits`` (True) or only below (False).
        exclude: primes that must not be returned (e.g. already used in another chain).

    Returns:
        ``count`` distinct primes in search order.

    Raises:
        ValueError: if the search leaves the admissible range without enough primes.
    """
    if bits < 2 or bits > MAX_MODULUS_BITS:
        raise ValueError(f"prime size must be between 2 and {MAX_MODULUS_BITS} bits, got {bits}")
    step = 2 * ring_degree
    centre = 1 << bits
    taken = set(exclude)
    found: list[int] = []
    below = centre + 1 - step
    above = centre + 1 + (step if not balanced else 0)
    # ``2**bits + 1`` itself is never prime for bits > 4 (a Fermat number beyond F4) but
    # is still tested as the first "above" candidate when balanced.
    want_below = True
    while len(found) < count:
        if balanced and above.bit_length() > MAX_MODULUS_BITS:
            balanced = False  # above 2**bits is out of range (bits = MAX_MODULUS_BITS): search below only
        if want_below or not balanced:
            if below <= 2:
                raise ValueError(f"not enough {bits}-bit NTT primes for N={ring_degree}")
            candidate, below = below, below - step
        else:
            candidate, above = above, above + step
        if candidate not in taken and candidate > 2 and is_prime(candidate):
            found.append(candidate)
            taken.add(candidate)
            want_below = not want_below
    return tuple(found)


def primitive_root_2n(q: int, ring_degree: int) -> int:
    """The context's primitive 2N-th root of unity modulo ``q`` (deterministic rule).

    For ``c = 2, 3, ...``: ``r = c**((q - 1) / 2N) mod q``; the first ``r`` with
    ``r**N = q - 1 (mod q)`` is returned (then ``r`` has order exactly 2N).

    Raises:
        ValueError: if ``q`` is not ``1 mod 2N``.
    """
    two_n = 2 * ring_degree
    if (q - 1) % two_n:
        raise ValueError(f"{q} is not 1 mod 2N={two_n}: it has no primitive 2N-th root of unity")
    exponent = (q - 1) // two_n
    c = 2
    while True:
        r = pow(c, exponent, q)
        if pow(r, ring_degree, q) == q - 1:
            return r
        c += 1
