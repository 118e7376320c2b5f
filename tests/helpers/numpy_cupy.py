"""``CupyBackend`` on NumPy arrays, with kernels supplied by the test (no GPU).

The backend's host code runs unchanged: its tables, launch groups and launch arguments.
NumPy stands in for CuPy (arrays, ``empty``, ``ascontiguousarray``...), and every
``RawKernel`` is replaced by what ``kernels_for(options)`` returns for its name: a checker
of the C signature (``tests/kernels/test_launch_arguments.py``) or a Python emulation of the
kernel (``tests/kernels/test_launch_emulation.py``).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from fhelium_cupy.runtime import kernels

__all__ = ["MAIN_STREAM", "install_numpy_cupy"]


class _Device:
    id = 0
    compute_capability = "90"  # an H100/H200: the backend picks its sm_80+ kernels
    attributes = {"MaxSharedMemoryPerBlockOptin": 227 * 1024}  # an H100/H200's (the rest: the backend's defaults)

    def __init__(self, *args: Any) -> None:
        pass

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    synchronized = 0  # device synchronizes (class-wide: every _Device() is the one device)

    def synchronize(self) -> None:
        _Device.synchronized += 1


class _Stream:
    """A stream of the emulation: kernels run at launch, in host order (a valid order of any
    fork and join). It records what the backend does with it, for tests of the branches."""

    current: list[_Stream] = []  # the stack of `with stream` blocks (empty: the main stream)
    capturing = False  # what is_capturing() answers (a test sets it on a stream to act as a capture)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.waited: list[_Event] = []
        self.entered = 0
        self.synchronized = 0

    def __enter__(self) -> _Stream:
        _Stream.current.append(self)
        self.entered += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        assert _Stream.current.pop() is self

    def wait_event(self, event: _Event) -> None:
        assert event.recorded_on is not None, "a stream waits only on an event recorded before"
        self.waited.append(event)

    def is_capturing(self) -> bool:
        return self.capturing

    def synchronize(self) -> None:
        self.synchronized += 1


class _Event:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.recorded_on: _Stream | None = None

    def record(self, stream: _Stream | None = None) -> None:
        self.recorded_on = stream if stream is not None else _current_stream()


MAIN_STREAM = _Stream()


def _current_stream() -> _Stream:
    return _Stream.current[-1] if _Stream.current else MAIN_STREAM


def install_numpy_cupy(monkeypatch: Any, kernels_for: Callable[[kernels.KernelOptions], Callable[[str], Any]]) -> type:
    """Patch ``fhelium_cupy.runtime.kernels`` (undone by ``monkeypatch``) so that a
    ``CupyBackend`` runs on NumPy arrays and launches ``kernels_for(options)(name)``;
    returns the ``CupyBackend`` class."""
    fake_cupy = types.SimpleNamespace(
        asarray=np.asarray, empty=np.empty, empty_like=np.empty_like, ascontiguousarray=np.ascontiguousarray,
        broadcast_to=np.broadcast_to, array=np.array, asnumpy=np.asarray,
        cuda=types.SimpleNamespace(Device=_Device, Stream=_Stream, Event=_Event, get_current_stream=_current_stream),
        zeros=np.zeros, swapaxes=np.swapaxes, abs=np.abs, where=np.where,
    )

    def library_for(device: Any = None, options: kernels.KernelOptions | None = None) -> Any:
        options = options or kernels.KernelOptions()
        return types.SimpleNamespace(function=kernels_for(options), options=options)

    monkeypatch.setattr(kernels, "require_cuda", lambda: fake_cupy)
    monkeypatch.setattr(kernels.KernelLibrary, "for_device",
                        classmethod(lambda cls, device=None, options=None: library_for(device, options)))
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend

    return CupyBackend
