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

from ..encoding import crt_reconstructor
from ..modarith import shoup_companion
from ..ntt import coefficient_automorphism_indices, ntt_automorphism_indices, ntt_tables
from .base import RingContext, active_digits

__all__ = [
    "crt_table",
    "active_digits",
    "base_conversion_table",
    "byte_group_words",
    "byte_table_fits",
    "coefficient_automorphism_map",
    "moddown_rescale_tables",
    "moddown_tables",
    "modulus_constants",
    "modup_byte_table",
    "modup_spread_table",
    "modup_tables",
    "ntt_automorphism_permutation",
    "rescale_table",
    "shoup_companion",
    "twiddle_tables",
]

_R = 1 << 64


def modulus_constants(moduli: Sequence[int], n: int) -> np.ndarray:
    """The ``[6, M]`` per-modulus constant table of ``modarith.cuh`` (same row order)."""
    rows = []
    for q in moduli:
        ninv = pow(n, -1, q)
        rows.append([q, pow(q, -1, _R), _R * _R % q, _R // q, ninv, shoup_companion(ninv, q)])
    return np.array(rows, dtype=np.uint64).T.copy()


def twiddle_tables(q: int, psi: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(psi^br(k), Shoup, psi^-br(k), Shoup)`` for k < n, uint64 (ntt_stages.cuh tables):
    the NumPy engine's ``ntt_tables``, the one source of twiddles."""
    t = ntt_tables(q, psi, n)
    return t.forward, t.forward_shoup, t.inverse, t.inverse_shoup


def ntt_automorphism_permutation(n: int, g: int) -> np.ndarray:
    """``ntt_automorphism_indices`` as the kernels' int32 gather table."""
    return ntt_automorphism_indices(n, g % (2 * n)).astype(np.int32)


def coefficient_automorphism_map(n: int, g: int) -> np.ndarray:
    """``coefficient_automorphism_indices`` packed for the kernels: source index, bit 31 set =
    negate (uint32)."""
    source, negate = coefficient_automorphism_indices(n, g % (2 * n))
    return (source | (negate.astype(np.int64) << 31)).astype(np.uint32)


def _conversion_weights(context: RingContext, group: Sequence[int], targets: Sequence[int]) -> tuple[list, list]:
    """A base conversion's weights from the source primes ``group`` (product Q_g) into the prime
    ids ``targets``, in Montgomery form: ``W[j][t] = (Q_g / s_j mod m_t) 2^64 mod m_t`` and
    ``negc[t] = (-Q_g) 2^64 mod m_t`` (keyswitch.cu, both conversion kernels)."""
    q_g = math.prod(context.moduli[j] for j in group)
    moduli = [context.moduli[t] for t in targets]
    weights = [[(q_g // context.moduli[j]) % m * _R % m for m in moduli] for j in group]
    return weights, [(-q_g) % m * _R % m for m in moduli]


def _source_constants(context: RingContext, group: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """``(w_j, Shoup(w_j), s_j)`` of the sources: ``w_j = (Q_g / s_j)^-1 mod s_j``, the factor
    that scales source j before its centered sum."""
    q_g = math.prod(context.moduli[j] for j in group)
    moduli = [context.moduli[j] for j in group]
    scale = [pow(q_g // s, -1, s) for s in moduli]
    return scale, [shoup_companion(w, s) for w, s in zip(scale, moduli)], moduli


# keyswitch.cu PieceSum: 27-bit pieces, for values below 2^54
PIECE_BITS = 27


def weight_pieces(weight: int) -> int:
    """A Montgomery-form weight below 2^54 as keyswitch.cu's weight pieces: its low 27 bits,
    and the rest 32 bits up."""
    return weight & ((1 << PIECE_BITS) - 1) | (weight >> PIECE_BITS) << 32


def base_conversion_table(
    context: RingContext, groups: Sequence[Sequence[int]], in_rows: Sequence[int], out_rows: Sequence[int],
    *, pieces: bool = True,
) -> tuple[np.ndarray, int]:
    """Table of ``keyswitch_base_convert_s*`` (layout documented in keyswitch.cu) and ``S``.

    ``groups``: the source prime ids of each group (rows of the input, whose row order is
    ``in_rows``); every group converts into every prime id of ``out_rows``. With ``pieces``
    a group with a source of 54 bits or more converting into targets all below 2^54 (a
    ModDown) holds its weights in pieces and says so in its count word (the kernel then sums
    4 32-bit multiply-adds a term instead of a 64 x 64-bit one); the sum, so every output,
    is the same either way."""
    S, T = max(len(g) for g in groups), len(out_rows)
    position = {r: i for i, r in enumerate(in_rows)}
    narrow_targets = all(context.moduli[t] < 1 << 2 * PIECE_BITS for t in out_rows)
    words: list[int] = []
    for group in groups:
        weights, negc = _conversion_weights(context, group, out_rows)
        split = pieces and narrow_targets and any(context.moduli[j] >= 1 << 2 * PIECE_BITS for j in group)
        if split:
            weights = [[weight_pieces(w) for w in row] for row in weights]
        w_tab = [w for row in weights for w in row] + [0] * ((S - len(group)) * T)
        self_rows = [position[t] if t in group else _R - 1 for t in out_rows]
        pad = [0] * (S - len(group))
        scale, shoup, moduli = _source_constants(context, group)
        words += w_tab + negc + self_rows + scale + pad + shoup + pad + moduli + pad
        words += [position[j] for j in group] + pad + [len(group) | split << 32]
    targets = [context.moduli[t] for t in out_rows]
    words += targets + [pow(q, -1, _R) for q in targets] + [_R // q for q in targets]
    return np.array(words, dtype=np.uint64), S


def modup_tables(context: RingContext, rows: Sequence[int]) -> dict[str, Any]:
    """ModUp of ``rows``: output prime ids, the key digit of each active digit, the base
    conversion of each active digit's primes into ``rows + p_rows``, and ``own_rows``: each
    active digit's own rows as ``(start, count)`` output positions (None unless every digit's
    are contiguous; the forward NTT may skip them when the input's NTT is at hand)."""
    rows = tuple(rows)
    out_rows = rows + tuple(range(context.q_count, context.q_count + context.p_count))
    active = active_digits(context, rows)
    table, size = base_conversion_table(context, [kept for _, kept in active], rows, out_rows)
    own, contiguous = [], True
    for _, kept in active:
        positions = [rows.index(r) for r in kept]
        own.append((positions[0], len(positions)))
        contiguous = positions == list(range(positions[0], positions[0] + len(positions)))
        if not contiguous:
            break
    return {
        "out_rows": out_rows,
        "key_digits": np.array([index for index, _ in active], dtype=np.int32),
        "convert": table,
        "convert_size": size,
        "groups": [kept for _, kept in active],
        "own_rows": own if contiguous else None,
    }


def modup_spread_table(context: RingContext, groups: Sequence[Sequence[int]], in_rows: Sequence[int],
                       out_rows: Sequence[int], *, source: int = 0,
                       components: Sequence[int] = ()) -> np.ndarray | None:
    """``ntt.cu`` ``ntt_forward_column_stages_modup_spread``'s table of a ModUp whose digits are
    one prime each, ``[q_d, source << 32 | input row of d, q_d mod m_t for each output row t]``
    per digit d (so digit d's row t is ``centered(c_d, q_d) mod m_t``: the base conversion of a
    group of one; ``source``: the component the digits come from), then per entry k of
    ``components`` a group that transforms component k itself, ``[0, k << 32, 0 for the input
    rows, ~0 for the output rows past them]``; None when a digit has more primes."""
    if any(len(g) != 1 for g in groups):
        return None
    position = {r: i for i, r in enumerate(in_rows)}
    words: list[int] = []
    for (j,) in groups:
        q = context.moduli[j]
        words += [q, source << 32 | position[j]] + [q % context.moduli[t] for t in out_rows]
    for k in components:
        words += [0, k << 32] + [0] * len(in_rows) + [_R - 1] * (len(out_rows) - len(in_rows))
    return np.array(words, dtype=np.uint64)


# keyswitch.cu keyswitch_base_convert_bytes_mma: s = a + b < 6 + 8 - 1 byte offsets, at most 9
# sources a group, each below 2^48 (6 bytes)
BYTE_S = 13
BYTE_SOURCES = 9
BYTE_SOURCE_BITS = 48


def byte_group_words(target_groups: int) -> int:
    """Words of one group block of ``modup_byte_table`` (``keyswitch.cu`` ``byte_group_words``)."""
    return target_groups * (BYTE_S * 2 * 32 + 24) + 5 * BYTE_SOURCES + 3


def _byte_slots() -> np.ndarray:
    """``[4, 16, 2]``: for lane ``c`` of a row group and byte slot ``p`` of its 128-bit A word,
    ``(source j, byte a)``; j = 9 is the negative count (its byte 0), -1 an empty slot. Lane c
    holds ``y_c + y_(c+4) 2^48 + e_c 2^96``, e_c = bytes 2c, 2c + 1 of y_8 (c < 3), e_3 = cnt."""
    slots = np.full((4, 16, 2), -1, dtype=np.int64)
    for c in range(4):
        for p in range(16):
            if p < 6:
                slots[c, p] = (c, p)
            elif p < 12:
                slots[c, p] = (c + 4, p - 6)
            elif p < 14 and c < 3:
                slots[c, p] = (8, 2 * c + p - 12)
            elif p == 12:
                slots[c, p] = (BYTE_SOURCES, 0)
    return slots


def byte_table_fits(context: RingContext, groups: Sequence[Sequence[int]]) -> bool:
    """Whether ``keyswitch_base_convert_bytes_mma`` serves these groups: at most 9 sources a group,
    every source prime below 2^48, and whole 16-coefficient tiles."""
    return (context.ring_degree % 16 == 0 and all(len(g) <= BYTE_SOURCES for g in groups)
            and all(context.moduli[j] < 1 << BYTE_SOURCE_BITS for g in groups for j in g))


def modup_byte_table(context: RingContext, groups: Sequence[Sequence[int]], in_rows: Sequence[int],
                     out_rows: Sequence[int]) -> tuple[np.ndarray, int]:
    """Table of ``keyswitch_base_convert_bytes_mma`` (layout documented in keyswitch.cu) and its
    target groups of 8: the conversion of ``base_conversion_table`` (same ``W`` and ``negc`` in
    Montgomery form), each group's targets being the ``out_rows`` that are not its sources (those
    are copied). Raises ValueError when ``byte_table_fits`` does not hold."""
    if not byte_table_fits(context, groups):
        raise ValueError("the byte-sliced base conversion takes at most 9 sources a group, each below 2^48")
    position = {r: i for i, r in enumerate(in_rows)}
    targets = [[t for t, r in enumerate(out_rows) if r not in group] for group in groups]
    tg = max(1, max(-(-len(t) // 8) for t in targets))
    slots = _byte_slots()
    lane = np.arange(32)
    # [tg, s, ks, lane, byte k of the u64 (b0 bytes 0-3, b1 bytes 4-7)]: slot p = 8 ks + 4 (k >> 2) + (k & 3)
    ks = np.arange(2)[:, None, None]
    k = np.arange(8)[None, None, :]
    p = 8 * ks + 4 * (k >> 2) + (k & 3)  # [2, 1, 8]
    slot = slots[(lane & 3)[None, :, None], p]  # [2, 32, 8, 2]
    j, a = slot[..., 0], slot[..., 1]
    col = np.arange(tg)[:, None, None, None, None] * 8 + (lane >> 2)[None, None, None, :, None]  # [tg, 1, 1, 32, 1]
    s = np.arange(BYTE_S)[None, :, None, None, None]
    b = s - a[None, None]  # [1, S, 2, 32, 8] byte of W
    live = (j[None, None] >= 0) & (b >= 0) & (b < 8)
    blocks = []
    for group, tgt in zip(groups, targets):
        # weights [10, 8 tg] (source j, column): W in Montgomery form, row 9 = negc, zero past the group
        w_rows, negc = _conversion_weights(context, group, [out_rows[t] for t in tgt])
        weights = np.zeros((BYTE_SOURCES + 1, 8 * tg), dtype=np.uint64)
        weights[:len(group), :len(tgt)] = np.array(w_rows, dtype=np.uint64).reshape(len(group), len(tgt))
        weights[BYTE_SOURCES, :len(tgt)] = negc
        byte_of = (weights[:, :, None] >> (8 * np.arange(8, dtype=np.uint64))) & np.uint64(0xFF)  # [10, 8 tg, 8]
        values = byte_of[np.where(live, j[None, None], 0), col, np.clip(b, 0, 7)]
        values = np.where(live, values, np.uint64(0))  # [tg, S, 2, 32, 8]
        frag = (values << (8 * np.arange(8, dtype=np.uint64))).sum(axis=-1, dtype=np.uint64)  # bytes disjoint
        pad = [_R - 1] * (8 * tg - len(tgt))
        moduli = [context.moduli[out_rows[t]] for t in tgt]
        qs = moduli + [moduli[0] if moduli else 1] * len(pad)  # padding columns are never reduced
        words = [int(v) for v in frag.reshape(-1)]
        words += tgt + pad
        words += qs + [pow(q, -1, _R) for q in qs]
        extra = [0] * (BYTE_SOURCES - len(group))
        for constants in _source_constants(context, group):
            words += constants + extra
        words += [position[x] for x in group] + extra
        words += [list(out_rows).index(x) for x in group] + extra
        words += [len(group), max(1, -(-len(tgt) // 8)), 0]  # count, the group's own target groups, pad
        assert len(words) == byte_group_words(tg)
        blocks += words
    return np.array(blocks, dtype=np.uint64), tg


def ntt_row_skip_table(own_rows: Sequence[tuple[int, int]], batch: int, rows: int) -> np.ndarray:
    """``ntt.cu`` row-skip table of a ModUp output ``[D, batch, rows, N]``: entry z = d * batch + b
    skips digit d's own rows, ``(start, count, rows)`` int32 per entry."""
    return np.array([(start, count, rows) for start, count in own_rows for _ in range(batch)],
                    dtype=np.int32).reshape(-1)


def _division_constants(context: RingContext, dropped: Sequence[int], out_rows: Sequence[int]) -> np.ndarray:
    """``[D mod q_i, D^-1 mod q_i, Shoup(D^-1)]`` over ``out_rows`` for ``D = prod(moduli[dropped])``:
    the constants of a rounding division (keyswitch_moddown_combine's pinv, the rescale kernels')."""
    big = math.prod(context.moduli[j] for j in dropped)
    qs = [context.moduli[r] for r in out_rows]
    inv = [pow(big, -1, q) for q in qs]
    return np.array([big % q for q in qs] + inv + [shoup_companion(v, q) for v, q in zip(inv, qs)], dtype=np.uint64)


def _division_tables(context: RingContext, dropped: Sequence[int], in_rows: Sequence[int],
                     out_rows: Sequence[int], pieces: bool = True) -> dict[str, Any]:
    """Rounding division by ``D = prod(moduli[dropped])`` of an input over ``in_rows`` into
    ``out_rows``: the base conversion of the dropped primes into ``out_rows`` (``pieces`` as
    ``base_conversion_table``'s) and its ``pinv`` (``_division_constants``)."""
    table, size = base_conversion_table(context, [tuple(dropped)], tuple(in_rows), tuple(out_rows), pieces=pieces)
    return {"convert": table, "convert_size": size, "pinv": _division_constants(context, dropped, out_rows)}


def moddown_tables(context: RingContext, rows: Sequence[int], *, pieces: bool = True) -> dict[str, Any]:
    """ModDown into ``rows``: the base conversion of the P primes (input rows ``rows + p_rows``)
    into ``rows`` (``pieces`` as ``base_conversion_table``'s), and ``pinv = [P mod q_i, P^-1 mod
    q_i, Shoup]`` of keyswitch_moddown_combine."""
    rows = tuple(rows)
    p_rows = tuple(range(context.q_count, context.q_count + context.p_count))
    return _division_tables(context, p_rows, rows + p_rows, rows, pieces)


def moddown_rescale_tables(context: RingContext, rows: Sequence[int], *, pieces: bool = True) -> dict[str, Any]:
    """ModDown and rescale as one rounding division by ``P q_0`` (``q_0`` = ``rows[0]``, the
    prime a rescale drops): the base conversion of ``q_0`` and the P primes (input rows
    ``rows + p_rows``) into ``rows[1:]`` (``pieces`` as ``base_conversion_table``'s), and its
    ``pinv`` over ``rows[1:]``."""
    rows = tuple(rows)
    p_rows = tuple(range(context.q_count, context.q_count + context.p_count))
    return _division_tables(context, rows[:1] + p_rows, rows + p_rows, rows[1:], pieces)


def crt_table(context: RingContext, rows: Sequence[int]) -> np.ndarray:
    """``rns_centered_crt_to_double``'s table of ``rows``: the constants of the host's
    ``encoding.CrtReconstructor`` (so the device digits and sums are the host's), row i at
    5 i: ``q_i``, ``H mod q_i``, H's digit i (as a two's-complement word), ``M_i^-1 mod q_i`` and
    its Shoup companion; then the pairs ``(M_k mod q_i, Shoup)`` for k < i, row by row."""
    crt = crt_reconstructor(tuple(context.moduli[r] for r in rows))
    L = len(crt.moduli)
    head, pairs = [], []
    for i, q in enumerate(crt.moduli):
        consts, inv = crt.prefix[i]
        head += [q, int(crt.h_mod[i, 0]), int(crt.h_digits[i]) & (2**64 - 1), inv, shoup_companion(inv, q)]
        for c in consts:
            pairs += [c, shoup_companion(c, q)]
    assert len(pairs) == L * (L - 1)
    return np.array(head + pairs, dtype=np.uint64)


def rescale_table(context: RingContext, rows: Sequence[int]) -> np.ndarray:
    """``[q0 mod q_i, q0^-1 mod q_i, Shoup]`` over the remaining rows (rns.cu rescale kernels)."""
    return _division_constants(context, rows[:1], rows[1:])
