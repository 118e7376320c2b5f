"""Lifetimes on error paths and without close(): nothing is freed under pending GPU work,
nothing is left running or unordered, and a capture leaves no memory stranded.

Each test makes the race visible with a spinning kernel (``tests.helpers.gpu_spin``).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from fhelium_cupy.errors import CudaGraphCaptureError
from fhelium_cupy.runtime import CudaGraphProgram, ReusableValueBuffer
from tests.helpers.gpu_spin import spin_ms
from tests.helpers.graph_workloads import affine

pytestmark = pytest.mark.gpu


def test_a_failed_owned_copy_still_orders_later_input_copies(cp):
    """copy_output=True runs out of memory after the graph was launched: the replay-complete
    event is recorded anyway, so the next prepared copy waits for the running replay."""

    def slow(v):
        spin_ms(300)
        return v * 2 + 1

    x1, x2 = cp.ones(4096, cp.float32), cp.full(4096, 5, cp.float32)
    program = CudaGraphProgram.capture(slow, example_inputs=(x1,), warmup=1)
    cp.cuda.Device().synchronize()

    def no_memory(size):
        raise MemoryError("injected")

    with cp.cuda.using_allocator(no_memory), pytest.raises(MemoryError):
        program.replay(x1, copy_output=True)  # the graph is already running when the copy fails
    program.copy_inputs_from(x2, stream=cp.cuda.Stream(non_blocking=True))
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(program.output), np.full(4096, 3, np.float32))  # read x1, not x2
    program.close()


class _ReleaseProbe:
    """Owns one allocation's block; when the storage is released it records whether the
    copy queued into it (``marker``: an event recorded right after that copy) had finished."""

    def __init__(self, block, log):
        self.block, self.log, self.marker = block, log, None

    def __del__(self):
        self.log.append(None if self.marker is None else bool(self.marker.done))


def test_a_dropped_buffer_keeps_its_storage_until_pending_copies_end(cp):
    """No close(): the finalizer must wait for the copy before the storage is released. The
    storage comes from an allocator that records, at release, whether the copy (held back
    500 ms behind a gate) had run: deterministic, whatever block the pool reuses."""
    n = 1 << 20
    released: list = []
    probes: list = []

    def tracking_malloc(size):
        block = cp.get_default_memory_pool().malloc(size)
        probe = _ReleaseProbe(block, released)
        probes.append(weakref.ref(probe))
        return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(block.ptr, size, probe), 0)

    example = cp.zeros(n, cp.float32)
    with cp.cuda.using_allocator(tracking_malloc):
        buffer = ReusableValueBuffer.like(example, device="cuda")
    source = cp.full(n, 5, cp.float32)
    gate, transfer = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    with gate:
        spin_ms(500)
    buffer.copy_from(source, stream=transfer, wait_for=gate.record())
    marker = transfer.record()
    assert not marker.done  # the copy is still held back by the gate
    live = [ref() for ref in probes if ref() is not None]
    assert live  # the buffer's storage came from the tracking allocator
    for probe in live:
        probe.marker = marker
    del live, probe, buffer  # no close()
    gc.collect()
    watched = [done for done in released if done is not None]  # blocks live when the copy was queued
    assert watched and all(watched), released  # released only after the copy had finished
    cp.cuda.Device().synchronize()


def test_a_warmup_failure_leaves_no_work_running(cp):
    x = cp.ones(4096, cp.float32)
    sink = cp.zeros_like(x)

    def fails_late(v):
        spin_ms(300)
        sink[...] = v  # enqueued behind the spin
        raise ValueError("a check failed after launching kernels")

    with pytest.raises(CudaGraphCaptureError):
        CudaGraphProgram.capture(fails_late, example_inputs=(x,), warmup=1)
    sink.fill(7)  # the caller's stream: must not be overtaken by the failed warmup's write
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(sink), np.full(4096, 7, np.float32))


def test_a_capture_strands_no_warmup_memory(cp):
    pool = cp.get_default_memory_pool()
    x = cp.ones(1 << 20, cp.float32)
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    before = pool.total_bytes()
    program = CudaGraphProgram.capture(affine, example_inputs=(x,), warmup=3)
    program.close()
    del program
    gc.collect()
    # the program's own input buffer came from the pool and went back to it on close;
    # three warmups' fresh inputs and temporaries (about 8 MiB here) must not stay reserved
    assert pool.total_bytes() - before <= 2 * x.nbytes
