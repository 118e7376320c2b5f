"""Two-layout view of stacked NTT tables, shared by the exact and the signed lazy transform.

``N = R * C`` with ``C = 2**ceil(log2(N)/2)``: early stages (butterfly half-width ``t >= C``)
work on the natural layout, later ones on the transposed ``[C, R]`` layout, so every
element-wise operation has a contiguous inner run of at least ``min(C, R)`` words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ._ntt_lazy import _LazyPlan

__all__ = ["_Stacked", "_q_for", "_transpose", "_views"]


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

