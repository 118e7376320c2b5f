"""Backends of the CKKS engine: the exact NumPy reference and our CUDA kernels through CuPy.

``base`` holds the contract both implement bit for bit; ``numpy_backend`` needs only
NumPy; ``cupy_backend`` imports CuPy and is loaded lazily by ``CkksEngine(device="cuda")``.
"""

from __future__ import annotations

from .base import CkksBackend, Domain, RingContext

__all__ = ["CkksBackend", "Domain", "RingContext"]
