"""Replay-time helpers: reusable replay-complete events and fast source pointers."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from ..interop.arrays import data_pointer

__all__ = ["EventRing", "source_pointer_getter"]

_PRECREATED_EVENTS = 4


class EventRing:
    """Reusable replay-complete events, each with the copy sources it keeps alive.

    Events are handed out FIFO and recycled once complete. Re-recording an event is safe
    here because (1) only a completed event is recycled, and (2) every consumer of a
    replay event needs only its *latest* record: ``cudaStreamWaitEvent`` binds to the
    record current when it is enqueued, and each replay waits for the previous one, so
    the latest record implies all earlier ones.
    """

    __slots__ = ("_busy", "_cupy", "_device_index", "_free")

    def __init__(self, cupy: Any, device_index: int) -> None:
        self._cupy = cupy
        self._device_index = device_index
        self._busy: collections.deque[tuple[Any, object]] = collections.deque()
        with cupy.cuda.Device(device_index):
            self._free = [cupy.cuda.Event(block=False, disable_timing=True) for _ in range(_PRECREATED_EVENTS)]

    def acquire(self) -> Any:
        busy = self._busy
        while busy and busy[0][0].done:
            self._free.append(busy.popleft()[0])
        if self._free:
            return self._free.pop()
        with self._cupy.cuda.Device(self._device_index):
            return self._cupy.cuda.Event(block=False, disable_timing=True)

    def push(self, event: Any, sources: object) -> None:
        self._busy.append((event, sources))

    def drain(self) -> None:
        """Block until the newest replay completed (so all of them did); never raises."""
        try:
            if self._busy:
                self._busy[-1][0].synchronize()
        except Exception:  # pragma: no cover - finalizers must not raise
            pass

    def release_all(self) -> None:
        self._busy.clear()
        self._free.clear()


def source_pointer_getter(cupy: Any) -> Callable[[Any], int]:
    ndarray = cupy.ndarray

    def pointer(leaf: Any) -> int:
        if type(leaf) is ndarray:
            return leaf.data.ptr
        return data_pointer(leaf)

    return pointer
