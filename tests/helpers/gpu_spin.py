"""Long GPU work on demand: a RawKernel that spins on ``clock64()`` (replaces ``torch.cuda._sleep``).

Tests use it to keep a stream busy so that ordering bugs (a copy overtaking a replay,
a source released before its DMA) become visible instead of racing silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["cycles_for_ms", "spin", "spin_ms"]

_SOURCE = r"""
extern "C" __global__ void spin_clock64(long long cycles, unsigned long long* sink) {
    long long start = clock64();
    long long now = start;
    while (now - start < cycles) {
        now = clock64();
    }
    if (sink != 0 && threadIdx.x == 0) {
        sink[0] = (unsigned long long)(now - start);  // a side effect the compiler cannot drop
    }
}
"""

_KERNELS: dict[int, Any] = {}
_SINKS: dict[int, Any] = {}


def _kernel(cupy: Any) -> tuple[Any, Any]:
    device = cupy.cuda.runtime.getDevice()
    if device not in _KERNELS:
        _KERNELS[device] = cupy.RawKernel(_SOURCE, "spin_clock64")
        _SINKS[device] = cupy.zeros(1, dtype=np.uint64)
    return _KERNELS[device], _SINKS[device]


def cycles_for_ms(ms: float) -> int:
    """Clock cycles of roughly ``ms`` milliseconds on the current device (SM clock rate)."""
    import cupy

    try:
        # cudaDevAttrClockRate (kHz); kept by deviceGetAttribute in CUDA 13
        khz = int(cupy.cuda.runtime.deviceGetAttribute(13, cupy.cuda.runtime.getDevice()))
    except Exception:
        khz = 0
    if khz <= 0:
        khz = 2_000_000  # ~2 GHz, an H100/H200-class boost clock
    return int(ms * khz)


def spin(cycles: int, *, stream: Any = None) -> None:
    """Enqueue one single-thread kernel that busy-waits ``cycles`` clock cycles on ``stream``.

    ``stream`` defaults to CuPy's current stream. Capture-safe (a plain RawKernel launch).
    """
    import cupy

    kernel, sink = _kernel(cupy)
    args = (np.int64(cycles), sink)
    if stream is None:
        kernel((1,), (1,), args)
    else:
        with stream:
            kernel((1,), (1,), args)


def spin_ms(ms: float, *, stream: Any = None) -> None:
    """Busy-wait about ``ms`` milliseconds on ``stream`` (see :func:`spin`)."""
    spin(cycles_for_ms(ms), stream=stream)
