"""Secret, error and uniform sampling from the OS CSPRNG (``os.urandom``) only.

No seeded generator is ever used: every array is drawn with one ``os.urandom`` call
(plus rare top-ups for rejection sampling) and mapped exactly:

* uniform mod q: rejection sampling of masked 64-bit words (acceptance >= 1/2);
* ternary secret / encryption mask: rejection of bytes >= 252, then ``b mod 3 - 1``
  (uniform over {-1, 0, 1});
* discrete Gaussian (sigma = 3.2 by default): cumulative-distribution-table (CDT)
  sampling of ``|x|`` with 63-bit thresholds (tail cut at 10 sigma; probabilities from
  float64, so the statistical distance to the ideal table is about 2**-53) and a sign
  bit from the same word;
* wide discrete Gaussian (noise flooding, sigma in [1, 2**56]): rejection sampling. A
  candidate x is uniform on [-9 sigma, 9 sigma] (rejection of masked 64-bit words); it is
  kept with probability rho(x) = exp(-x**2 / (2 sigma**2)), written 2**-j r with r in (1/2, 1]:
  j random bits all zero, then a 53-bit uniform below r (one 64-bit word a candidate: its top
  min(j, 11) bits and low 53 bits; a second word for the rare j > 11). The probabilities are those of the
  discrete Gaussian (tail cut at 9 sigma, mass below 2**-60) up to a relative error of about
  2**-45 (float64 evaluation of rho), the same for neighbouring integers: no parity or
  low-bit structure for an adversary to average out.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

import numpy as np

__all__ = ["sample_discrete_gaussian_wide", "sample_gaussian", "sample_ternary", "sample_uniform_mod"]


_LN2 = math.log(2.0)


def _words(count: int) -> np.ndarray:
    return np.frombuffer(os.urandom(8 * count), dtype=np.uint64).copy()


def sample_uniform_mod(moduli, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform canonical residues ``[*lead, L, N]`` for ``shape = (*lead, N)``, one row per modulus."""
    lead, n = tuple(shape[:-1]), int(shape[-1])
    count = int(np.prod(lead, dtype=np.int64)) * n if lead else n
    out = np.empty((len(moduli), count), dtype=np.uint64)
    for i, q in enumerate(moduli):
        mask = np.uint64((1 << int(q).bit_length()) - 1)
        got = np.empty(0, dtype=np.uint64)
        while got.size < count:
            need = count - got.size
            w = _words(need * 2 + 16) & mask
            got = np.concatenate([got, w[w < np.uint64(q)]])
        out[i] = got[:count]
    out = out.reshape((len(moduli),) + lead + (n,))
    return np.ascontiguousarray(np.moveaxis(out, 0, -2))


def sample_ternary(shape: tuple[int, ...]) -> np.ndarray:
    """Uniform coefficients in {-1, 0, 1} (int64)."""
    count = int(np.prod(shape, dtype=np.int64))
    got = np.empty(0, dtype=np.uint8)
    while got.size < count:
        b = np.frombuffer(os.urandom((count - got.size) * 5 // 4 + 16), dtype=np.uint8)
        got = np.concatenate([got, b[b < 252]])
    return (got[:count].astype(np.int64) % 3 - 1).reshape(shape)


@lru_cache(maxsize=8)
def _cdt(sigma: float) -> np.ndarray:
    tail = int(math.ceil(10 * sigma))
    weights = [math.exp(-(k * k) / (2 * sigma * sigma)) * (1 if k == 0 else 2) for k in range(tail + 1)]
    total = math.fsum(weights)
    cumulative, running = [], 0.0
    for w in weights[:-1]:
        running += w
        cumulative.append(min(int(running / total * 2**63), 2**63 - 1))
    return np.array(cumulative, dtype=np.uint64)


def sample_gaussian(shape: tuple[int, ...], sigma: float = 3.2) -> np.ndarray:
    """Discrete Gaussian coefficients (int64) of standard deviation ``sigma`` (CDT, see module doc)."""
    count = int(np.prod(shape, dtype=np.int64))
    w = _words(count)
    magnitude = np.searchsorted(_cdt(float(sigma)), w >> np.uint64(1), side="right").astype(np.int64)
    sign = (w & np.uint64(1)).astype(np.int64) * 2 - 1
    return (magnitude * sign).reshape(shape)


def sample_discrete_gaussian_wide(shape: tuple[int, ...], sigma: float) -> np.ndarray:
    """Discrete Gaussian integers (int64) of parameter ``sigma`` in ``[1, 2**56]`` by rejection
    (see module doc): the flooding noise of a decryption.

    Raises:
        ValueError: ``sigma`` outside ``[1, 2**56]``.
    """
    sigma = float(sigma)
    if not 1.0 <= sigma <= 2.0**56:
        raise ValueError(f"sigma must be in [1, 2**56], got {sigma!r}")
    count = int(np.prod(shape, dtype=np.int64))
    bound = int(math.ceil(9.0 * sigma))  # candidates in [-bound, bound]
    width = 2 * bound + 1
    shift = np.uint64(64 - width.bit_length())
    out = np.empty(count, dtype=np.int64)
    filled = 0
    while filled < count:
        draws = (count - filled) * 12 + 64  # ~7.2 candidates a sample, >= half the words in range
        words = _words(draws) >> shift
        x = words[words < np.uint64(width)].astype(np.int64) - bound
        exponent = 0.5 * (x.astype(np.float64) / sigma) ** 2  # <= 40.5
        j = np.floor(exponent / _LN2)
        r = np.exp(j * _LN2 - exponent)  # rho(x) = 2**-j * r, r in (1/2, 1]
        bits = j.astype(np.int64)  # <= 58
        # one word a candidate: its top min(j, 11) bits must be 0, its low 53 bits are the uniform
        # compared with r; the j - 11 further zero bits of a rare deep candidate come from one more
        w = _words(x.size)
        top = np.minimum(bits, 11).astype(np.uint64)
        kept = ((top == 0) | ((w >> (np.uint64(64) - np.maximum(top, np.uint64(1)))) == 0)) & (
            (w & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0**-53 < r)
        deep = np.flatnonzero(kept & (bits > 11))
        if deep.size:
            more = (bits[deep] - 11).astype(np.uint64)
            kept[deep] = (_words(deep.size) >> (np.uint64(64) - more)) == 0
        taken = x[kept][: count - filled]
        out[filled : filled + taken.size] = taken
        filled += taken.size
    return out.reshape(shape)
