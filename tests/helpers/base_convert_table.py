"""The base-conversion tables of ``keyswitch.cu`` (built by ``_cupy_tables.base_conversion_table``
and ``modup_byte_table``) read with the kernels' offsets, so the emulations and tests decode each
one way.

Layout: G group blocks of ``group_words(S, T)`` words (S = the largest group), then the targets'
constants ``q[T], qinv[T], barrett[T]``. A block: ``W[S*T]`` (Montgomery form), ``negc[T]``,
``self_rows[T]`` (~0 for "not a source of the group"), ``w[S]``, ``w_shoup[S]``, ``s[S]``,
``s_rows[S]``, then the group's source count (plus 2^32 when its weights are in pieces:
``W mod 2^27 | (W >> 27) << 32``; ``convert_group`` gives them whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ByteGroup", "ConvertGroup", "byte_group", "byte_group_words", "convert_group", "group_words", "target_words"]


def group_words(S: int, T: int) -> int:
    """Words of one group block (``keyswitch.cu`` ``bc_group_words``)."""
    return S * T + 2 * T + 4 * S + 1


@dataclass(frozen=True)
class ConvertGroup:
    """One group block, decoded. ``words`` is the raw block (the kernel's shared-memory copy)."""

    words: list[int]
    W: list[int]
    negc: list[int]
    self_rows: list[int]
    w: list[int]
    w_shoup: list[int]
    s: list[int]
    s_rows: list[int]
    count: int
    weight_pieces: bool  # the table holds W in pieces (W above is whole)


def convert_group(table: Sequence[int], g: int, S: int, T: int) -> ConvertGroup:
    """Group ``g``'s block of ``table`` (Python ints)."""
    gw = group_words(S, T)
    block = [int(v) for v in table[g * gw:(g + 1) * gw]]
    per_source = [block[S * T + 2 * T + k * S:S * T + 2 * T + (k + 1) * S] for k in range(4)]
    pieces = block[-1] >> 32 != 0
    W = [(v & 0xFFFFFFFF) | (v >> 32) << 27 if pieces else v for v in block[:S * T]]
    if pieces:
        assert all(v & 0xFFFFFFFF < 1 << 27 for v in block[:S * T]), "a low piece wider than 27 bits"
    return ConvertGroup(block, W, block[S * T:S * T + T], block[S * T + T:S * T + 2 * T], *per_source,
                        block[-1] & 0xFFFFFFFF, pieces)


def target_words(table: Sequence[int], groups: int, S: int, T: int) -> list[int]:
    """The words after the ``groups`` blocks: ``q[T], qinv[T], barrett[T]`` of the targets."""
    return [int(v) for v in table[groups * group_words(S, T):]]


# --- keyswitch_base_convert_bytes_mma's table (_cupy_tables.modup_byte_table) ----------------
BYTE_S = 13  # byte offsets s = a + b
BYTE_SOURCES = 9


def byte_group_words(tg: int) -> int:
    """Words of one group block (``keyswitch.cu`` ``byte_group_words``): B fragments, then 8 words
    (output row) and 16 (q, qinv) a target group, then 5 x 9 source words and 3 more."""
    return tg * (BYTE_S * 2 * 32 + 24) + 5 * BYTE_SOURCES + 3


@dataclass(frozen=True)
class ByteGroup:
    """One group block of the byte table, decoded (``tg``: the table's target groups)."""

    frag: Any  # [tg, 13, 2, 32] uint64: lane words (b0 | b1 << 32) per target group, s, k-step
    out_rows: list[int]  # per target column, ~0 for padding
    q: list[int]
    qinv: list[int]
    w: list[int]
    w_shoup: list[int]
    s: list[int]
    s_rows: list[int]  # input row of each source
    s_out_rows: list[int]  # output row of each source (copied)
    count: int
    group_tgs: int  # the group's own target groups (the kernel's loop bound)
    pad: int


def byte_group(table: Any, g: int, tg: int) -> ByteGroup:
    """Group ``g``'s block of a byte table (a uint64 array)."""
    gw = byte_group_words(tg)
    block = table[g * gw:(g + 1) * gw]
    head = tg * BYTE_S * 64
    rest = [int(v) for v in block[head:]]
    col = 8 * tg
    src = rest[3 * col:]
    per_source = [src[k * BYTE_SOURCES:(k + 1) * BYTE_SOURCES] for k in range(5)]
    return ByteGroup(block[:head].reshape(tg, BYTE_S, 2, 32), rest[:col], rest[col:2 * col], rest[2 * col:3 * col],
                     *per_source, *src[5 * BYTE_SOURCES:])
