"""Default streams are per device and, for the per-thread default stream, per host thread.

Two bugs a runtime audit found (session 25), each reproduced on H200s before the fix:

* The handles of the default streams (0, 1, 2) name the *current* device's stream. A program
  on cuda:1 used from a thread whose current device is 0 enqueued its input copies, their
  waits and its copy event on device 0 (``copy_inputs_from`` raised after the data had
  landed, with no handle tracking it).
* ``cudaStreamPerThread`` (handle 2) is one handle for a different stream in every host
  thread, so "same handle as the last replay, no wait needed" let two threads' replays of
  one program (or of two members of one pool) run at once.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram
from fhelium_cupy.runtime.buffer import ReusableValueBuffer
from tests.helpers.gpu_spin import cycles_for_ms
from tests.helpers.graph_workloads import affine, affine_np, long_affine, scratch_spin_affine

pytestmark = pytest.mark.gpu

N = 4096


def _in_thread(fn):
    """``fn()`` in a new host thread whose current stream is its per-thread default stream."""
    import cupy

    result = {}

    def run():
        with cupy.cuda.Stream.ptds:
            result["value"] = fn()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result["value"]


def _replay_in_two_threads(cp, first, second):
    """``first`` then ``second`` (programs) replayed with owned outputs, each from a thread of
    its own on its per-thread default stream; both outputs must be their own input's result."""
    xa, xb = np.full(N, 3, np.float32), np.full(N, 5, np.float32)
    out_a = _in_thread(lambda: first.replay(xa, copy_output=True))
    out_b = _in_thread(lambda: second.replay(xb, copy_output=True))
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(cp.asnumpy(out_a), affine_np(xa))
    np.testing.assert_array_equal(cp.asnumpy(out_b), affine_np(xb))


def test_two_threads_replaying_on_their_per_thread_default_streams_are_ordered(cp):
    """Thread A's replay spins 300 ms before it reads its input; thread B's replay comes
    after A returned. Ordered, A's owned output is A's input's result; unordered, B's input
    copy overwrote A's input during the spin."""
    program = CudaGraphProgram.capture(long_affine(cycles_for_ms(300)), example_inputs=(cp.zeros(N, cp.float32),))
    _replay_in_two_threads(cp, program, program)
    program.close()


def test_pool_members_replayed_from_two_threads_on_per_thread_default_streams_share_scratch_in_turn(cp):
    """Each member's scratch temporary lives across a 300 ms spin: run at once (the chain's
    wait skipped for "the same" handle 2), the second overwrites the first's temporary."""
    cycles = cycles_for_ms(300)
    with CudaGraphPool(0) as pool:
        a = CudaGraphProgram.capture(scratch_spin_affine(cycles), example_inputs=(cp.zeros(N, cp.float32),), pool=pool)
        b = CudaGraphProgram.capture(scratch_spin_affine(cycles), example_inputs=(cp.zeros(N, cp.float32),), pool=pool)
        _replay_in_two_threads(cp, a, b)


def test_a_program_on_the_second_gpu_copies_and_waits_there_whatever_the_current_device(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    with cp.cuda.Device(1):
        example = cp.zeros(N, cp.float32)
        program = CudaGraphProgram.capture(affine, example_inputs=(example,))
    assert cp.cuda.runtime.getDevice() == 0
    x = np.full(N, 3, np.float32)
    handle = program.copy_inputs_from(x)  # raised cudaErrorInvalidResourceHandle before the fix
    out = program.replay_prepared(copy_handle=handle, synchronize=True)
    np.testing.assert_array_equal(cp.asnumpy(out), affine_np(x))
    y = np.full(N, 5, np.float32)
    handle = program.copy_inputs_from(y)
    handle.wait_on()  # cuda:1's current stream waits, not device 0's
    with cp.cuda.Device(1):
        out = program.replay_prepared(copy_handle=handle)
        cp.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), affine_np(y))
    program.close()
    buffer = ReusableValueBuffer.like(example)  # from device 0, for a cuda:1 example
    buffer.copy_from(np.ones(N, np.float32)).synchronize()
    np.testing.assert_array_equal(cp.asnumpy(buffer.value), np.ones(N, np.float32))
    assert buffer.value.device.id == 1
    buffer.close()
