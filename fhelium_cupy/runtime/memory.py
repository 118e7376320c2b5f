"""Device memory snapshots: driver-level free/total, CuPy's default pool and the graph arenas."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..interop.capabilities import require_cupy
from ..interop.devices import Device, as_device
from .arena import live_arena_bytes

__all__ = ["MemorySnapshot", "memory_snapshot"]


@dataclass(frozen=True)
class MemorySnapshot:
    """Device memory at one moment.

    Attributes:
        device: the CUDA device observed.
        observed_at_ns: ``time.monotonic_ns()`` when observed (monotonic, unlike FHElium's
            wall-clock stamp, bug 7.18).
        capacity_bytes: total device memory (``cudaMemGetInfo``).
        available_bytes: free device memory as the driver sees it.
        pool_used_bytes: bytes in use from CuPy's default memory pool on this device.
        pool_reserved_bytes: bytes CuPy's default pool holds (used plus cached free blocks).
        arena_used_bytes: bytes of graph-private memory (every open program arena and pool
            scratch on this device) viewed by live arrays.
        arena_reserved_bytes: bytes those arenas hold.

    The process's allocator view is the pool plus the arenas (``allocated_bytes``,
    ``reserved_bytes``): what ``CudaGraphCaptureStats`` reports after a capture.
    """

    device: Device
    observed_at_ns: int
    capacity_bytes: int
    available_bytes: int
    pool_used_bytes: int
    pool_reserved_bytes: int
    arena_used_bytes: int = 0
    arena_reserved_bytes: int = 0

    @property
    def allocated_bytes(self) -> int:
        """Bytes live in the process's allocators on this device (CuPy pool + graph arenas)."""
        return self.pool_used_bytes + self.arena_used_bytes

    @property
    def reserved_bytes(self) -> int:
        """Bytes the process's allocators hold on this device (CuPy pool + graph arenas)."""
        return self.pool_reserved_bytes + self.arena_reserved_bytes


def memory_snapshot(device: object = "cuda") -> MemorySnapshot:
    """Observe ``device``'s memory now (host-only queries; does not synchronize).

    Raises:
        ValueError: ``device`` is not a CUDA device.
        CudaUnavailableError: CuPy or a GPU is missing.
    """
    resolved = as_device(device)
    if resolved.type != "cuda":
        raise ValueError(f"memory_snapshot needs a CUDA device, got {resolved}")
    cupy = require_cupy("a device memory snapshot")
    with cupy.cuda.Device(resolved.index):
        free, total = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        used, reserved = pool.used_bytes(), pool.total_bytes()
    arena_used, arena_reserved = live_arena_bytes(resolved)
    return MemorySnapshot(
        device=resolved,
        observed_at_ns=time.monotonic_ns(),
        capacity_bytes=int(total),
        available_bytes=int(free),
        pool_used_bytes=int(used),
        pool_reserved_bytes=int(reserved),
        arena_used_bytes=int(arena_used),
        arena_reserved_bytes=int(arena_reserved),
    )
