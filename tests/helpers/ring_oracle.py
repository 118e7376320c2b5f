"""Exact Python-integer oracles for the RNS primitives of ``ckks.backends.base`` (tests only).

Every function follows the integer definitions of the backend contract literally, using
NumPy ``object`` arrays of Python ints (slow, exact, no 128-bit tricks). Inputs and outputs
are ``uint64`` arrays shaped ``[..., L, N]``. Also builds tiny ring contexts (NTT-friendly
primes, psi) for tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fhelium_cupy.ckks.primes import is_prime

__all__ = [
    "RingTestContext",
    "automorphism",
    "bitrev",
    "centered",
    "find_psi",
    "is_prime",
    "keyswitch_from_digits",
    "make_context",
    "modup",
    "ntt_forward",
    "ntt_inverse",
    "ntt_primes",
    "rescale",
]

# Primality is not what these oracles test: reuse the package's deterministic Miller-Rabin.


def ntt_primes(bits: int, count: int, ring_degree: int, *, exclude: Sequence[int] = ()) -> list[int]:
    """The ``count`` largest primes q < 2**bits with q = 1 mod 2N, skipping ``exclude``."""
    step = 2 * ring_degree
    q = ((1 << bits) - 1) // step * step + 1
    found: list[int] = []
    while len(found) < count:
        if q < step:
            raise ValueError(f"not enough {bits}-bit NTT primes for N={ring_degree}")
        if q not in exclude and is_prime(q):
            found.append(q)
        q -= step
    return found


def find_psi(q: int, ring_degree: int) -> int:
    """First r = c**((q-1)/2N) (c = 2, 3, ...) with r**N = -1 mod q."""
    for c in range(2, q):
        r = pow(c, (q - 1) // (2 * ring_degree), q)
        if pow(r, ring_degree, q) == q - 1:
            return r
    raise ValueError(f"no primitive 2N-th root modulo {q}")


@dataclass(frozen=True)
class RingTestContext:
    """A plain ``RingContext`` for tests."""

    ring_degree: int
    moduli: tuple[int, ...]
    psi: tuple[int, ...]
    q_count: int
    p_count: int
    digits: tuple[tuple[int, ...], ...]


def make_context(
    ring_degree: int, q_moduli: Sequence[int], p_moduli: Sequence[int], dnum: int
) -> RingTestContext:
    """Context over the given primes; Q ids split into ``dnum`` contiguous, near-equal digits."""
    moduli = tuple(int(q) for q in q_moduli) + tuple(int(p) for p in p_moduli)
    nq = len(q_moduli)
    size = math.ceil(nq / dnum)
    digits = tuple(tuple(range(s, min(s + size, nq))) for s in range(0, nq, size))
    return RingTestContext(
        ring_degree=ring_degree,
        moduli=moduli,
        psi=tuple(find_psi(q, ring_degree) for q in moduli),
        q_count=nq,
        p_count=len(p_moduli),
        digits=digits,
    )


def bitrev(i: int, bits: int) -> int:
    return int(format(i, f"0{bits}b")[::-1], 2) if bits else 0


def centered(x: int, q: int) -> int:
    return x if x <= (q - 1) // 2 else x - q


def _obj(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.uint64).astype(object)


def _u64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=object).astype(np.uint64)


def _rows_mod(rows: Sequence[int], ctx: RingTestContext) -> list[int]:
    return [ctx.moduli[r] for r in rows]


def _twiddles(q: int, psi: int, n: int, inverse: bool) -> np.ndarray:
    bits = n.bit_length() - 1
    base = pow(psi, -1, q) if inverse else psi
    return np.array([pow(base, bitrev(k, bits), q) for k in range(n)], dtype=object)


def ntt_forward(a: np.ndarray, rows: Sequence[int], ctx: RingTestContext) -> np.ndarray:
    """Cooley-Tukey, natural in, bit-reversed out: out[k] = a(psi^(2 bitrev(k) + 1))."""
    x = _obj(a).copy()
    n = ctx.ring_degree
    for i, r in enumerate(rows):
        q, w = ctx.moduli[r], _twiddles(ctx.moduli[r], ctx.psi[r], n, False)
        v = x[..., i, :]
        lead = v.shape[:-1]
        m = 1
        while m < n:
            t = n // (2 * m)
            v = v.reshape(*lead, m, 2, t)
            u, s = v[..., 0, :], v[..., 1, :] * w[m : 2 * m, None] % q
            v = np.stack([(u + s) % q, (u - s) % q], axis=-2).reshape(*lead, n)
            m *= 2
        x[..., i, :] = v
    return _u64(x)


def ntt_inverse(a: np.ndarray, rows: Sequence[int], ctx: RingTestContext) -> np.ndarray:
    """Gentleman-Sande inverse of ``ntt_forward`` including N^-1."""
    x = _obj(a).copy()
    n = ctx.ring_degree
    for i, r in enumerate(rows):
        q, w = ctx.moduli[r], _twiddles(ctx.moduli[r], ctx.psi[r], n, True)
        v = x[..., i, :]
        lead = v.shape[:-1]
        t = 1
        while t < n:
            h = n // (2 * t)
            v = v.reshape(*lead, h, 2, t)
            u, s = v[..., 0, :], v[..., 1, :]
            v = np.stack([(u + s) % q, (u - s) * w[h : 2 * h, None] % q], axis=-2).reshape(*lead, n)
            t *= 2
        x[..., i, :] = v * pow(n, -1, q) % q
    return _u64(x)


def ntt_forward_direct(a: np.ndarray, q: int, psi: int) -> list[int]:
    """Definition check for one polynomial: out[k] = a(psi^(2 bitrev(k) + 1)) (O(N^2))."""
    n = len(a)
    bits = n.bit_length() - 1
    coeffs = [int(c) for c in a]
    out = []
    for k in range(n):
        point = pow(psi, 2 * bitrev(k, bits) + 1, q)
        acc, p = 0, 1
        for c in coeffs:
            acc = (acc + c * p) % q
            p = p * point % q
        out.append(acc)
    return out


def automorphism(a: np.ndarray, g: int, rows: Sequence[int], ctx: RingTestContext, domain: str) -> np.ndarray:
    n = ctx.ring_degree
    x = _obj(a)
    out = np.empty_like(x)
    if domain == "ntt":
        bits = n.bit_length() - 1
        src = [bitrev(((2 * bitrev(i, bits) + 1) * g % (2 * n) - 1) // 2, bits) for i in range(n)]
        return _u64(x[..., src])
    for i, q in enumerate(_rows_mod(rows, ctx)):
        for j in range(n):
            e = j * g % (2 * n)
            if e < n:
                out[..., i, e] = x[..., i, j]
            else:
                out[..., i, e - n] = (-x[..., i, j]) % q
    return _u64(out)


def rescale(a: np.ndarray, rows: Sequence[int], ctx: RingTestContext, domain: str) -> np.ndarray:
    if domain == "ntt":
        coeff = ntt_inverse(a, rows, ctx)
        return ntt_forward(rescale(coeff, rows, ctx, "coefficient"), rows[1:], ctx)
    x = _obj(a)
    q0 = ctx.moduli[rows[0]]
    r = np.vectorize(lambda v: centered(int(v), q0), otypes=[object])(x[..., 0, :])
    out = np.empty(x.shape[:-2] + (len(rows) - 1, x.shape[-1]), dtype=object)
    for i, q in enumerate(_rows_mod(rows[1:], ctx)):
        out[..., i, :] = (x[..., i + 1, :] - r) * pow(q0, -1, q) % q
    return _u64(out)


def _active_digits(rows: Sequence[int], ctx: RingTestContext) -> list[tuple[int, list[int]]]:
    active = []
    for index, digit in enumerate(ctx.digits):
        primes = [r for r in digit if r in rows]
        if primes:
            active.append((index, primes))
    return active


def _p_rows(ctx: RingTestContext) -> list[int]:
    return list(range(ctx.q_count, ctx.q_count + ctx.p_count))


def modup(c: np.ndarray, rows: Sequence[int], ctx: RingTestContext) -> np.ndarray:
    """Balanced fast base conversion per digit, then ``ntt_forward`` over rows + p_rows."""
    rows = list(rows)
    x = _obj(c)
    out_rows = rows + _p_rows(ctx)
    digits = []
    for _, primes in _active_digits(rows, ctx):
        qd = math.prod(ctx.moduli[j] for j in primes)
        terms = []
        for j in primes:
            qj = ctx.moduli[j]
            inv = pow(qd // qj, -1, qj)
            cj = x[..., rows.index(j), :]
            terms.append((np.vectorize(lambda v, qj=qj, inv=inv: centered(int(v) * inv % qj, qj), otypes=[object])(cj), qd // qj))
        d = np.empty(x.shape[:-2] + (len(out_rows), x.shape[-1]), dtype=object)
        for o, r in enumerate(out_rows):
            m = ctx.moduli[r]
            if r in primes:
                d[..., o, :] = x[..., rows.index(r), :]
            else:
                d[..., o, :] = sum(t * (w % m) for t, w in terms) % m
        digits.append(ntt_forward(_u64(d), out_rows, ctx))
    return np.stack(digits)


def keyswitch_from_digits(
    digits_ntt: np.ndarray, key: np.ndarray, rows: Sequence[int], ctx: RingTestContext, galois_element: int | None = None
) -> np.ndarray:
    """Inner product (key in Montgomery form), inverse NTT, rounding ModDown over ``rows``."""
    rows = list(rows)
    out_rows = rows + _p_rows(ctx)
    n = ctx.ring_degree
    active = _active_digits(rows, ctx)
    dg = _obj(digits_ntt)
    if galois_element is not None:
        dg = _obj(automorphism(_u64(dg), galois_element, out_rows, ctx, "ntt"))
    k = _obj(key)
    acc = np.zeros((2,) + dg.shape[1:], dtype=object)
    rinv = {r: pow(1 << 64, -1, ctx.moduli[r]) for r in out_rows}
    for d, (kd, _) in enumerate(active):
        for comp in range(2):
            for o, r in enumerate(out_rows):
                m = ctx.moduli[r]
                acc[comp, ..., o, :] = (acc[comp, ..., o, :] + dg[d, ..., o, :] * (k[kd, comp, r, :] * rinv[r] % m)) % m
    x = _obj(ntt_inverse(_u64(acc), out_rows, ctx))
    p_ids = _p_rows(ctx)
    big_p = math.prod(ctx.moduli[j] for j in p_ids)
    corr_terms = []
    for t, j in enumerate(p_ids):
        pj = ctx.moduli[j]
        inv = pow(big_p // pj, -1, pj)
        xp = x[..., len(rows) + t, :]
        corr_terms.append((np.vectorize(lambda v, pj=pj, inv=inv: centered(int(v) * inv % pj, pj), otypes=[object])(xp), big_p // pj))
    out = np.empty(x.shape[:-2] + (len(rows), n), dtype=object)
    for i, r in enumerate(rows):
        q = ctx.moduli[r]
        e = sum(t * (w % q) for t, w in corr_terms) % q
        out[..., i, :] = (x[..., i, :] - e) * pow(big_p, -1, q) % q
    return _u64(out)
