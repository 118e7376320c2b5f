"""fhelium_cupy: FHElium's execution model and a CKKS engine on CuPy.

Exact value signatures, fixed-address reusable buffers, CUDA-event copy handles and
CUDA Graph capture/replay (``fhelium_cupy.runtime``), plus a CKKS engine with an exact
NumPy backend and our own CUDA kernels (``fhelium_cupy.ckks``). Importing this package
does no CUDA work and needs neither CuPy nor torch.
"""

from __future__ import annotations

from . import errors, values
from .errors import (
    CudaGraphCaptureError,
    CudaGraphInputError,
    CudaUnavailableError,
    ExecutionError,
    ExecutionInputError,
    FHEliumError,
)
from .interop import Device, as_device
from .runtime import (
    CopyHandle,
    CudaGraphCaptureStats,
    CudaGraphPool,
    CudaGraphProgram,
    ReusableValueBuffer,
    TensorSignature,
    ValueSignature,
    ValueTreeSignature,
    pin_value_tree,
    value_tree_nbytes,
)
from .values import register_value_type

__version__ = "0.1.0"

__all__ = [
    "CopyHandle",
    "CudaGraphCaptureError",
    "CudaGraphCaptureStats",
    "CudaGraphInputError",
    "CudaGraphPool",
    "CudaGraphProgram",
    "CudaUnavailableError",
    "Device",
    "ExecutionError",
    "ExecutionInputError",
    "FHEliumError",
    "ReusableValueBuffer",
    "TensorSignature",
    "ValueSignature",
    "ValueTreeSignature",
    "__version__",
    "as_device",
    "errors",
    "pin_value_tree",
    "register_value_type",
    "value_tree_nbytes",
    "values",
]
