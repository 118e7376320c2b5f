"""Exact modular arithmetic on uint64 NumPy arrays for primes below 2**61.

NumPy has no 128-bit integer, so every product is assembled exactly from 32-bit halves:

* ``mulhi(a, b)``: the high word of the 128-bit product (four 32x32 -> 64 products).
* Shoup multiplication by a constant ``w``: ``w' = floor(w * 2**64 / q)``,
  ``q^ = mulhi(x, w')``, ``r = x*w - q^*q`` (wrapping) lies in ``[0, 2q)`` for any
  ``x < 2**64``; one conditional subtraction makes it canonical.
* Montgomery multiplication with ``R = 2**64``: ``m = lo(a*b) * q^-1 mod 2**64``,
  ``r = hi(a*b) - mulhi(m, q)`` in ``(-q, q)``; adding ``q`` on borrow gives
  ``a * b * 2**-64 mod q`` in ``[0, q)`` whenever ``a * b < q * 2**64``.

Conditional subtractions use ``minimum(r, r - q)``: when ``r < q`` the wrapped
difference is huge and ``minimum`` keeps ``r``. All functions take ``q`` and constants as
uint64 arrays broadcastable against the data (e.g. shape ``(L, 1)`` for ``[..., L, N]``)
and return canonical residues in ``[0, q)``. For moduli below ``2**50`` the
``*_float`` variants estimate the quotient in float64 (error < 1) and correct exactly;
they are exact and faster. Module-level helpers compute the Python-int
constants (Shoup companions, ``q^-1 mod 2**64``, Montgomery radix powers).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "MASK32",
    "add_mod",
    "as_u64",
    "montgomery_inverse",
    "mul_mod_float",
    "mul_montgomery",
    "mul_shoup",
    "mul_shoup_float",
    "mulhi",
    "neg_mod",
    "reduce_once",
    "shoup_companion",
    "sub_mod",
]

U64 = np.uint64
MASK32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_TWO64 = 1 << 64

UFUNC_BUFSIZE = 64
"""ufunc buffer size (elements) used inside this module and the NTT. With NumPy's default
(8192), an operation whose contiguous inner run is shorter than the buffer (``q [L, 1]``
broadcast over rows of ``N <= 4096`` words, strided butterfly halves) goes through buffered
iteration, which copies every operand in and out and costs 2-4x. Scoped by ``np.errstate``,
which restores the caller's value."""


def _unbuffered(func):
    """Run ``func`` with ``np.setbufsize(UFUNC_BUFSIZE)``; the caller's setting is restored."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with np.errstate():
            np.setbufsize(UFUNC_BUFSIZE)
            return func(*args, **kwargs)

    return wrapper


def _work(x: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """A fresh uint64 array of the broadcast shape of the operands."""
    return np.empty(np.broadcast_shapes(np.shape(x), *(np.shape(o) for o in others)), dtype=U64)


def as_u64(values, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Python ints (each < 2**64) -> uint64 array, optionally reshaped."""
    array = np.array([int(v) for v in values], dtype=U64) if not isinstance(values, np.ndarray) else values.astype(U64)
    return array.reshape(shape) if shape is not None else array


def shoup_companion(w: int, q: int) -> int:
    """``floor(w * 2**64 / q)`` for ``0 <= w < q``: the Shoup constant of ``w``."""
    return (w << 64) // q


def montgomery_inverse(q: int) -> int:
    """``q**-1 mod 2**64`` (q odd)."""
    return pow(q, -1, _TWO64)


@_unbuffered
def mulhi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High 64 bits of the exact 128-bit product ``a * b`` (element-wise, broadcasting)."""
    b0 = b & MASK32
    b1 = b >> _S32
    return _mulhi_split(a, b0, b1)


def _mulhi_split(x: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """``mulhi(x, w)`` with ``w``'s 32-bit halves precomputed (four temporaries, in place)."""
    x0 = _work(x, w0, w1)
    np.bitwise_and(x, MASK32, out=x0)
    x1 = np.right_shift(x, _S32, out=np.empty_like(x0))
    p01 = np.multiply(x0, w1, out=np.empty_like(x0))
    np.multiply(x0, w0, out=x0)
    x0 >>= _S32  # mid
    p10 = np.multiply(x1, w0, out=np.empty_like(x0))
    np.multiply(x1, w1, out=x1)  # hi
    t = np.right_shift(p01, _S32, out=np.empty_like(x0))
    x1 += t
    p01 &= MASK32
    x0 += p01
    np.right_shift(p10, _S32, out=t)
    x1 += t
    p10 &= MASK32
    x0 += p10
    x0 >>= _S32
    x1 += x0
    return x1


@_unbuffered
def reduce_once(x: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``x - q`` if ``x >= q`` else ``x`` (input in ``[0, 2q)``)."""
    return np.minimum(x, x - q, out=out)


@_unbuffered
def add_mod(a: np.ndarray, b: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``(a + b) mod q`` for canonical inputs."""
    s = np.add(a, b, out=out)
    return np.minimum(s, s - q, out=s)


@_unbuffered
def sub_mod(a: np.ndarray, b: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``(a - b) mod q`` for canonical inputs."""
    d = np.subtract(a, b, out=out)
    d += q
    return np.minimum(d, d - q, out=d)


@_unbuffered
def neg_mod(a: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``-a mod q`` for canonical input (0 stays 0)."""
    d = np.subtract(q, a, out=out)
    return np.minimum(d, d - q, out=d)


@_unbuffered
def mul_shoup(
    x: np.ndarray,
    w: np.ndarray,
    w_shoup: np.ndarray,
    q: np.ndarray,
    *,
    w_split: tuple[np.ndarray, np.ndarray] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``x * w mod q`` for a constant ``w < q`` with companion ``w_shoup``; any ``x < 2**64``.

    ``w_split`` optionally passes ``(w_shoup & 0xFFFFFFFF, w_shoup >> 32)`` precomputed.
    Requires ``q < 2**63``.
    """
    if w_split is None:
        w_split = (w_shoup & MASK32, w_shoup >> _S32)
    qhat = _mulhi_split(x, w_split[0], w_split[1])
    qhat *= q
    r = np.multiply(x, w, out=out)
    r -= qhat
    np.subtract(r, q, out=qhat)
    return np.minimum(r, qhat, out=r)


@_unbuffered
def mul_montgomery(
    a: np.ndarray,
    b: np.ndarray,
    q: np.ndarray,
    q_inv: np.ndarray,
    *,
    q_split: tuple[np.ndarray, np.ndarray] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``a * b * 2**-64 mod q`` (Montgomery product, R = 2**64); needs ``a * b < q * 2**64``.

    ``q_inv`` is ``q**-1 mod 2**64``; ``q_split`` optionally passes ``q``'s 32-bit halves.
    """
    if q_split is None:
        q_split = (q & MASK32, q >> _S32)
    hi = _mulhi_split(a, b & MASK32, b >> _S32)
    m = np.multiply(a, b, out=np.empty_like(hi))
    m *= q_inv
    t = _mulhi_split(m, q_split[0], q_split[1])
    r = np.subtract(hi, t, out=out)
    np.add(r, q, out=t)
    return np.minimum(r, t, out=r)


@_unbuffered
def mul_mod_float(a: np.ndarray, b: np.ndarray, q: np.ndarray, q_f: np.ndarray) -> np.ndarray:
    """``a * b mod q`` for canonical ``a, b`` and every ``q < 2**50`` (float-assisted, exact).

    ``q_f`` is ``q`` as float64. The float quotient ``a*b/q`` (< 2**50) is off by less than
    one, so ``a*b - qhat*q`` (wrapping) lies in ``[-q, 2q)``; adding ``q`` and two
    conditional subtractions give the canonical result.
    """
    qhat = np.multiply(a.astype(np.float64), b.astype(np.float64))
    qhat /= q_f
    qq = qhat.astype(np.uint64)
    qq *= q
    r = a * b
    r -= qq
    r += q
    np.subtract(r, q, out=qq)
    np.minimum(r, qq, out=r)
    np.subtract(r, q, out=qq)
    return np.minimum(r, qq, out=r)


@_unbuffered
def mul_shoup_float(x: np.ndarray, w: np.ndarray, w_over_q: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``x * w mod q`` for ``x < 2**51``, ``w < q < 2**50`` with ``w_over_q = w / q`` in float64 (exact)."""
    qq = np.multiply(x.astype(np.float64), w_over_q).astype(np.uint64)
    qq *= q
    r = x * w
    r -= qq
    r += q
    np.subtract(r, q, out=qq)
    np.minimum(r, qq, out=r)
    np.subtract(r, q, out=qq)
    return np.minimum(r, qq, out=r)
