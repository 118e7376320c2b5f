"""The receipt of one payload copy: a CUDA event plus the sources it keeps alive.

``ReusableValueBuffer.copy_from`` and ``CudaGraphProgram.copy_inputs_from`` return a
:class:`CopyHandle`; consumers order work after it with ``wait_on(stream)`` (no host
block) or ``synchronize()`` (host block), and ``query()`` polls it.
"""

from __future__ import annotations

from typing import Any

from ..interop.capabilities import require_cupy
from ..interop.devices import Device
from ..interop.streams import resolve_stream

__all__ = ["CopyHandle"]


class CopyHandle:
    """Receipt of one payload copy into a :class:`ReusableValueBuffer`.

    Ownership: until the copy is observed complete (``query()``/``done()`` returning
    True, ``synchronize()``, or the owning buffer closing), the handle holds strong
    references to every submitted source array, so a pinned source cannot be freed or
    reused while DMA may still read it.

    Stream: ``event`` is recorded on the copy stream after the last byte was enqueued.
    CPU-target copies are synchronous and carry no event. Direct construction is not
    public; handles come from ``ReusableValueBuffer.copy_from`` and
    ``CudaGraphProgram.copy_inputs_from``.
    """

    __slots__ = ("_bytes_copied", "_device", "_event", "_sources", "_stream", "_token", "__weakref__")

    def __init__(self, *, event: Any, device: Device, sources: tuple[Any, ...], bytes_copied: int, token: object,
                 stream: object = None) -> None:
        self._event = event
        self._stream = stream  # interop.streams.stream_identity of the copy stream (None: CPU target)
        self._device = device
        self._sources: tuple[Any, ...] | None = sources if event is not None else None
        self._bytes_copied = int(bytes_copied)
        self._token = token

    @property
    def event(self) -> Any:
        """The ``cupy.cuda.Event`` recorded after the copy, or ``None`` for a CPU target."""
        return self._event

    @property
    def device(self) -> Device:
        """Target device of the copy."""
        return self._device

    @property
    def bytes_copied(self) -> int:
        """Logical payload bytes of the whole buffer."""
        return self._bytes_copied

    def query(self) -> bool:
        """True when the copy has completed (never blocks); releases the sources then."""
        if self._event is None or self._sources is None:
            return True
        if self._event.done:
            self._sources = None
            return True
        return False

    done = query

    @property
    def holds_sources(self) -> bool:
        """Whether the submitted sources are still retained (the copy may be in flight)."""
        return self._sources is not None

    def wait_on(self, stream: object | None = None) -> CopyHandle:
        """Make ``stream`` (default: the caller's current stream) wait for the copy; no host block.

        A CPU-target copy completed synchronously and has no event: ``stream`` is then
        ignored and nothing is enqueued.

        Raises:
            ValueError: ``stream`` belongs to another device than the copy's target.
            TypeError: ``stream`` is not a CUDA stream.
        """
        if self._event is None:
            return self
        target = resolve_stream(stream, self._device)
        with require_cupy("CopyHandle.wait_on").cuda.Device(self._device.index):  # a default stream's handle is per device
            target.wait_event(self._event)
        return self

    def synchronize(self) -> None:
        """Block the host until the copy completed, then release the sources."""
        if self._event is not None:
            self._event.synchronize()
        self._sources = None

    def _belongs_to(self, token: object) -> bool:
        return self._token is token

    def __repr__(self) -> str:
        state = "cpu" if self._event is None else ("pending" if self._sources is not None else "complete")
        return f"<CopyHandle device={self._device} bytes={self._bytes_copied} {state}>"
