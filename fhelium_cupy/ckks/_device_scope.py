"""Engine and key-generator methods run with their backend's CUDA device current.

CuPy allocates and launches on the *calling thread's* current device. An engine on
``cuda:1`` used from a thread whose current device is 0 (every new thread starts on 0)
allocated its outputs on device 0 and ran its kernels there on device-1 inputs, through
peer access CuPy turned on by itself (its PerformanceWarning; measured on two H200s,
``bench/results/2026-11-29-s9/x2_final/variant_no_device_scope.log``). Every public method of the decorated classes therefore switches to the
backend's device when it is not current (one ``cudaGetDevice`` otherwise); NumPy
backends are left alone.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["on_backend_device"]

_C = TypeVar("_C", bound=type)


def _backend_device(backend: Any) -> tuple[Any, int] | None:
    """``(cupy, device index)`` of a CUDA backend; ``None`` for a NumPy backend."""
    index = getattr(backend, "device_id", None)
    if index is None:
        return None
    return backend.xp, index


def _scoped(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = _backend_device(self.backend)
        if target is None:
            return function(self, *args, **kwargs)
        cupy, index = target
        if cupy.cuda.runtime.getDevice() == index:
            return function(self, *args, **kwargs)
        with cupy.cuda.Device(index):
            return function(self, *args, **kwargs)

    return run


def on_backend_device(*properties: str) -> Callable[[_C], _C]:
    """Class decorator: every public method (inherited ones included) and the named
    properties run on ``self.backend``'s CUDA device."""

    def decorate(cls: _C) -> _C:
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_") and not isinstance(inspect.getattr_static(cls, name), staticmethod):
                setattr(cls, name, _scoped(member))
        for name in properties:
            prop = inspect.getattr_static(cls, name)
            assert isinstance(prop, property) and prop.fget is not None, name
            setattr(cls, name, property(_scoped(prop.fget), prop.fset, prop.fdel, prop.__doc__))
        return cls

    return decorate
