"""Graph-private device memory: an allocator that never hands a captured address to eager code.

CuPy's default memory pool is not capture-aware: a block freed after
capture goes back to its free list, the next eager allocation receives it, and the
graph keeps writing there on every replay. ``free_all_blocks()`` (called by users, or by
the pool itself on out-of-memory) even returns such blocks to the driver. Every capture
therefore allocates through ``cupy.cuda.using_allocator(arena.malloc)`` from a
:class:`GraphArena` owned by one program or by one ``CudaGraphPool``.

Design (chosen over a private ``cupy.cuda.MemoryPool``):

* Chunks are raw ``cupy.cuda.Memory`` allocations (one ``cudaMalloc`` each, outside any
  pool). The arena never calls ``cudaFree`` on its own: a chunk is released only when
  the arena is closed *and* no array still views it. A private ``MemoryPool`` would
  ``free_all_blocks()`` itself on out-of-memory during a later capture and release
  memory an earlier graph still writes to.
* Blocks are best-fit carved from the chunks (512-byte granularity, CuPy's unit) and
  handed out as ``MemoryPointer(UnownedMemory(ptr, size, owner=block))``. When the last
  array on a block dies, the block goes back to the arena's free list (with
  coalescing), so a temporary freed inside one capture is reused later in the same
  capture, and a pool's later captures reuse an earlier capture's scratch. That reuse
  is safe because graph nodes keep stream order and because a pool serializes replays
  with its event chain.
* Streams: a captured function may fork work onto other streams (event record and wait:
  the graph gets parallel branches). As in CuPy's own pool, a block freed during a
  capture is reused only by an allocation on the stream it was allocated on, whose
  later work is ordered after its earlier work; another branch, running beside it in
  the graph, never receives it. At the start and the end of every capture
  (:meth:`GraphArena.merge_streams`; every branch has joined the origin stream by then)
  every free range is free for any stream again. The rule for callers is CuPy's: a
  block read on a branch stays referenced until that branch has joined.
* The arena is used only on the capturing thread, under ``using_allocator``; releases
  may come from any thread (garbage collection), so the free list takes a lock.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from typing import Any

from ..interop.capabilities import require_cupy
from ..interop.devices import Device

__all__ = ["ALLOCATION_UNIT", "ANY_STREAM", "GraphArena", "live_arena_bytes"]

# Every arena not yet collected (live_arena_bytes: the process-wide allocator snapshot).
_LIVE: weakref.WeakSet[GraphArena] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()

ALLOCATION_UNIT = 512  # bytes; CuPy's allocation unit, keeps every block 512-byte aligned
ANY_STREAM = -1  # stream tag of a free range any stream may take (a stream's tag: its handle)
_MIN_CHUNK = 2 << 20  # 2 MiB


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


class _FreeList:
    """Free intervals per chunk, sorted by offset, coalesced on release. Pure Python, no CUDA.

    Kept separate from :class:`GraphArena` so blocks can point at it without keeping the
    arena (and its chunk list) alive, and so the bookkeeping can be tested without a GPU.

    Each free interval carries a stream tag: ``ANY_STREAM``, or the stream (an int) whose
    allocation it was part of, which alone may take it again until :meth:`merge_streams`
    retags every interval ``ANY_STREAM``. Intervals coalesce only with neighbours of
    the same tag.

    ``release`` only appends to a pending list (atomic under the GIL, no lock): it runs
    from ``_Block.__del__``, possibly inside a garbage-collection pass triggered while
    this thread already holds the lock in :meth:`take`. Pending releases are merged
    into the free intervals under the lock before every search and every statistic.
    """

    __slots__ = ("_used", "closed", "free", "lock", "peak_bytes", "pending", "sizes")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sizes: list[int] = []  # chunk sizes, by chunk id
        self.free: list[list[tuple[int, int, int]]] = []  # per chunk: sorted (offset, size, stream tag)
        self.pending: list[tuple[int, int, int, int]] = []
        self._used = 0
        self.peak_bytes = 0
        self.closed = False

    def add_chunk(self, size: int) -> int:
        """Register a new chunk (caller holds the lock)."""
        self.sizes.append(size)
        self.free.append([(0, size, ANY_STREAM)])
        return len(self.sizes) - 1

    def take(self, size: int, stream: int = ANY_STREAM) -> tuple[int, int] | None:
        """Best fit: ``(chunk id, offset)`` of a free range of ``size`` bytes that ``stream``
        may take (tagged ``ANY_STREAM`` or ``stream``), or ``None``.

        The caller holds the lock.
        """
        self._drain()
        best: tuple[int, int, int] | None = None  # (size, chunk, index)
        for cid, intervals in enumerate(self.free):
            for i, (_, isize, tag) in enumerate(intervals):
                if isize >= size and (tag == ANY_STREAM or tag == stream) and (best is None or isize < best[0]):
                    best = (isize, cid, i)
                    if isize == size:
                        break
        if best is None:
            return None
        isize, cid, i = best
        offset, _, tag = self.free[cid][i]
        if isize == size:
            del self.free[cid][i]
        else:
            self.free[cid][i] = (offset + size, isize - size, tag)
        self._used += size
        self.peak_bytes = max(self.peak_bytes, self._used)
        return cid, offset

    def release(self, cid: int, offset: int, size: int, stream: int = ANY_STREAM) -> None:
        """Return a range allocated on ``stream`` (any thread, any time, never blocks)."""
        self.pending.append((cid, offset, size, stream))

    def merge_streams(self) -> None:
        """Every free range becomes free for any stream (and coalesces with its neighbours).

        Only when no stream's work may still use a range freed on it concurrently with
        another stream's later work: between captures. The caller holds the lock."""
        self._drain()
        for cid, intervals in enumerate(self.free):
            merged: list[tuple[int, int, int]] = []
            for offset, size, _ in intervals:
                if merged and merged[-1][0] + merged[-1][1] == offset:
                    merged[-1] = (merged[-1][0], merged[-1][1] + size, ANY_STREAM)
                else:
                    merged.append((offset, size, ANY_STREAM))
            self.free[cid] = merged

    def used_bytes(self) -> int:
        with self.lock:
            self._drain()
            return self._used

    def intervals(self, cid: int) -> list[tuple[int, int]]:
        """Free ranges ``(offset, size)`` of one chunk (for tests and diagnostics)."""
        with self.lock:
            self._drain()
            return [(offset, size) for offset, size, _ in self.free[cid]]

    def _drain(self) -> None:
        pending = self.pending
        while pending:
            cid, offset, size, stream = pending.pop()
            self._used -= size
            if not self.closed:
                self._insert(cid, offset, size, stream)

    def _insert(self, cid: int, offset: int, size: int, stream: int) -> None:
        intervals = self.free[cid]
        i = bisect.bisect_left(intervals, (offset,))
        start, end = offset, offset + size
        if i < len(intervals) and intervals[i][0] == end and intervals[i][2] == stream:  # merge with the next
            end += intervals[i][1]
            del intervals[i]
        if i > 0 and intervals[i - 1][0] + intervals[i - 1][1] == start and intervals[i - 1][2] == stream:
            start = intervals[i - 1][0]  # and with the previous
            del intervals[i - 1]
            i -= 1
        intervals.insert(i, (start, end - start, stream))


class _Block:
    """Owner object of one handed-out range; returns it to the free list when the last view dies."""

    __slots__ = ("chunk", "cid", "free_list", "offset", "size", "stream")

    def __init__(self, chunk: Any, cid: int, offset: int, size: int, free_list: _FreeList, stream: int) -> None:
        self.chunk = chunk  # keeps the chunk's device memory alive while any array views it
        self.cid = cid
        self.offset = offset
        self.size = size
        self.free_list = free_list
        self.stream = stream  # the stream current at allocation

    def __del__(self) -> None:
        try:
            self.free_list.release(self.cid, self.offset, self.size, self.stream)
        except Exception:  # pragma: no cover - never raise from a finalizer
            pass


def live_arena_bytes(device: Device) -> tuple[int, int]:
    """``(used, reserved)`` bytes of every open arena on ``device`` in this process: the
    graph-private share of the process's device allocations (outside CuPy's pool)."""
    used = reserved = 0
    with _LIVE_LOCK:  # another thread may be creating an arena (a WeakSet must not change while copied)
        arenas = list(_LIVE)
    for arena in arenas:
        if not arena.closed and arena.device == device:
            used += arena.used_bytes
            reserved += arena.reserved_bytes
    return used, reserved


class GraphArena:
    """Graph-private device memory for captures on one CUDA device.

    Ownership: blocks handed out by :meth:`malloc` are never given to anyone outside this
    arena's captures; device memory is returned to the driver only after :meth:`close`
    and after the last array viewing it has died.
    Stream: allocation is host-only (no stream work); a freed block is reused only on
    the stream that allocated it until :meth:`merge_streams` (module docstring, Streams).

    Args:
        device: the CUDA device of every chunk.
        chunk_bytes: minimum size of one ``cudaMalloc`` (larger requests get their own
            chunk, rounded to 2 MiB).
    """

    def __init__(self, device: Device, *, chunk_bytes: int = _MIN_CHUNK) -> None:
        if device.type != "cuda":
            raise ValueError(f"GraphArena needs a CUDA device, got {device}")
        self._device = device
        self._chunk_bytes = max(_round_up(int(chunk_bytes), ALLOCATION_UNIT), ALLOCATION_UNIT)
        self._free = _FreeList()
        self._chunks: list[Any] = []
        self._closed = False
        with _LIVE_LOCK:
            _LIVE.add(self)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def used_bytes(self) -> int:
        """Bytes in blocks currently viewed by live arrays (graph outputs, escaped temporaries)."""
        return self._free.used_bytes()

    @property
    def peak_bytes(self) -> int:
        """Largest ``used_bytes`` seen: the scratch footprint of the captures so far."""
        return self._free.peak_bytes

    @property
    def reserved_bytes(self) -> int:
        """Bytes of device memory the arena holds (all chunks); the graphs' private footprint."""
        return sum(self._free.sizes) if not self._closed else 0

    def malloc(self, size: int) -> Any:
        """Allocator callable for ``cupy.cuda.using_allocator``: ``size -> cupy.cuda.MemoryPointer``.

        Raises:
            cupy.cuda.memory.OutOfMemoryError: a new chunk cannot be allocated.
            RuntimeError: the arena is closed.
        """
        if self._closed:
            raise RuntimeError("GraphArena is closed")
        cupy = require_cupy("graph-private memory")
        size = _round_up(max(int(size), 1), ALLOCATION_UNIT)
        stream = int(cupy.cuda.get_current_stream().ptr)
        free = self._free
        with free.lock:
            found = free.take(size, stream)
        if found is None:
            chunk_size = max(self._chunk_bytes, _round_up(size, _MIN_CHUNK))
            with cupy.cuda.Device(self._device.index):
                chunk = cupy.cuda.Memory(chunk_size)  # raw cudaMalloc, outside every pool
            with free.lock:
                self._chunks.append(chunk)
                free.add_chunk(chunk_size)
                found = free.take(size, stream)
            assert found is not None
        cid, offset = found
        chunk = self._chunks[cid]
        block = _Block(chunk, cid, offset, size, free, stream)
        mem = cupy.cuda.UnownedMemory(chunk.ptr + offset, size, block, self._device.index)
        return cupy.cuda.MemoryPointer(mem, 0)

    def merge_streams(self) -> None:
        """Make every free block free for any stream again (module docstring, Streams).

        Called by the capture at its start and its end: no branch of the capture is open
        then, and earlier graphs' replays are ordered before this arena's next graph (one
        program's own arena, or a pool's event chain)."""
        with self._free.lock:
            self._free.merge_streams()

    def close(self) -> None:
        """Stop handing out memory and drop the arena's chunk references. Idempotent.

        The caller must have waited for every replay of every graph that used this
        arena. Chunks still viewed by live arrays (for example a borrowed output kept by
        the user) stay allocated until those arrays die.
        """
        if self._closed:
            return
        with self._free.lock:
            self._free._drain()
            self._free.closed = True
            self._chunks = []
        self._closed = True

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"used={self.used_bytes} reserved={self.reserved_bytes}"
        return f"<GraphArena {self._device} {state}>"
