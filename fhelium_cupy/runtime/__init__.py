"""CUDA execution mechanics: signatures, reusable buffers, copy handles, graph capture and replay.

Nothing in this package knows about CKKS; values take part through
:mod:`fhelium_cupy.values`.
"""

from __future__ import annotations

from .buffer import CopyHandle, ReusableValueBuffer, pin_value_tree, value_tree_nbytes
from .cuda_graph import CudaGraphCaptureStats, CudaGraphProgram
from .memory import MemorySnapshot, memory_snapshot
from .pool import CudaGraphPool
from .signature import TensorSignature, TreeKind, ValueSignature, ValueTreeSignature

__all__ = [
    "CopyHandle",
    "CudaGraphCaptureStats",
    "CudaGraphPool",
    "CudaGraphProgram",
    "MemorySnapshot",
    "ReusableValueBuffer",
    "TensorSignature",
    "TreeKind",
    "ValueSignature",
    "ValueTreeSignature",
    "memory_snapshot",
    "pin_value_tree",
    "value_tree_nbytes",
]
