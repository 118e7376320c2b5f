"""Make freed device memory visible: fill the blocks CuPy's pool would hand out next."""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["replay_over_freed_blocks"]


def _junk_over_freed_blocks(blocks: int = 512) -> list[Any]:
    """Collect garbage, then allocate ``blocks`` arrays of 4096 all-ones words (32 KiB each):
    what eager code would write into memory a graph still reads had it been freed. Keep the
    list alive while replaying."""
    import cupy as cp

    gc.collect()
    return [cp.full(1 << 12, 0xFFFF_FFFF_FFFF_FFFF, dtype=cp.uint64) for _ in range(blocks)]


def replay_over_freed_blocks(program: Any, *inputs: Any, blocks: int = 512) -> Any:
    """``program.replay(*inputs, copy_output=True, synchronize=True)`` while ``blocks`` junk
    arrays fill the memory CuPy would hand out next (``_junk_over_freed_blocks``): the owned
    output, computed from whatever the graph reads."""
    junk = _junk_over_freed_blocks(blocks)
    try:
        return program.replay(*inputs, copy_output=True, synchronize=True)
    finally:
        del junk
