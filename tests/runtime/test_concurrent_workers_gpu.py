"""Concurrent workers with separate pools (api-reference: "Concurrent workers use separate pools").

Worker A is held inside its capture (its stream is capturing) while worker B, on another
host thread, captures, replays or closes its own program. Nothing B does through the
runtime may invalidate A's capture or fail because A is capturing: B's warmup, first
replay and close wait on their own streams and events, never on the whole device.
(``replay(synchronize=True)`` is the spec's device-wide wait and is not exercised here.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram
from tests.helpers.graph_workloads import affine, affine_np, random_tile

pytestmark = pytest.mark.gpu

_TIMEOUT_S = 60.0


def _held_affine(capturing: threading.Event, release: threading.Event) -> Callable[[Any], Any]:
    """``affine`` that, while its stream is capturing, signals and waits before its second half."""
    import cupy

    def run(x: Any) -> Any:
        tmp = x * 2
        if cupy.cuda.get_current_stream().is_capturing():
            capturing.set()
            if not release.wait(_TIMEOUT_S):
                raise TimeoutError("worker B never finished")
        return tmp + 1

    run.__qualname__ = "held_affine"
    return run


def _worker_b_capture(cp: Any, n: int) -> Any:
    with CudaGraphPool(0) as pool:
        program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=2)
        return _worker_b_replay(cp, n, program, seed=11)


def _worker_b_replay(cp: Any, n: int, program: Any, seed: int = 12) -> Any:
    """One owned replay on the current stream: (what came back, what it should be)."""
    host = random_tile(np.random.default_rng(seed), n)
    out = program.replay(host, copy_output=True)
    stream = cp.cuda.get_current_stream()
    stream.synchronize()
    return cp.asnumpy(out, stream=stream), affine_np(host)


@pytest.mark.parametrize("action", ["capture", "replay", "close"])
def test_a_worker_capturing_is_not_disturbed_by_another_workers_program(cp, action):
    n = 1 << 16
    capturing, release = threading.Event(), threading.Event()
    b_result: dict[str, Any] = {}
    b_program = None
    if action in ("replay", "close"):
        b_program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(n, cp.float32),), warmup=1)

    def worker_b() -> None:
        try:
            if not capturing.wait(_TIMEOUT_S):
                raise TimeoutError("worker A never started capturing")
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                if action == "capture":
                    b_result["values"] = _worker_b_capture(cp, n)
                elif action == "replay":
                    b_result["values"] = _worker_b_replay(cp, n, b_program)
                else:
                    b_program.close()
                    b_result["values"] = None
        except BaseException as exc:  # reported on the main thread
            b_result["error"] = exc
        finally:
            release.set()

    thread = threading.Thread(target=worker_b)
    thread.start()
    try:
        with CudaGraphPool(0) as pool_a:
            a = CudaGraphProgram.capture(_held_affine(capturing, release), example_inputs=(cp.zeros(n, cp.float32),),
                                         pool=pool_a, warmup=1)
            thread.join(_TIMEOUT_S)
            assert not thread.is_alive()
            host = random_tile(np.random.default_rng(10), n)
            np.testing.assert_array_equal(cp.asnumpy(a.replay(host, synchronize=True)), affine_np(host))
    finally:
        release.set()
        thread.join(_TIMEOUT_S)
        if b_program is not None:
            b_program.close()
    if "error" in b_result:
        raise b_result["error"]
    if b_result["values"] is not None:
        got, expected = b_result["values"]
        np.testing.assert_array_equal(got, expected)
    if action == "close":
        assert b_program.closed
