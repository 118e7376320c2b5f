"""A fake CuPy for running the replay host path without a GPU.

It stands in for exactly what ``CudaGraphProgram.replay`` and ``ReusableValueBuffer``
touch: ``cupy.ndarray`` (shape, strides, dtype, ``data.ptr``, device), ``cupy.cuda.alloc``,
streams, events, ``Device`` and a handful of runtime calls. Runtime calls do nothing but
can be logged, so tests can assert what a replay enqueued (and that a rejected input
enqueued nothing). The "device" finishes work only when something synchronizes: an
event recorded since the last synchronization is not ``done``, as on a busy GPU.

Use :func:`install` (with ``monkeypatch.setattr`` in tests) before building programs;
:func:`build_program` assembles a :class:`CudaGraphProgram` around a fake graph the way
``capture`` would, without capturing anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["FakeArray", "FakeCupy", "build_program", "install"]


class _Memory:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.device_id = 0

    def __add__(self, offset: int) -> _Memory:
        return _Memory(self.ptr + int(offset))


class _DeviceId:
    __slots__ = ("id",)

    def __init__(self, index: int) -> None:
        self.id = index


class FakeArray:
    """A device array: topology and an address, no payload."""

    __slots__ = ("data", "device", "dtype", "ndim", "shape", "size", "strides")

    _addresses = itertools.count(1 << 32, 1 << 24)

    def __init__(self, shape: tuple[int, ...], dtype: Any, memptr: _Memory | None = None, strides: tuple[int, ...] | None = None) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        if strides is None:
            strides = tuple(s * self.dtype.itemsize for s in _contiguous(self.shape))
        self.strides = tuple(int(s) for s in strides)
        self.data = memptr if memptr is not None else _Memory(next(self._addresses))
        self.device = _DeviceId(0)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


FakeArray.__module__ = "cupy._core.core"  # what fhelium_cupy.interop.arrays.leaf_kind looks at


def _contiguous(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return out[::-1]


class FakeCupy:
    """The fake module: ``cupy.ndarray``, ``cupy.cuda`` and a call log."""

    def __init__(self, *, current_stream_ptr: int = 0) -> None:
        self.log: list[tuple[Any, ...]] | None = None  # set to a list to record runtime calls
        self.recorded = 0  # sequence number of the newest enqueued event record
        self.completed = 0  # every record up to this one has finished on the "device"
        self.sticky: Exception | None = None  # set: every synchronize raises it (a sticky CUDA error)
        fake = self
        handles = itertools.count(0x1000)

        def note(*call: Any) -> None:
            if fake.log is not None:
                fake.log.append(call)

        class Stream:
            def __init__(self, ptr: int | None = None, non_blocking: bool = False) -> None:
                self.ptr = next(handles) if ptr is None else ptr
                self.device_id = 0

            def synchronize(self) -> None:
                note("streamSynchronize", self.ptr)
                if fake.sticky is not None:
                    raise fake.sticky
                fake.completed = fake.recorded

            def __enter__(self) -> Stream:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

        class Event:
            def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
                self.ptr = next(handles)
                self._seq = 0
                note("eventCreate", self.ptr)

            def record(self, stream: Any = None) -> None:
                fake.recorded += 1
                self._seq = fake.recorded
                note("eventRecord", self.ptr, getattr(stream, "ptr", 0))

            @property
            def done(self) -> bool:
                note("eventQuery", self.ptr)
                return self._seq <= fake.completed

            def synchronize(self) -> None:
                note("eventSynchronize", self.ptr)
                if fake.sticky is not None:
                    raise fake.sticky
                fake.completed = max(fake.completed, self._seq)

        class Device:
            def __init__(self, index: int = 0) -> None:
                self.id = index

            def __enter__(self) -> Device:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

        class Runtime:
            @staticmethod
            def getDevice() -> int:  # noqa: N802 - CUDA name
                note("getDevice")
                return 0

            @staticmethod
            def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:  # noqa: N802
                note("memcpyAsync", dst, src, size, kind, stream)

            @staticmethod
            def streamWaitEvent(stream: int, event: int, flags: int) -> None:  # noqa: N802
                note("streamWaitEvent", stream, event)

            @staticmethod
            def graphLaunch(exec_handle: int, stream: int) -> None:  # noqa: N802
                note("graphLaunch", stream, exec_handle)  # (a captured graph's launch logs no handle)

            @staticmethod
            def deviceSynchronize() -> None:  # noqa: N802
                note("deviceSynchronize")
                fake.completed = fake.recorded

            @staticmethod
            def memcpy(dst: int, src: int, size: int, kind: int) -> None:
                note("memcpy", dst, src, size, kind)

        current = Stream(current_stream_ptr)

        def get_current_stream(device_id: int | None = None) -> Any:
            return current

        def alloc(nbytes: int) -> _Memory:
            return _Memory(next(FakeArray._addresses))

        self.current_stream = current
        self.ndarray = FakeArray
        self.cuda = SimpleNamespace(
            runtime=Runtime,
            Stream=Stream,
            Event=Event,
            Device=Device,
            get_current_stream=get_current_stream,
            alloc=alloc,
            is_available=lambda: True,
        )

    def calls(self, fn: Callable[[], Any]) -> list[tuple[Any, ...]]:
        """Run ``fn`` and return the runtime calls it made."""
        self.log = []
        try:
            fn()
            return self.log
        finally:
            self.log = None


class FakeGraph:
    """A captured graph: ``launch`` logs ``graphLaunch``; ``graph`` is a handle for the
    input-copy nodes (``tests.helpers.fake_driver``), 0 (none) unless given."""

    def __init__(self, fake: FakeCupy, handle: int = 0) -> None:
        self._fake = fake
        self.graph = handle

    def launch(self, stream: Any = None) -> None:
        if self._fake.log is not None:
            self._fake.log.append(("graphLaunch", getattr(stream, "ptr", 0)))


def install(patch: Callable[[object, str, object], None] = setattr, **options: Any) -> FakeCupy:
    """Route every ``cupy`` lookup of fhelium_cupy to a new :class:`FakeCupy`.

    ``patch`` is ``setattr`` for scripts and ``monkeypatch.setattr`` in tests (which then
    undoes it).
    """
    from fhelium_cupy.interop import arrays, capabilities
    from fhelium_cupy.runtime import buffer

    fake = FakeCupy(**options)
    patch(capabilities, "cupy_or_none", lambda: fake)
    patch(capabilities, "cuda_unavailable_reason", lambda: None)
    patch(arrays, "cupy_or_none", lambda: fake)
    patch(buffer, "cupy_or_none", lambda: fake)
    return fake


def build_program(fake: FakeCupy, function: Callable[..., Any], example_inputs: tuple[Any, ...], *,
                  graph_handle: int = 0, **options: Any) -> Any:
    """A :class:`CudaGraphProgram` whose "graph" is ``function``'s output on ``example_inputs``.

    The input buffer and output plan are built exactly as capture builds them; only the
    graph is fake (launching it does nothing), so outputs keep the example run's arrays.
    """
    from fhelium_cupy.interop import Device
    from fhelium_cupy.runtime import CudaGraphCaptureStats, CudaGraphProgram, ReusableValueBuffer
    from fhelium_cupy.runtime._output import OutputPlan

    device = Device("cuda", 0)
    buffer = ReusableValueBuffer.like(tuple(example_inputs), device=device)
    output = OutputPlan.from_output(function(*buffer.value), device)
    stats = CudaGraphCaptureStats(0, 0.0, 0.0, 0.0, 0, 0)
    return CudaGraphProgram(
        function=function,
        device=device,
        graph=FakeGraph(fake, graph_handle),
        input_buffer=buffer,
        static_inputs=(),
        output=output,
        stats=stats,
        **options,
    )
