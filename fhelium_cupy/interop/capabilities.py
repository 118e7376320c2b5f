"""Optional-dependency probes: is CuPy importable, is a GPU there, is torch loaded.

Nothing here imports torch: a torch tensor can only exist once the caller imported
torch, so ``loaded_torch()`` looks in ``sys.modules``. CuPy is imported lazily and the
result cached.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType

from ..errors import CudaUnavailableError

__all__ = [
    "cuda_unavailable_reason",
    "cupy_or_none",
    "loaded_torch",
    "require_cupy",
]

_CUPY_INSTALL_HINT = 'install CuPy with `pip install "fhelium-cupy[cuda12]"` or `"fhelium-cupy[cuda13]"`'


@functools.cache
def cupy_or_none() -> ModuleType | None:
    """The ``cupy`` module, or ``None`` when it cannot be imported."""
    try:
        import cupy
    except Exception:  # ImportError, or a broken CUDA install raising at import
        return None
    return cupy


@functools.cache
def cuda_unavailable_reason() -> str | None:
    """``None`` when CuPy imports and sees a CUDA device; otherwise why not, in words."""
    cupy = cupy_or_none()
    if cupy is None:
        return f"CuPy is not installed ({_CUPY_INSTALL_HINT})"
    try:
        available = bool(cupy.cuda.is_available())
    except Exception as error:  # pragma: no cover - is_available() never raises in CuPy 14
        return f"CuPy cannot query CUDA: {error}"
    if not available:
        return "CuPy is installed but no CUDA device or driver is available"
    return None


def require_cupy(what: str) -> ModuleType:
    """Return ``cupy`` or raise ``CudaUnavailableError`` saying what needed it."""
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise CudaUnavailableError(f"{what} needs a CUDA GPU: {reason}")
    cupy = cupy_or_none()
    assert cupy is not None
    return cupy


def loaded_torch() -> ModuleType | None:
    """``torch`` if the process already imported it, else ``None`` (never imports it)."""
    return sys.modules.get("torch")
