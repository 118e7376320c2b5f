"""Host-side tables for the CUDA kernels: Shoup/Montgomery constants, twiddles, Galois maps,
ModUp/ModDown/rescale base-conversion constants.

Pure Python integers and NumPy (no CuPy): ``CupyBackend`` uploads these once per ``rows``
tuple or Galois element and caches them on the device; the CPU tests check them against
the Python-integer oracles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import RingContext

__all__ = [
    "active_digits",
    "base_conversion_table",
    "bitrev_indices",
    "coefficient_automorphism_map",
    "moddown_tables",
    "modulus_constants",
    "modup_tables",
    "ntt_automorphism_permutation",
    "rescale_table",
    "shoup_companion",
    "twiddle_tables",
]

_R = 1 << 64


def shoup_companion(w: int, q: int) -> int:
    """floor(w * 2^64 / q) for 0 <= w < q."""
    return (w << 64) // q


def bitrev_indices(n: int) -> np.ndarray:
    """``bitrev(k)`` over log2(n) bits for k < n (int64)."""
    bits = n.bit_length() - 1
    idx = np.arange(n, dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    for b in range(bits):
        out |= ((idx >> b) & 1) << (bits - 1 - b)
    return out


def modulus_constants(moduli: Sequence[int], n: int) -> np.ndarray:
    """The ``[6, M]`` per-modulus constant table of ``modarith.cuh`` (same row order)."""
    rows = []
    for q in moduli:
        ninv = pow(n, -1, q)
        rows.append([q, pow(q, -1, _R), _R * _R % q, _R // q, ninv, shoup_companion(ninv, q)])
    return np.array(rows, dtype=np.uint64).T.copy()


def _powers(base: int, q: int, n: int) -> np.ndarray:
    """base^k mod q for k < n as an object array (two-level table, vectorized)."""
    lo = 1 << ((n.bit_length() - 1) // 2)
    hi = n // lo
    small = [1] * lo
    for k in range(1, lo):
        small[k] = small[k - 1] * base % q
    step = small[-1] * base % q
    big = [1] * hi
    for k in range(1, hi):
        big[k] = big[k - 1] * step % q
    return (np.array(big, dtype=object)[:, None] * np.array(small, dtype=object)[None, :] % q).reshape(n)


def twiddle_tables(q: int, psi: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(psi^br(k), Shoup, psi^-br(k), Shoup)`` for k < n, uint64 (ntt_stages.cuh tables)."""
    br = bitrev_indices(n)
    fwd = _powers(psi, q, n)[br]
    inv = _powers(pow(psi, -1, q), q, n)[br]
    shift = (fwd * (1 << 64)) // q, (inv * (1 << 64)) // q
    return (fwd.astype(np.uint64), shift[0].astype(np.uint64), inv.astype(np.uint64), shift[1].astype(np.uint64))


def ntt_automorphism_permutation(n: int, g: int) -> np.ndarray:
    """Output i reads input ``bitrev(((2 bitrev(i) + 1) g mod 2N - 1) / 2)`` (int32)."""
    br = bitrev_indices(n)
    return br[(((2 * br + 1) * g) % (2 * n) - 1) // 2].astype(np.int32)


def coefficient_automorphism_map(n: int, g: int) -> np.ndarray:
    """Source index of each output coefficient of X^j -> X^(jg); bit 31 set = negate (uint32)."""
    j = np.arange(n, dtype=np.int64)
    e = (j * g) % (2 * n)
    out = np.empty(n, dtype=np.uint32)
    out[e % n] = (j | ((e >= n).astype(np.int64) << 31)).astype(np.uint32)
    return out


def active_digits(context: RingContext, rows: Sequence[int]) -> list[tuple[int, tuple[int, ...]]]:
    """(level-0 digit index, surviving prime ids) of each non-empty digit at ``rows``."""
    present = set(rows)
    active = []
    for index, digit in enumerate(context.digits):
        kept = tuple(r for r in digit if r in present)
        if kept:
            active.append((index, kept))
    return active


def base_conversion_table(
    context: RingContext, groups: Sequence[Sequence[int]], in_rows: Sequence[int], out_rows: Sequence[int]
) -> tuple[np.ndarray, int]:
    """Table of ``keyswitch_base_convert_s*`` (layout documented in keyswitch.cu) and ``S``.

    ``groups``: the source prime ids of each group (rows of the input, whose row order is
    ``in_rows``); every group converts into every prime id of ``out_rows``."""
    S, T = max(len(g) for g in groups), len(out_rows)
    position = {r: i for i, r in enumerate(in_rows)}
    words: list[int] = []
    for group in groups:
        q_g = math.prod(context.moduli[j] for j in group)
        w_tab = [0] * (S * T)
        for j, prime in enumerate(group):
            s_j = context.moduli[prime]
            for t, target in enumerate(out_rows):
                m = context.moduli[target]
                w_tab[j * T + t] = (q_g // s_j) % m * _R % m
        negc = [(-q_g) % context.moduli[t] * _R % context.moduli[t] for t in out_rows]
        self_rows = [position[t] if t in group else _R - 1 for t in out_rows]
        pad = [0] * (S - len(group))
        scale = [pow(q_g // context.moduli[j], -1, context.moduli[j]) for j in group]
        shoup = [shoup_companion(w, context.moduli[j]) for w, j in zip(scale, group)]
        moduli = [context.moduli[j] for j in group]
        words += w_tab + negc + self_rows + scale + pad + shoup + pad + moduli + pad
        words += [position[j] for j in group] + pad + [len(group)]
    targets = [context.moduli[t] for t in out_rows]
    words += targets + [pow(q, -1, _R) for q in targets] + [_R // q for q in targets]
    return np.array(words, dtype=np.uint64), S


def modup_tables(context: RingContext, rows: Sequence[int]) -> dict[str, Any]:
    """ModUp of ``rows``: output prime ids, the key digit of each active digit, and the base
    conversion of each active digit's primes into ``rows + p_rows``."""
    rows = tuple(rows)
    out_rows = rows + tuple(range(context.q_count, context.q_count + context.p_count))
    active = active_digits(context, rows)
    table, size = base_conversion_table(context, [kept for _, kept in active], rows, out_rows)
    return {
        "out_rows": out_rows,
        "key_digits": np.array([index for index, _ in active], dtype=np.int32),
        "convert": table,
        "convert_size": size,
    }


def moddown_tables(context: RingContext, rows: Sequence[int]) -> dict[str, Any]:
    """ModDown into ``rows``: the base conversion of the P primes (input rows ``rows + p_rows``)
    into ``rows``, and ``pinv = [P mod q_i, P^-1 mod q_i, Shoup]`` of keyswitch_moddown_combine."""
    rows = tuple(rows)
    p_rows = tuple(range(context.q_count, context.q_count + context.p_count))
    table, size = base_conversion_table(context, [p_rows], rows + p_rows, rows)
    big_p = math.prod(context.moduli[j] for j in p_rows)
    qs = [context.moduli[r] for r in rows]
    p_inv = [pow(big_p, -1, q) for q in qs]
    pinv = [big_p % q for q in qs] + p_inv + [shoup_companion(v, q) for v, q in zip(p_inv, qs)]
    return {"convert": table, "convert_size": size, "pinv": np.array(pinv, dtype=np.uint64)}


def rescale_table(context: RingContext, rows: Sequence[int]) -> np.ndarray:
    """``[q0 mod q_i, q0^-1 mod q_i, Shoup]`` over the remaining rows (rns.cu rescale kernels)."""
    q0 = context.moduli[rows[0]]
    qs = [context.moduli[r] for r in rows[1:]]
    inv = [pow(q0, -1, q) for q in qs]
    return np.array([q0 % q for q in qs] + inv + [shoup_companion(v, q) for v, q in zip(inv, qs)], dtype=np.uint64)
