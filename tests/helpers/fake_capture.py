"""``tests.helpers.fake_cupy`` extended so that the real capture path (``_capture.capture_parts``:
warmup, capture into a graph arena, first replay) runs on the CPU, with every raw device
allocation tracked: ``LIVE`` maps each live allocation to ``(label, bytes)``, ``"chunk"`` for a
graph arena's ``cupy.cuda.Memory`` and ``"pool"`` for an allocation through ``cupy.cuda.alloc``
(CuPy's default pool or whatever allocator is installed). What the tests ask: which memory a
failed capture, a closed program or a pool still holds."""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from typing import Any

import numpy as np

from tests.helpers import fake_cupy

_ADDRESSES = itertools.count(1 << 40, 1 << 26)
LIVE: dict[int, tuple[str, int]] = {}


class RawMemory:
    """A cudaMalloc'd block; it leaves ``LIVE`` when it is collected."""

    def __init__(self, size: int, label: str) -> None:
        self.ptr = next(_ADDRESSES)
        self.size = size
        self.device_id = 0
        LIVE[id(self)] = (label, size)
        weakref.finalize(self, LIVE.pop, id(self), None)


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = 0) -> None:
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id


class MemoryPointer:
    __slots__ = ("device_id", "mem", "ptr")

    def __init__(self, mem: Any, offset: int) -> None:
        self.mem, self.ptr, self.device_id = mem, mem.ptr + int(offset), 0

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.mem, self.ptr - self.mem.ptr + int(offset))


class Graph:
    """What ``end_capture`` returns: launching it counts, or raises with ``fake.fail_launch``."""

    def __init__(self, fake: Any) -> None:
        self._fake = fake
        self.graph = 0

    def launch(self, stream: Any = None) -> None:
        if self._fake.fail_launch:
            raise RuntimeError("launch failed (injected)")
        self._fake.launches += 1


def install(patch: Any = setattr) -> Any:
    """``fake_cupy.install`` plus stream capture, allocators and raw memory (see module doc)."""
    fake = fake_cupy.install(patch)
    fake.fail_launch = False
    fake.launches = 0
    fake.capturing = set()
    local = threading.local()
    cuda = fake.cuda

    class Stream(cuda.Stream):  # type: ignore[name-defined, misc]
        def record(self, event: Any = None) -> Any:
            event = event or cuda.Event()
            event.record(self)
            return event

        def wait_event(self, event: Any) -> None:
            pass

        def begin_capture(self, mode: Any = None) -> None:
            fake.capturing.add(self.ptr)

        def is_capturing(self) -> bool:
            return self.ptr in fake.capturing

        def end_capture(self) -> Graph:
            fake.capturing.discard(self.ptr)
            return Graph(fake)

    cuda.Stream = Stream
    fake.current_stream.__class__ = Stream

    def alloc(size: int) -> MemoryPointer:
        allocator = getattr(local, "allocator", None)
        return allocator(size) if allocator else MemoryPointer(RawMemory(max(size, 1), "pool"), 0)

    @contextlib.contextmanager
    def using_allocator(allocator: Any = None) -> Any:
        previous = getattr(local, "allocator", None)
        local.allocator = allocator
        try:
            yield
        finally:
            local.allocator = previous

    class DefaultPool:
        def free_all_blocks(self, stream: Any = None) -> None:
            pass

        def used_bytes(self) -> int:
            return 0

        def total_bytes(self) -> int:
            return 0

    default_pool = DefaultPool()
    cuda.alloc = alloc
    cuda.using_allocator = using_allocator
    cuda.Memory = lambda size: RawMemory(size, "chunk")
    cuda.UnownedMemory = UnownedMemory
    cuda.MemoryPointer = MemoryPointer
    cuda.runtime.streamCaptureModeRelaxed = 2
    cuda.runtime.memGetInfo = staticmethod(lambda: (1 << 30, 1 << 31))
    fake.get_default_memory_pool = lambda: default_pool
    return fake


def device_array(shape: tuple[int, ...] = (4,), dtype: Any = np.uint64) -> Any:
    """A fake device array from the current allocator (what ``cupy.empty`` would allocate)."""
    from fhelium_cupy.interop import capabilities

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return fake_cupy.FakeArray(shape, dtype, memptr=capabilities.cupy_or_none().cuda.alloc(nbytes))


def held_since(before: set[int]) -> list[tuple[str, int]]:
    """The allocations live now that were not live in ``before`` (a set of ``LIVE`` keys)."""
    return sorted(value for key, value in LIVE.items() if key not in before)
