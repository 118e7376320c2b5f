"""The base-conversion table of ``keyswitch.cu`` (built by ``_cupy_tables.base_conversion_table``)
read with the kernel's offsets, so the emulations of ``keyswitch_base_convert_s*`` decode it one way.

Layout: G group blocks of ``group_words(S, T)`` words (S = the largest group), then the targets'
constants ``q[T], qinv[T], barrett[T]``. A block: ``W[S*T]`` (Montgomery form), ``negc[T]``,
``self_rows[T]`` (~0 for "not a source of the group"), ``w[S]``, ``w_shoup[S]``, ``s[S]``,
``s_rows[S]``, then the group's source count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ConvertGroup", "convert_group", "group_words", "target_words"]


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


def convert_group(table: Sequence[int], g: int, S: int, T: int) -> ConvertGroup:
    """Group ``g``'s block of ``table`` (Python ints)."""
    gw = group_words(S, T)
    block = [int(v) for v in table[g * gw:(g + 1) * gw]]
    per_source = [block[S * T + 2 * T + k * S:S * T + 2 * T + (k + 1) * S] for k in range(4)]
    return ConvertGroup(block, block[:S * T], block[S * T:S * T + T], block[S * T + T:S * T + 2 * T], *per_source,
                        block[-1])


def target_words(table: Sequence[int], groups: int, S: int, T: int) -> list[int]:
    """The words after the ``groups`` blocks: ``q[T], qinv[T], barrett[T]`` of the targets."""
    return [int(v) for v in table[groups * group_words(S, T):]]
