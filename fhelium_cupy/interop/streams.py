"""Streams and events from CuPy, torch or any ``__cuda_stream__`` object, as CuPy objects.

Library code never relies on a ``with stream:`` context: it resolves the caller's
stream once with :func:`resolve_stream` and passes it explicitly.

The *current stream* of a device is CuPy's current stream; when that is the default
stream and the caller has made a non-default torch stream current (``with
torch.cuda.stream(s):``), the torch stream is used, so code written for FHElium's torch
API keeps its meaning.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .capabilities import loaded_torch, require_cupy
from .devices import Device

__all__ = [
    "check_stream_context",
    "is_event_sequence",
    "current_stream_getter",
    "event_handle",
    "event_handles",
    "resolve_stream",
    "stream_device_index",
    "stream_identity",
]

CUDA_STREAM_PER_THREAD = 2
"""``cudaStreamPerThread``: one handle for a different default stream in every host thread."""


def stream_identity(ptr: int) -> object:
    """What tells the stream of handle ``ptr`` (on the current device) from another: the handle,
    except for the per-thread default stream, whose one handle is a different stream in every
    host thread: it gets a new identity at every call, equal to nothing, so work on it always
    waits by event. (Keyed by thread it would not do: a thread started after another ended
    may get its ident back, with a new stream; the H200 run of the first fix showed it.)"""
    return object() if ptr == CUDA_STREAM_PER_THREAD else ptr


class _StreamProtocolAdapter:
    """Presents a raw stream handle through the CUDA stream protocol for ``Stream.from_external``."""

    __slots__ = ("_owner", "_ptr")

    def __init__(self, ptr: int, owner: object) -> None:
        self._ptr = ptr
        self._owner = owner  # keeps the foreign stream alive while CuPy uses it

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._ptr)


def _wrap_handle(cupy: Any, ptr: int, device_index: int, owner: object = None) -> Any:
    """A CuPy view of the foreign stream handle ``ptr`` on device ``device_index``: no copy, no
    ownership; ``owner``, the foreign stream object, is kept alive by the view.
    ``Stream.from_external`` gives its view device -1 whatever device is current, so the
    caller's word on the device (checked first) is written into it."""
    stream = cupy.cuda.Stream.from_external(_StreamProtocolAdapter(ptr, owner))
    stream.device_id = device_index
    return stream


def stream_device_index(stream: Any) -> int | None:
    """CUDA device index a stream belongs to, when the object tells it."""
    for attr in ("device_id",):
        value = getattr(stream, attr, None)
        if isinstance(value, int) and value >= 0:
            return value
    dev = getattr(stream, "device", None)
    index = getattr(dev, "index", None)
    if isinstance(index, int):
        return index
    dev_id = getattr(dev, "device_id", None)
    if isinstance(dev_id, int):
        return dev_id
    return None


_EXTERNAL: dict[int, Any] = {}


def _torch_current_stream_ptr(index: int) -> int:
    """Raw handle of torch's current stream on ``index``; 0 when torch is not in play.

    Uses torch's raw-handle query (no stream object is built) when available: this runs on
    every ``replay()``, so it must cost well under a microsecond.
    """
    torch = loaded_torch()
    if torch is None or not torch.cuda.is_initialized():
        return 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(index))
    current = torch.cuda.current_stream(index)
    if current.cuda_stream == torch.cuda.default_stream(index).cuda_stream:
        return 0
    return int(current.cuda_stream)


def _external(cupy: Any, ptr: int, device_index: int) -> Any:
    """A cached CuPy view of a foreign stream handle (a handle is just a number; no ownership)."""
    stream = _EXTERNAL.get(ptr)
    if stream is None or stream.device_id != device_index:  # (a handle is unique per device only)
        if len(_EXTERNAL) > 64:
            _EXTERNAL.clear()
        stream = _wrap_handle(cupy, ptr, device_index)
        _EXTERNAL[ptr] = stream
    return stream


def _current_stream(cupy: Any, index: int) -> Any:
    current = cupy.cuda.get_current_stream(index)
    if current.ptr <= CUDA_STREAM_PER_THREAD:  # CuPy's default stream, legacy or per-thread
        foreign = _torch_current_stream_ptr(index)
        if foreign > CUDA_STREAM_PER_THREAD:  # 0/1/2: legacy or per-thread default stream, same as CuPy's
            return _external(cupy, foreign, index)
    return current


def current_stream_getter(device: Device) -> Callable[[], Any]:
    """``resolve_stream(None, device)`` with CuPy and the device bound once (for replay loops).

    Raises:
        CudaUnavailableError: CuPy or a GPU is missing (when building the getter).
    """
    cupy = require_cupy("choosing a CUDA stream")
    index = int(device.index)  # type: ignore[arg-type]
    return functools.partial(_current_stream, cupy, index)


def resolve_stream(stream: object | None, device: Device) -> Any:
    """A ``cupy.cuda.Stream`` for ``stream`` on ``device``.

    ``None`` means the caller's current stream of ``device`` (see module docstring). A
    CuPy stream of a device passes through; a torch stream (``torch.cuda.Stream``, or a
    device-generic ``torch.Stream`` on a CUDA device, as ``torch.accelerator.current_stream()``
    returns) or a ``__cuda_stream__`` object is wrapped without copying, as a
    ``cupy.cuda.Stream`` view of ``device`` that keeps the object alive. A
    ``__cuda_stream__`` object's stream, and a CuPy view of device -1 (what
    ``Stream.from_external`` makes), is checked with the driver (``check_stream_context``):
    neither tells its device.

    Raises:
        ValueError: the stream belongs to another device (for a ``__cuda_stream__`` object:
            to a context other than the device's primary one).
        TypeError: the object is not a CUDA stream (a ``torch.Stream`` of another device type
            included).
    """
    cupy = require_cupy("choosing a CUDA stream")
    if stream is None:
        return _current_stream(cupy, device.index)  # type: ignore[arg-type]
    own = False  # a CuPy stream that says its device (or a default stream): used as it is
    if isinstance(stream, (cupy.cuda.Stream, getattr(cupy.cuda, "ExternalStream", cupy.cuda.Stream))):
        own = stream.device_id >= 0 or stream.ptr <= CUDA_STREAM_PER_THREAD  # (default streams: device -1)
        ptr = int(stream.ptr)  # else a view of device -1 (Stream.from_external): the driver tells
    elif type(stream).__module__.startswith("torch") and hasattr(stream, "cuda_stream"):
        ptr = int(stream.cuda_stream)  # type: ignore[attr-defined]
    elif _is_generic_torch(stream, "native_handle"):
        _require_torch_cuda(stream, "stream")
        ptr = int(stream.native_handle)  # type: ignore[attr-defined]
    elif hasattr(stream, "__cuda_stream__"):
        ptr = _protocol_handle(stream)
    else:
        raise TypeError(
            f"{type(stream).__name__} is not a CUDA stream; pass a cupy.cuda.Stream, a torch.cuda.Stream, "
            "a torch.Stream on a CUDA device or an object with __cuda_stream__"
        )
    told = stream_device_index(stream)  # the object's own word (CuPy and torch streams give it)
    if told is not None and told != device.index:
        raise ValueError(f"stream is on the wrong device: expected={device}, actual=cuda:{told}")
    if own:
        return stream
    if told is None:  # only the driver knows: a __cuda_stream__ object, a CuPy view of device -1
        check_stream_context(cupy, ptr, device)
    return _wrap_handle(cupy, ptr, int(device.index), stream)  # type: ignore[arg-type]


def _protocol_handle(stream: object) -> int:
    """The raw handle of a ``__cuda_stream__`` object (protocol version 0: ``(0, handle)``).

    Raises:
        TypeError: the object's answer is not a ``(version, handle)`` pair of integers.
    """
    answer = stream.__cuda_stream__()  # type: ignore[attr-defined]
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(v, int) for v in answer)):
        raise TypeError(f"{type(stream).__name__}.__cuda_stream__() gave {answer!r}, not (version, handle)")
    return int(answer[1])


_CONTEXT_CHECKED: set[tuple[int, int]] = set()  # (handle, device index) pairs already checked


def check_stream_context(cupy: Any, handle: int, device: Device) -> None:
    """Check with the driver that the stream of raw handle ``handle`` belongs to ``device``'s
    primary context, the one CuPy (and so this library) launches into: a ``__cuda_stream__``
    object need not say which device its stream is on, and a stream of another device, or
    of another context of the same device, fails at the first launch or wait on it. The
    default-stream handles (0, 1, 2) name the current context's own streams. Each (handle,
    device) pair is asked once (a handle reused for a stream of another device after its
    destruction goes unnoticed, as with the other caches of foreign handles here).

    Raises:
        ValueError: the stream belongs to another device or context.
    """
    index = int(device.index)  # type: ignore[arg-type]
    if handle <= CUDA_STREAM_PER_THREAD or (handle, index) in _CONTEXT_CHECKED:
        return
    driver = cupy.cuda.driver
    with cupy.cuda.Device(index):  # makes the device's primary context current
        expected = driver.ctxGetCurrent()
        actual = driver.streamGetCtx(handle)
        if actual != expected:
            driver.ctxSetCurrent(actual)
            try:
                owner = driver.ctxGetDevice()
            finally:
                driver.ctxSetCurrent(expected)
            where = f"cuda:{owner}" if owner != index else f"another context of cuda:{owner}"
            raise ValueError(f"stream is on the wrong device: expected={device}, actual={where}")
    if len(_CONTEXT_CHECKED) > 64:
        _CONTEXT_CHECKED.clear()
    _CONTEXT_CHECKED.add((handle, index))


def _is_generic_torch(obj: object, handle_attr: str) -> bool:
    """A device-generic ``torch.Stream`` / ``torch.Event`` (what ``torch.accelerator`` returns)."""
    return type(obj).__module__.startswith("torch") and hasattr(type(obj), handle_attr) and hasattr(obj, "device")


def _require_torch_cuda(obj: Any, what: str) -> None:
    device = obj.device
    if getattr(device, "type", None) != "cuda":
        raise TypeError(f"{type(obj).__name__} on device {device} is not a CUDA {what}")


def event_handle(event: object) -> int | None:
    """Raw ``cudaEvent_t`` of a CuPy or torch event; ``None`` for a torch event never recorded.

    torch events are ``torch.cuda.Event`` or the device-generic ``torch.Event`` on a CUDA
    device (its ``event_id`` is the native handle).

    Raises:
        TypeError: for objects that are not CUDA events.
    """
    cupy = require_cupy("waiting on a CUDA event")
    if isinstance(event, cupy.cuda.Event):
        return int(event.ptr)
    if type(event).__module__.startswith("torch") and hasattr(event, "cuda_event"):
        handle = int(event.cuda_event)  # type: ignore[attr-defined]
        return handle or None
    if _is_generic_torch(event, "event_id"):
        _require_torch_cuda(event, "event")
        return int(event.event_id) or None  # type: ignore[attr-defined]
    raise TypeError(
        f"{type(event).__name__} is not a CUDA event; pass a cupy.cuda.Event, a torch.cuda.Event or a "
        "torch.Event on a CUDA device"
    )


def is_event_sequence(wait_for: object) -> bool:
    """True for any sequence of events (list, tuple, deque, ...), False for one event."""
    return isinstance(wait_for, Sequence) and not isinstance(wait_for, (str, bytes))


def event_handles(wait_for: object | Sequence[object] | None) -> tuple[int, ...]:
    """Normalize ``None``, one event, or a sequence of events to raw handles (validated first)."""
    if wait_for is None:
        return ()
    events: Any = wait_for if is_event_sequence(wait_for) else (wait_for,)
    handles = []
    for ev in events:
        handle = event_handle(ev)
        if handle is not None:
            handles.append(handle)
    return tuple(handles)
