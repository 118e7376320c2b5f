"""Negacyclic number-theoretic transform (bit-reversed output) and Galois index tables.

Forward: Cooley-Tukey butterflies on natural-order coefficients; stage ``s`` (``m = 2**s``
groups, half-width ``t = N / 2m``) uses twiddle ``psi**bitrev(m + i)`` for group ``i``.
Output index ``k`` holds ``a(psi**(2*bitrev(k) + 1))``. Inverse: Gentleman-Sande
butterflies with ``psi**-bitrev(h + i)``, then a multiplication by ``N**-1``. Every stage is
a handful of whole-array operations over all limbs and batch entries at once (twiddles
are precomputed per limb with their Shoup companions), so a transform costs ``log2(N)``
vectorized stages, independent of the number of limbs.

This module holds the tables, the exact path and the dispatch; the two-layout view of the
stacked tables is in ``_ntt_layout`` and the signed lazy path (moduli below ``2**50``) in
``_ntt_lazy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ._ntt_layout import _q_for, _Stacked, _transpose, _views
from ._ntt_lazy import _forward_lazy, _inverse_lazy, _plan_lazy
from .modarith import MASK32, UFUNC_BUFSIZE, as_u64, mul_shoup, shoup_companion

__all__ = [
    "NttTables",
    "bit_reverse_indices",
    "coefficient_automorphism_indices",
    "ntt_automorphism_indices",
    "ntt_forward_u64",
    "ntt_inverse_u64",
    "ntt_tables",
    "stack_ntt_tables",
]

_S32 = np.uint64(32)


@lru_cache(maxsize=32)
def bit_reverse_indices(n: int) -> np.ndarray:
    """``bitrev(k)`` over ``log2(n)`` bits for ``k = 0..n-1`` (int64, read-only)."""
    bits = n.bit_length() - 1
    k = np.arange(n, dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        out |= ((k >> b) & 1) << (bits - 1 - b)
    out.setflags(write=False)
    return out


def _powers(base: int, q: int, n: int) -> np.ndarray:
    """``base**k mod q`` for ``k = 0..n-1`` by vectorized doubling (exact)."""
    qa = np.array([q], dtype=np.uint64)
    out = np.ones(1, dtype=np.uint64)
    step = base
    while out.size < n:
        w = np.array([step], dtype=np.uint64)
        ws = np.array([shoup_companion(step, q)], dtype=np.uint64)
        out = np.concatenate([out, mul_shoup(out, w, ws, qa)])
        step = step * step % q
    return out[:n]


@dataclass(frozen=True)
class NttTables:
    """Per-modulus twiddles in bit-reversed order with Shoup companions (uint64 ``[N]``)."""

    q: int
    psi: int
    forward: np.ndarray
    forward_shoup: np.ndarray
    inverse: np.ndarray
    inverse_shoup: np.ndarray
    n_inverse: int
    n_inverse_shoup: int


@lru_cache(maxsize=256)
def ntt_tables(q: int, psi: int, n: int) -> NttTables:
    """Twiddle tables of one modulus: ``forward[k] = psi**bitrev(k)``, ``inverse[k] = psi**-bitrev(k)``."""
    br = bit_reverse_indices(n)
    fwd = _powers(psi, q, n)[br]
    inv = _powers(pow(psi, -1, q), q, n)[br]
    fwd_s = ((fwd.astype(object) << 64) // q).astype(np.uint64)
    inv_s = ((inv.astype(object) << 64) // q).astype(np.uint64)
    n_inv = pow(n, -1, q)
    for a in (fwd, inv, fwd_s, inv_s):
        a.setflags(write=False)
    return NttTables(q, psi, fwd, fwd_s, inv, inv_s, n_inv, shoup_companion(n_inv, q))


FLOAT_PATH_BITS = 50
"""Moduli below ``2**50`` use a float64 quotient estimate (exact after two corrections)."""


def _stage_twiddles(tw: np.ndarray, tw_s: np.ndarray, m: int, n: int, R: int, small: bool, q: np.ndarray) -> tuple:
    L = tw.shape[0]
    w: np.ndarray
    ws: np.ndarray
    if m < R:
        w = np.ascontiguousarray(tw[:, m : 2 * m]).reshape(L, m, 1)
        ws = np.ascontiguousarray(tw_s[:, m : 2 * m]).reshape(L, m, 1)
        transposed = False
    else:
        m_lo = m // R
        # group i = hi * m_lo + i_lo  ->  W[l, i_lo, 0, hi]
        w = np.ascontiguousarray(tw[:, m : 2 * m].reshape(L, R, m_lo).transpose(0, 2, 1)).reshape(L, m_lo, 1, R)
        ws = np.ascontiguousarray(tw_s[:, m : 2 * m].reshape(L, R, m_lo).transpose(0, 2, 1)).reshape(L, m_lo, 1, R)
        transposed = True
    if small:
        qf = q.astype(np.float64).reshape((L,) + (1,) * (w.ndim - 1))
        return (transposed, w, w.astype(np.float64) / qf, None)
    return (transposed, w, ws & MASK32, ws >> _S32)


def stack_ntt_tables(tables: tuple[NttTables, ...]) -> _Stacked:
    """Stack per-modulus tables into per-stage arrays (see ``_Stacked``)."""
    n = tables[0].forward.size
    L = len(tables)
    log_n = n.bit_length() - 1
    C = 1 << ((log_n + 1) // 2)
    R = n // C
    q = as_u64([t.q for t in tables], (L, 1))
    fwd = np.stack([t.forward for t in tables])
    fwd_s = np.stack([t.forward_shoup for t in tables])
    inv = np.stack([t.inverse for t in tables])
    inv_s = np.stack([t.inverse_shoup for t in tables])
    small = all(t.q < (1 << FLOAT_PATH_BITS) for t in tables)
    fwd_stages: list[tuple] = []
    m = 1
    while m < n:
        fwd_stages.append(_stage_twiddles(fwd, fwd_s, m, n, R, small, q))
        m *= 2
    inv_stages: list[tuple] = []
    m = n // 2
    while m >= 1:
        inv_stages.append(_stage_twiddles(inv, inv_s, m, n, R, small, q))
        m //= 2
    n_inv = as_u64([t.n_inverse for t in tables], (L, 1))
    n_split: tuple[np.ndarray, np.ndarray | None]
    if small:
        n_split = (n_inv.astype(np.float64) / q.astype(np.float64), None)
    else:
        n_inv_s = as_u64([t.n_inverse_shoup for t in tables], (L, 1))
        n_split = (n_inv_s & MASK32, n_inv_s >> _S32)
    stages_fwd, stages_inv = tuple(fwd_stages), tuple(inv_stages)
    lazy = _plan_lazy(tuple(tables), stages_fwd, stages_inv) if small and n >= 2 else None
    return _Stacked(n, R, C, q, stages_fwd, stages_inv, n_inv, n_split, small, lazy)


class _Scratch:
    """Five flat uint64 temporaries reused by every stage of one transform."""

    __slots__ = ("bufs",)

    def __init__(self, size: int) -> None:
        self.bufs = [np.empty(size, dtype=np.uint64) for _ in range(5)]

    def views(self, shape: tuple[int, ...]) -> list[np.ndarray]:
        return [b.reshape(shape) for b in self.bufs]


def _shoup_into(x, w, w0, w1, q, out, s) -> None:
    """``out = x * w mod q`` (exact, canonical) for ``x < q`` using the five scratch views ``s``.

    With ``w1 is None`` (every modulus < 2**50), ``w0`` is ``w / q`` in float64 and the
    quotient ``floor(x * w / q)`` is estimated in floating point: its error is below 1, so
    ``x*w - qhat*q`` (wrapping) lies in ``[-q, 2q)`` and two conditional subtractions after
    adding ``q`` make it canonical. Otherwise ``w0, w1`` are the 32-bit halves of the Shoup
    companion and the quotient is the exact high word of ``x * w'``.
    """
    s1, s2, s3, s4, s5 = s
    if w1 is None:
        f = s3.view(np.float64)
        np.copyto(f, x, casting="unsafe")
        f *= w0
        np.copyto(s1, f, casting="unsafe")
        s1 *= q
        np.multiply(x, w, out=out)
        out -= s1
        out += q
        np.subtract(out, q, out=s1)
        np.minimum(out, s1, out=out)
        np.subtract(out, q, out=s1)
        np.minimum(out, s1, out=out)
        return
    np.bitwise_and(x, MASK32, out=s1)
    np.right_shift(x, _S32, out=s2)
    np.multiply(s1, w1, out=s3)  # p01
    np.multiply(s1, w0, out=s1)  # p00
    np.right_shift(s1, _S32, out=s1)  # mid
    np.multiply(s2, w0, out=s4)  # p10
    np.multiply(s2, w1, out=s2)  # p11 -> hi
    np.right_shift(s3, _S32, out=s5)
    s2 += s5
    np.bitwise_and(s3, MASK32, out=s3)
    s1 += s3
    np.right_shift(s4, _S32, out=s5)
    s2 += s5
    np.bitwise_and(s4, MASK32, out=s4)
    s1 += s4
    np.right_shift(s1, _S32, out=s1)
    s2 += s1  # qhat = mulhi(x, w')
    s2 *= q
    np.multiply(x, w, out=out)
    out -= s2
    np.subtract(out, q, out=s1)
    np.minimum(out, s1, out=out)


_BUFSIZE = UFUNC_BUFSIZE  # see ``modarith.UFUNC_BUFSIZE``: runs here are >= 64 words, so no buffering


def _transform(a: np.ndarray, st: _Stacked, run) -> np.ndarray:
    """Copy ``a [..., L, N]`` to a C-contiguous ``[b, L, N]`` uint64 array and run one
    transform on it with NumPy's small ufunc buffer (restored afterwards)."""
    shape = a.shape
    L, n = shape[-2], shape[-1]
    b = int(np.prod(shape[:-2], dtype=np.int64))
    x = np.array(a, dtype=np.uint64, copy=True, order="C").reshape(b, L, n)
    with np.errstate():
        np.setbufsize(_BUFSIZE)
        return run(x, st, b, L).reshape(shape)


def ntt_forward_u64(a: np.ndarray, st: _Stacked) -> np.ndarray:
    """Forward negacyclic NTT of ``a [..., L, N]`` (canonical in, canonical out, new array)."""
    return _transform(a, st, _forward_lazy if st.lazy is not None else _forward_exact)


def _forward_exact(x: np.ndarray, st: _Stacked, b: int, L: int) -> np.ndarray:
    n = st.n
    y = np.empty_like(x)
    scratch = _Scratch(b * L * n // 2)
    layout_t = False
    m = 1
    for transposed, w, w0, w1 in st.stages_fwd:
        if transposed and not layout_t:
            x = _transpose(x, b, L, st.rows, st.cols)
            layout_t = True
        u, hi, sshape = _views(x, transposed, b, L, m, st)
        lo_out, hi_out, _ = _views(y, transposed, b, L, m, st)
        s = scratch.views(sshape)
        q = _q_for(st, L, transposed)
        _shoup_into(hi, w, w0, w1, q, hi_out, s)
        np.add(u, hi_out, out=lo_out)
        np.subtract(lo_out, q, out=s[0])
        np.minimum(lo_out, s[0], out=lo_out)
        np.subtract(u, hi_out, out=s[1])
        s[1] += q
        np.subtract(s[1], q, out=s[0])
        np.minimum(s[1], s[0], out=hi_out)
        x, y = y, x
        m *= 2
    if layout_t:
        x = _transpose(x, b, L, st.cols, st.rows)
    return x


def ntt_inverse_u64(a: np.ndarray, st: _Stacked) -> np.ndarray:
    """Inverse of ``ntt_forward_u64`` including the factor ``N**-1`` (new array)."""
    return _transform(a, st, _inverse_lazy if st.lazy is not None else _inverse_exact)


def _inverse_exact(x: np.ndarray, st: _Stacked, b: int, L: int) -> np.ndarray:
    n = st.n
    scratch = _Scratch(b * L * n // 2)
    layout_t = bool(st.stages_inv) and st.stages_inv[0][0]
    if layout_t:
        x = _transpose(x, b, L, st.rows, st.cols)
    y = np.empty_like(x)
    m = n // 2
    for transposed, w, w0, w1 in st.stages_inv:
        if layout_t and not transposed:
            x = _transpose(x, b, L, st.cols, st.rows)
            layout_t = False
        u, hi, sshape = _views(x, transposed, b, L, m, st)
        lo_out, hi_out, _ = _views(y, transposed, b, L, m, st)
        s = scratch.views(sshape)
        q = _q_for(st, L, transposed)
        np.add(u, hi, out=lo_out)
        np.subtract(lo_out, q, out=s[0])
        np.minimum(lo_out, s[0], out=lo_out)
        np.subtract(u, hi, out=hi_out)
        hi_out += q
        np.subtract(hi_out, q, out=s[0])
        np.minimum(hi_out, s[0], out=hi_out)
        _shoup_into(hi_out, w, w0, w1, q, hi_out, s)
        x, y = y, x
        m //= 2
    if layout_t:
        x = _transpose(x, b, L, st.cols, st.rows)
    s = scratch.views((b, L, n // 2))
    flat = x.reshape(b, L, 2, n // 2)
    for half in range(2):
        part = flat[:, :, half, :]
        _shoup_into(part, st.n_inv, st.n_inv_split[0], st.n_inv_split[1], st.q, part, s)
    return x


@lru_cache(maxsize=256)
def coefficient_automorphism_indices(n: int, galois_element: int) -> tuple[np.ndarray, np.ndarray]:
    """Gather form of ``X^j -> X^(j*g)``: ``out[i] = (-1 if negate[i]) * a[source[i]]``."""
    j = np.arange(n, dtype=np.int64)
    k = (j * galois_element) % (2 * n)
    dest = k % n
    source = np.empty(n, dtype=np.int64)
    negate = np.empty(n, dtype=bool)
    source[dest] = j
    negate[dest] = k >= n
    source.setflags(write=False)
    negate.setflags(write=False)
    return source, negate


@lru_cache(maxsize=256)
def ntt_automorphism_indices(n: int, galois_element: int) -> np.ndarray:
    """Bit-reversed NTT-domain automorphism: ``out[i] = a[source[i]]`` (pure permutation)."""
    br = bit_reverse_indices(n)
    exponent = ((2 * br + 1) * galois_element) % (2 * n)
    source = br[(exponent - 1) // 2]
    source.setflags(write=False)
    return source
