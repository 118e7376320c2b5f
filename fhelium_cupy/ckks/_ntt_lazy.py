"""Signed lazy-reduction NTT (every modulus < 2**50): bound planning and the lazy transforms.

Chosen by :func:`fhelium_cupy.ckks.ntt.stack_ntt_tables` when every modulus is below
``2**50``; bit-identical to the exact path of :mod:`fhelium_cupy.ckks.ntt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._ntt_layout import _q_for, _Stacked, _transpose, _views
from .modarith import as_u64

if TYPE_CHECKING:
    from .ntt import NttTables

__all__ = ["_LazyPlan", "_forward_lazy", "_inverse_lazy", "_plan_lazy"]

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


_I64 = np.int64


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
    if reduce:
        _canonicalize_reduce_only(x, b, L, n, st, bufs)
    half = x.reshape(b, L, 2, n // 2)
    s1 = bufs[1].reshape(b, L, n // 2)
    for k in range(2):
        part = half[:, :, k, :]
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
    """One lazy reduction (``x * 1``) of signed lazy ``x [b, L, n]``, in place, half by half."""
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

