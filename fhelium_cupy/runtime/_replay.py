"""Replay-complete events: recycled without polling, holding the copy sources they protect."""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["EventRing"]

_MIN_SWEEP = 4  # also the number of events created up front
_IDLE_SWEEP = 64  # replays without sources between two sweeps of the events that hold some


class EventRing:
    """Replay-complete events of one program, each with the copy sources it keeps alive.

    The records form a chain: every replay is ordered after the previous one (same
    stream, or a ``cudaStreamWaitEvent`` on the previous event), so when one record
    completed, all earlier records did too. Hence:

    * events that hold sources are swept only once ``_sweep_at`` of them are busy; one
      query of the *newest* usually frees them all. While the device lags behind, the
      threshold doubles, so queries stay O(1) per replay and sources are held for at
      most about twice the replays in flight;
    * an event without sources (``replay_prepared``) needs no tracking: one spare event
      is re-recorded by every such replay. That is safe because every consumer needs
      only the latest record: ``cudaStreamWaitEvent`` binds to the record current when
      it is enqueued, and a later record of a chained event completes later. Every
      ``_IDLE_SWEEP``-th of them sweeps too (one query), so the sources of the last
      ``replay()`` calls are not held for the program's lifetime when only prepared
      replays follow.
    """

    __slots__ = ("_busy", "_cupy", "_device_index", "_free", "_idle", "_spare", "_sweep_at", "last")

    def __init__(self, cupy: Any, device_index: int) -> None:
        self._cupy = cupy
        self._device_index = device_index
        self._busy: collections.deque[tuple[Any, object]] = collections.deque()
        self._sweep_at = _MIN_SWEEP
        self._idle = 0  # replays without sources since the last sweep
        with cupy.cuda.Device(device_index):
            self._free = [cupy.cuda.Event(block=False, disable_timing=True) for _ in range(_MIN_SWEEP)]
            self._spare = cupy.cuda.Event(block=False, disable_timing=True)
        self.last: Any = None  # the newest recorded event

    def record(self, stream: Any, sources: object) -> Any:
        """Record a replay-complete event on ``stream``; ``sources`` live until it completes."""
        if sources is None:
            event = self._spare
            if self._busy:
                self._idle += 1
                if self._idle >= _IDLE_SWEEP:
                    self._sweep()
        else:
            busy = self._busy
            if len(busy) >= self._sweep_at:
                self._sweep()
            if self._free:
                event = self._free.pop()
            else:
                with self._cupy.cuda.Device(self._device_index):
                    event = self._cupy.cuda.Event(block=False, disable_timing=True)
            busy.append((event, sources))
        event.record(stream)
        self.last = event
        return event

    def _sweep(self) -> None:
        self._idle = 0
        busy = self._busy
        if busy[-1][0].done:  # the newest completed, so all did (the chain)
            self._free.extend(event for event, _ in busy)
            busy.clear()
        else:
            while busy and busy[0][0].done:
                self._free.append(busy.popleft()[0])
        self._sweep_at = max(_MIN_SWEEP, 2 * len(busy))

    def drain(self) -> None:
        """Block until the newest replay completed (so all of them did); never raises."""
        try:
            if self.last is not None:
                self.last.synchronize()
        except Exception:  # pragma: no cover - finalizers must not raise
            pass

    def release_all(self) -> None:
        self._busy.clear()
        self._free.clear()
        self.last = None

    @property
    def busy_count(self) -> int:
        """Events whose sources are still held (for tests)."""
        return len(self._busy)
