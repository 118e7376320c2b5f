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

__all__ = ["install_numpy_cupy"]


class _Device:
    id = 0
    compute_capability = "90"  # an H100/H200: the backend picks its sm_80+ kernels

    def __init__(self, *args: Any) -> None:
        pass

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def install_numpy_cupy(monkeypatch: Any, kernels_for: Callable[[kernels.KernelOptions], Callable[[str], Any]]) -> type:
    """Patch ``fhelium_cupy.runtime.kernels`` (undone by ``monkeypatch``) so that a
    ``CupyBackend`` runs on NumPy arrays and launches ``kernels_for(options)(name)``;
    returns the ``CupyBackend`` class."""
    fake_cupy = types.SimpleNamespace(
        asarray=np.asarray, empty=np.empty, empty_like=np.empty_like, ascontiguousarray=np.ascontiguousarray,
        broadcast_to=np.broadcast_to, array=np.array, asnumpy=np.asarray, cuda=types.SimpleNamespace(Device=_Device),
        zeros=np.zeros, swapaxes=np.swapaxes,
    )

    def library_for(device: Any = None, options: kernels.KernelOptions | None = None) -> Any:
        options = options or kernels.KernelOptions()
        return types.SimpleNamespace(function=kernels_for(options), options=options)

    monkeypatch.setattr(kernels, "require_cuda", lambda: fake_cupy)
    monkeypatch.setattr(kernels.KernelLibrary, "for_device",
                        classmethod(lambda cls, device=None, options=None: library_for(device, options)))
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend

    return CupyBackend
