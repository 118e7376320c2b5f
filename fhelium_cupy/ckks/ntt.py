"""Negacyclic number-theoretic transform (bit-reversed output) and Galois index tables.

Forward: Cooley-Tukey butterflies on natural-order coefficients; stage ``s`` (``m = 2**s``
groups, half-width ``t = N / 2m``) uses twiddle ``psi**bitrev(m + i)`` for group ``i``.
Output index ``k`` holds ``a(psi**(2*bitrev(k) + 1))``. Inverse: Gentleman-Sande
butterflies with ``psi**-bitrev(h + i)``, then a multiplication by ``N**-1``. Every stage is
a handful of whole-array operations over all limbs and batch entries at once (twiddles
are precomputed per limb with their Shoup companions), so a transform costs ``log2(N)``
vectorized stages, independent of the number of limbs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

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


@dataclass(frozen=True)
class _Stacked:
    """Per-stage twiddles of a tuple of moduli, laid out for the two-layout transform.

    The transform views ``N = R * C`` (``C = 2**ceil(log2(N)/2)``). Stages whose butterfly
    half-width ``t >= C`` run on the natural layout ``[m, 2, t]``; the others run on the
    transposed layout ``[C, R]`` (viewed ``[m_lo, 2, t, R]``), so every element-wise
    operation has a contiguous inner run of at least ``min(C, R)`` words.
    """

    n: int
    rows: int
    cols: int
    q: np.ndarray  # [L, 1]
    stages_fwd: tuple  # per stage: (transposed, w, w0, w1)
    stages_inv: tuple
    n_inv: np.ndarray  # [L, 1]
    n_inv_split: tuple
    small: bool  # every modulus < 2**50: float-assisted Shoup (see ``_shoup_into``)
    lazy: _LazyPlan | None = None  # signed lazy-reduction schedule (float path only)

    def lazy_plan(self) -> _LazyPlan:
        """``lazy``, for the lazy-transform code paths (only entered when it is set)."""
        if self.lazy is None:
            raise RuntimeError("internal error: lazy NTT path entered without a lazy-reduction plan")
        return self.lazy


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


# --- signed lazy reduction (every modulus < 2**50) ------------------------------------------
#
# Between stages the residues are kept as *signed* integers (two's complement in the uint64
# buffers) that are congruent to the exact values but not reduced. A product ``x * w mod q``
# is ``r = x*w - trunc(fl(fl(x) * fl(w/q))) * q`` computed with wrapping uint64 arithmetic;
# the true value of ``r`` is small, so the wrapped word is its two's complement. With
# ``Q = x*w/q`` the float estimate has relative error below ``4u`` (three roundings,
# ``u = 2**-53``) and truncation adds less than one, so ``|r| < q * (1 + 4u*|Q|)``.
# ``_plan_lazy`` propagates these bounds per limb through the stages (forward: ``x +- r``
# grows additively; inverse: the sum branch doubles), inserts an extra reduction wherever a
# bound would reach ``2**62``, and picks the final canonicalization (``+K*q`` then
# conditional subtractions of ``K*q, ..., q``). Every intermediate therefore stays below
# ``2**62`` in magnitude and the output is canonical and bit-identical to the exact path.

_U53 = 2.0**-53
_LIMIT = float(1 << 62)
_SAFETY = 1.0 + 2.0**-20  # slack against rounding in the float bound arithmetic itself


def _bound_mul(b: float, q: float) -> float:
    """Strict bound on ``|r|`` of a lazy product ``x * w`` with ``|x| < b``, ``0 <= w < q``."""
    return q * (1.0 + 4.0 * _U53 * b) * _SAFETY


def _bound_reduce(b: float, q: float) -> float:
    """Strict bound on ``|r|`` of the lazy reduction ``x * 1`` (``w / q = 1 / q``) with ``|x| < b``."""
    return (q + 4.0 * _U53 * b) * _SAFETY


def _final_plan(bounds: list[float], qs: list[int]) -> tuple[bool, int, float]:
    """(pre-reduce?, K, cost in full passes) to make ``|x| < bounds`` canonical."""
    reduce = any(b > 4 * q for b, q in zip(bounds, qs))
    if reduce:
        bounds = [_bound_reduce(b, q) for b, q in zip(bounds, qs)]
    k = 1
    while any(b > k * q for b, q in zip(bounds, qs)):
        k *= 2
    return reduce, k, (5 if reduce else 0) + 1 + 2 * k.bit_length()


@dataclass(frozen=True)
class _LazyPlan:
    """Stage schedule of the signed lazy transform (see the comment above ``_bound_mul``)."""

    fwd: tuple  # per stage: (transposed, w, w / q, reduce the whole array before the stage)
    fwd_final: tuple  # (pre-reduce, cascade): cascade[0] = K*q is added, the rest subtracted
    inv: tuple  # per stage but the last: (transposed, w, w / q, reduce the sum branch after)
    inv_last: tuple  # (n_inv, n_inv / q, w_1 * n_inv, (w_1 * n_inv) / q), each [L, 1, 1]
    inv_final: tuple
    q_over: np.ndarray  # float64 1 / q, [L, 1]


def _cascade(k: int, qs: list[int]) -> tuple:
    L = len(qs)
    out = [as_u64([k * q for q in qs], (L, 1))]
    while k >= 1:
        out.append(as_u64([k * q for q in qs], (L, 1)))
        k //= 2
    return tuple(out)


def _plan_lazy(tables: tuple[NttTables, ...], stages_fwd: tuple, stages_inv: tuple) -> _LazyPlan | None:
    qs = [t.q for t in tables]
    L = len(qs)
    qf = [float(q) for q in qs]
    # forward: x' = x +- r, |r| < bound_mul(B)
    bounds = [float(q) for q in qs]
    fwd = []
    for transposed, w, w0, _ in stages_fwd:
        nxt = [b + _bound_mul(b, q) for b, q in zip(bounds, qf)]
        reduce = any(b >= _LIMIT for b in nxt)
        if reduce:
            bounds = [_bound_reduce(b, q) for b, q in zip(bounds, qf)]
            nxt = [b + _bound_mul(b, q) for b, q in zip(bounds, qf)]
            if any(b >= _LIMIT for b in nxt):
                return None
        fwd.append((transposed, w, w0, reduce))
        bounds = nxt
    f_reduce, f_k, _ = _final_plan(bounds, qs)
    # inverse: sum branch u + h (doubles), difference branch (u - h) * w
    bounds = [float(q) for q in qs]
    inv = []
    body = stages_inv[:-1]
    for i, (transposed, w, w0, _) in enumerate(body):
        sums = [2 * b for b in bounds]
        prods = [_bound_mul(s, q) for s, q in zip(sums, qf)]
        reduced = [_bound_reduce(s, q) for s, q in zip(sums, qf)]
        plain = [max(s, p) for s, p in zip(sums, prods)]
        small = [max(r, p) for r, p in zip(reduced, prods)]
        reduce = any(2 * b >= _LIMIT for b in plain)
        if not reduce and i == len(body) - 1:
            # last body stage: reduce the sum branch when that makes the final cheaper
            def final_cost(bs):
                outs = [_bound_mul(2 * b, q) for b, q in zip(bs, qf)]
                return _final_plan(outs, qs)[2]

            reduce = final_cost(small) + 2.5 < final_cost(plain)
        bounds = small if reduce else plain
        if any(2 * b >= _LIMIT for b in bounds):
            return None
        inv.append((transposed, w, w0, reduce))
    outs = [_bound_mul(2 * b, q) for b, q in zip(bounds, qf)]
    i_reduce, i_k, _ = _final_plan(outs, qs)
    if max(f_k, i_k) * max(qs) >= 1 << 62:
        return None
    n_inv = [t.n_inverse for t in tables]
    w1 = [int(t.inverse[1]) * t.n_inverse % t.q for t in tables] if tables[0].inverse.size > 1 else n_inv
    qa = np.array(qf).reshape(L, 1, 1)
    n_inv_a = as_u64(n_inv, (L, 1, 1))
    w1_a = as_u64(w1, (L, 1, 1))
    inv_last = (n_inv_a, n_inv_a.astype(np.float64) / qa, w1_a, w1_a.astype(np.float64) / qa)
    q_over = 1.0 / np.array(qf).reshape(L, 1)
    return _LazyPlan(
        tuple(fwd), (f_reduce, _cascade(f_k, qs)), tuple(inv), inv_last, (i_reduce, _cascade(i_k, qs)), q_over
    )


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


def _views(x: np.ndarray, transposed: bool, b: int, L: int, m: int, st: _Stacked):
    """(first half, second half, slice shape) of the butterfly pairs of a stage."""
    n = st.n
    t = n // (2 * m)
    if not transposed:
        v = x.reshape(b, L, m, 2, t)
        return v[:, :, :, 0, :], v[:, :, :, 1, :], (b, L, m, t)
    m_lo = m // st.rows
    v = x.reshape(b, L, m_lo, 2, t, st.rows)
    return v[:, :, :, 0], v[:, :, :, 1], (b, L, m_lo, t, st.rows)


def _q_for(st: _Stacked, L: int, transposed: bool) -> np.ndarray:
    return st.q.reshape(L, 1, 1, 1) if transposed else st.q.reshape(L, 1, 1)


def _transpose(x: np.ndarray, b: int, L: int, r: int, c: int) -> np.ndarray:
    return np.ascontiguousarray(x.reshape(b, L, r, c).transpose(0, 1, 3, 2)).reshape(b, L, r * c)


_I64 = np.int64
_BUFSIZE = UFUNC_BUFSIZE  # see ``modarith.UFUNC_BUFSIZE``: runs here are >= 64 words, so no buffering


def _lazy_mul_into(x, w, w0, q, out, s) -> None:
    """``out = x * w`` congruent mod ``q``, signed lazy (``w is None``: multiply by 1); see ``_bound_mul``."""
    f, s1, s2 = s
    np.copyto(f, x.view(_I64), casting="unsafe")
    f *= w0
    np.copyto(s1.view(_I64), f, casting="unsafe")  # truncation toward zero
    s1 *= q
    if w is None:
        np.subtract(x, s1, out=out)
        return
    np.multiply(x, w, out=s2)
    np.subtract(s2, s1, out=out)


def _canonicalize(x: np.ndarray, b: int, L: int, n: int, final: tuple, st: _Stacked, bufs: list) -> None:
    """Signed lazy ``x [b, L, n]`` (any layout) -> canonical, in place, half by half."""
    reduce, cascade = final
    half = x.reshape(b, L, 2, n // 2)
    shape = (b, L, n // 2)
    f = bufs[0].view(np.float64).reshape(shape)
    s1, s2 = bufs[1].reshape(shape), bufs[2].reshape(shape)
    for k in range(2):
        part = half[:, :, k, :]
        if reduce:
            _lazy_mul_into(part, None, st.lazy_plan().q_over, st.q, part, (f, s1, s2))
        part += cascade[0]
        for c in cascade[1:]:
            np.subtract(part, c, out=s1)
            np.minimum(part, s1, out=part)


def _forward_lazy(x: np.ndarray, st: _Stacked, b: int, L: int) -> np.ndarray:
    n = st.n
    plan = st.lazy_plan()
    bufs = [np.empty(b * L * n // 2, dtype=np.uint64) for _ in range(3)]
    layout_t = False
    m = 1
    for transposed, w, w0, reduce in plan.fwd:
        if transposed and not layout_t:
            x = _transpose(x, b, L, st.rows, st.cols)
            layout_t = True
        if reduce:
            _canonicalize_reduce_only(x, b, L, n, st, bufs)
        u, h, sshape = _views(x, transposed, b, L, m, st)
        f = bufs[0].view(np.float64).reshape(sshape)
        s1, s2 = bufs[1].reshape(sshape), bufs[2].reshape(sshape)
        q = _q_for(st, L, transposed)
        _lazy_mul_into(h, w, w0, q, s2, (f, s1, s2))
        np.subtract(u, s2, out=h)
        u += s2
        m *= 2
    _canonicalize(x, b, L, n, plan.fwd_final, st, bufs)
    if layout_t:
        x = _transpose(x, b, L, st.cols, st.rows)
    return x


def _canonicalize_reduce_only(x: np.ndarray, b: int, L: int, n: int, st: _Stacked, bufs: list) -> None:
    half = x.reshape(b, L, 2, n // 2)
    shape = (b, L, n // 2)
    f = bufs[0].view(np.float64).reshape(shape)
    s1, s2 = bufs[1].reshape(shape), bufs[2].reshape(shape)
    for k in range(2):
        part = half[:, :, k, :]
        _lazy_mul_into(part, None, st.lazy_plan().q_over, st.q, part, (f, s1, s2))


def _inverse_lazy(x: np.ndarray, st: _Stacked, b: int, L: int) -> np.ndarray:
    n = st.n
    plan = st.lazy_plan()
    bufs = [np.empty(b * L * n // 2, dtype=np.uint64) for _ in range(4)]
    layout_t = bool(plan.inv) and plan.inv[0][0]
    if layout_t:
        x = _transpose(x, b, L, st.rows, st.cols)
    m = n // 2
    for transposed, w, w0, reduce in plan.inv:
        if layout_t and not transposed:
            x = _transpose(x, b, L, st.cols, st.rows)
            layout_t = False
        u, h, sshape = _views(x, transposed, b, L, m, st)
        f = bufs[0].view(np.float64).reshape(sshape)
        s1, s2, d = bufs[1].reshape(sshape), bufs[2].reshape(sshape), bufs[3].reshape(sshape)
        q = _q_for(st, L, transposed)
        np.subtract(u, h, out=d)
        u += h
        _lazy_mul_into(d, w, w0, q, h, (f, s1, s2))
        if reduce:
            qo = plan.q_over.reshape(q.shape)
            _lazy_mul_into(u, None, qo, q, u, (f, s1, s2))
        m //= 2
    if layout_t:
        x = _transpose(x, b, L, st.cols, st.rows)
    # last stage (m = 1, t = n/2) with the factor n**-1 merged into both outputs
    v = x.reshape(b, L, 2, n // 2)
    u, h = v[:, :, 0, :], v[:, :, 1, :]
    sshape = (b, L, n // 2)
    f = bufs[0].view(np.float64).reshape(sshape)
    s1, s2, d = bufs[1].reshape(sshape), bufs[2].reshape(sshape), bufs[3].reshape(sshape)
    n_inv, n_inv0, w1, w10 = (a.reshape(L, 1) for a in plan.inv_last)
    np.subtract(u, h, out=d)
    u += h
    _lazy_mul_into(u, n_inv, n_inv0, st.q, u, (f, s1, s2))
    _lazy_mul_into(d, w1, w10, st.q, h, (f, s1, s2))
    _canonicalize(x, b, L, n, plan.inv_final, st, bufs)
    return x


def ntt_forward_u64(a: np.ndarray, st: _Stacked) -> np.ndarray:
    """Forward negacyclic NTT of ``a [..., L, N]`` (canonical in, canonical out, new array)."""
    shape = a.shape
    L, n = shape[-2], shape[-1]
    b = int(np.prod(shape[:-2], dtype=np.int64))
    x = np.array(a, dtype=np.uint64, copy=True, order="C").reshape(b, L, n)
    with np.errstate():
        np.setbufsize(_BUFSIZE)
        if st.lazy is not None:
            return _forward_lazy(x, st, b, L).reshape(shape)
        return _forward_exact(x, st, b, L).reshape(shape)


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
    shape = a.shape
    L, n = shape[-2], shape[-1]
    b = int(np.prod(shape[:-2], dtype=np.int64))
    x = np.array(a, dtype=np.uint64, copy=True, order="C").reshape(b, L, n)
    with np.errstate():
        np.setbufsize(_BUFSIZE)
        if st.lazy is not None:
            return _inverse_lazy(x, st, b, L).reshape(shape)
        return _inverse_exact(x, st, b, L).reshape(shape)


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
