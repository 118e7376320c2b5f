"""Generic CuPy workloads for CUDA Graph tests: element-wise, RawKernel, values, nested trees.

Every function allocates its outputs inside the call (so capture exercises the arena)
and has a NumPy oracle computing the same result on the host.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from tests.helpers.gpu_spin import spin
from tests.helpers.toy_values import ToyValue

__all__ = [
    "affine",
    "affine_np",
    "axpy_kernel",
    "long_affine",
    "rawkernel_axpy",
    "rawkernel_axpy_np",
    "scale_value",
    "tree_function",
    "tree_function_np",
]

_AXPY = r"""
extern "C" __global__ void axpy_f32(const float* x, const float* y, float a, float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);  // no FMA contraction: bit-exact with NumPy float32
    }
}
"""
_KERNELS: dict[int, Any] = {}


def axpy_kernel() -> Any:
    import cupy

    device = cupy.cuda.runtime.getDevice()
    if device not in _KERNELS:
        _KERNELS[device] = cupy.RawKernel(_AXPY, "axpy_f32")
    return _KERNELS[device]


def affine(x: Any) -> Any:
    """``2 x + 1`` with a temporary in between (element-wise CuPy kernels)."""
    tmp = x * 2
    return tmp + 1


def affine_np(x: np.ndarray) -> np.ndarray:
    return x * 2 + 1


def random_tile(rng: Any, shape: tuple[int, ...] = (4, 1024)) -> Any:
    """A float32 host tile of standard-normal values (the runtime GPU tests' inputs)."""
    return rng.standard_normal(shape).astype(np.float32)


def long_affine(cycles: int):
    """``affine`` preceded by a spin of ``cycles`` clocks on the same stream (reads input late)."""

    def run(x: Any) -> Any:
        spin(cycles)
        return affine(x)

    run.__qualname__ = "long_affine"
    return run


def scratch_spin_affine(cycles: int):
    """``affine`` whose scratch temporary ``x * 2`` stays live across a spin of ``cycles`` clocks:
    two pool members running at once on shared scratch would overwrite each other's
    temporary during the spin (``long_affine`` spins before its scratch is written)."""

    def run(x: Any) -> Any:
        doubled = x * 2
        spin(cycles)
        return doubled + 1

    run.__qualname__ = "scratch_spin_affine"
    return run


def rawkernel_axpy(x: Any, y: Any) -> Any:
    """``3 x + y`` through a RawKernel, plus an element-wise follow-up: ``(3 x + y) - 0.5``."""
    import cupy

    out = cupy.empty_like(x)
    n = x.size
    axpy_kernel()(((n + 127) // 128,), (128,), (x, y, np.float32(3.0), out, np.int64(n)))
    return out - np.float32(0.5)


def rawkernel_axpy_np(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (np.float32(3.0) * x + y) - np.float32(0.5)


def scale_value(value: ToyValue) -> ToyValue:
    """A value in, a value out: data tripled, level raised (metadata changes are fine)."""
    return replace(value, data=value.data * 3, level=value.level + 1)


def tree_function(inputs: dict, items: list) -> dict:
    """Nested tree in, nested tree (with ``None`` and a value) out."""
    a, b = inputs["a"], inputs["b"]
    return {
        "sum": a + b,
        "pair": (a * 2, None),
        "value": replace(items[0], data=items[0].data + 1),
    }


def tree_function_np(inputs: dict, items: list) -> dict:
    a, b = inputs["a"], inputs["b"]
    return {"sum": a + b, "pair": (a * 2, None), "value": items[0].data + 1}
