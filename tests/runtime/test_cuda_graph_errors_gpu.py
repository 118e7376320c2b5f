"""CudaGraphProgram failure paths and lifetime on a GPU: each capture stage, close, bad streams."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.errors import CudaGraphCaptureError, CudaGraphOutputError, ExecutionError
from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram, _capture
from tests.helpers.gpu_spin import cycles_for_ms
from tests.helpers.graph_workloads import affine, affine_np, long_affine

pytestmark = pytest.mark.gpu



def _next_capture_works(cp):
    x = cp.arange(32, dtype=cp.float32)
    program = CudaGraphProgram.capture(affine, example_inputs=(x,), warmup=1)
    np.testing.assert_array_equal(cp.asnumpy(program.replay(np.ones(32, np.float32))), np.full(32, 3, np.float32))
    program.close()


def test_function_raising_in_warmup_is_a_warmup_capture_error(cp):
    def explodes(x):
        raise ValueError("boom in the evaluator")

    with pytest.raises(CudaGraphCaptureError) as info:
        CudaGraphProgram.capture(explodes, example_inputs=(cp.zeros(8),))
    error = info.value
    assert error.stage == "warmup"
    assert error.function_name.endswith("explodes")
    assert error.detail == "boom in the evaluator"
    assert isinstance(error.__cause__, ValueError)
    _next_capture_works(cp)


def test_host_sync_inside_capture_is_a_capture_error_and_capture_is_ended(cp):
    def reads_back(x):
        y = x * 2
        y.get()  # fine eagerly, refused while capturing
        return y

    with pytest.raises(CudaGraphCaptureError) as info:
        CudaGraphProgram.capture(reads_back, example_inputs=(cp.zeros(8),), warmup=1)
    assert info.value.stage == "capture"
    assert "capturing" in info.value.detail
    _next_capture_works(cp)


def test_swallowed_stream_sync_invalidates_the_capture_and_is_reported(cp):
    def sneaky(x):
        try:
            cp.cuda.get_current_stream().synchronize()  # invalidates the capture
        except Exception:
            pass
        return x + 1

    with pytest.raises(CudaGraphCaptureError) as info:
        CudaGraphProgram.capture(sneaky, example_inputs=(cp.zeros(8),), warmup=1)
    assert info.value.stage == "capture"
    _next_capture_works(cp)


@pytest.mark.parametrize(("warmup", "stage"), [(1, "warmup"), (0, "capture")])
def test_unsupported_output_fails_in_the_first_stage_that_sees_it(cp, warmup, stage):
    def returns_int(x):
        return 3

    with pytest.raises(CudaGraphCaptureError) as info:
        CudaGraphProgram.capture(returns_int, example_inputs=(cp.zeros(8),), warmup=warmup)
    assert info.value.stage == stage
    # the spec's capture raises TypeError for an unsupported output leaf: the error is both
    assert type(info.value) is CudaGraphOutputError and isinstance(info.value, TypeError)
    assert isinstance(info.value.__cause__, TypeError)
    assert "actual=int" in info.value.detail
    _next_capture_works(cp)


def test_host_output_is_rejected(cp):
    with pytest.raises(CudaGraphCaptureError, match="not on the capture device"):
        CudaGraphProgram.capture(lambda x: np.zeros(3), example_inputs=(cp.zeros(8),), warmup=1)


def test_first_replay_failure_is_reported_and_cleaned_up(cp, monkeypatch):
    def failing_launch(graph, stream):
        raise RuntimeError("injected launch failure")

    monkeypatch.setattr(_capture, "launch_first", failing_launch)
    with pytest.raises(CudaGraphCaptureError) as info:
        CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(8),), warmup=1)
    assert info.value.stage == "first replay"
    assert info.value.detail == "injected launch failure"
    monkeypatch.undo()
    _next_capture_works(cp)


def test_capture_never_allocates_from_cupys_default_pool(cp):
    class CountPoolAllocations(cp.cuda.MemoryHook):
        name = "CountPoolAllocations"

        def __init__(self):
            super().__init__()
            self.total = 0
            self.while_capturing = 0

        def malloc_preprocess(self, **kwargs):
            self.total += 1
            if cp.cuda.get_current_stream().is_capturing():
                self.while_capturing += 1

    hook = CountPoolAllocations()
    with hook:
        program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(4096, cp.float32),), warmup=1)
    assert hook.total > 0  # the hook works: warmup and buffers use the default pool
    assert hook.while_capturing == 0
    program.close()


def test_argument_errors_with_cuda_examples(cp):
    x = cp.zeros(64, cp.float32)
    with pytest.raises(ValueError, match="one CUDA device"):
        CudaGraphProgram.capture(affine, example_inputs=(x, np.zeros(3)))
    with pytest.raises(ValueError, match="Aliased"):
        CudaGraphProgram.capture(lambda a, b: a + b, example_inputs=(x, x))
    with pytest.raises(ValueError, match="Aliased"):
        CudaGraphProgram.capture(lambda a, b: a + b, example_inputs=(x[:40], x[20:60]))
    with pytest.raises(TypeError, match="function must be callable"):
        CudaGraphProgram.capture("affine", example_inputs=(x,))
    with pytest.raises(ValueError, match="warmup must be non-negative"):
        CudaGraphProgram.capture(affine, example_inputs=(x,), warmup=-1)
    with pytest.raises(TypeError):
        CudaGraphProgram.capture(affine, example_inputs=(x, "static"))
    pool = CudaGraphPool(x.device.id)
    with pytest.raises(ValueError, match="warmup >= 1"):
        CudaGraphProgram.capture(affine, example_inputs=(x,), warmup=0, pool=pool)
    pool.close()
    with pytest.raises(ExecutionError, match="closed"):
        CudaGraphProgram.capture(affine, example_inputs=(x,), pool=pool)
    # disjoint views of one allocation are fine
    program = CudaGraphProgram.capture(lambda a, b: a + b, example_inputs=(x[:32], x[32:]), warmup=1)
    program.close()


def test_closed_program_behaviour(cp):
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(16, cp.float32),), warmup=1)
    stats, device = program.stats, program.device
    with program as same:
        assert same is program
    assert program.closed
    program.close()  # idempotent
    assert program.stats is stats and program.device == device
    for action in (
        lambda: program.replay(np.zeros(16, np.float32)),
        lambda: program.replay_prepared(),
        lambda: program.copy_inputs_from(np.zeros(16, np.float32)),
        lambda: program.output,
        lambda: program.cuda_graph,
        lambda: program.input_signature,
        lambda: program.input_nbytes,
        lambda: program.__enter__(),
    ):
        with pytest.raises(ExecutionError, match="CUDA Graph program is closed"):
            action()


def test_close_waits_for_an_inflight_replay_and_a_pending_copy(cp):
    program = CudaGraphProgram.capture(long_affine(cycles_for_ms(30)), example_inputs=(cp.zeros(256, cp.float32),), warmup=1)
    compute = cp.cuda.Stream(non_blocking=True)
    with compute:
        owned = program.replay(np.full(256, 2, np.float32), copy_output=True)
    handle = program.copy_inputs_from(np.full(256, 5, np.float32), stream=cp.cuda.Stream(non_blocking=True))
    program.close()
    assert handle.query()  # close waited for the copy
    assert compute.done  # and for the replay
    np.testing.assert_array_equal(cp.asnumpy(owned), np.full(256, 5, np.float32))


def test_wrong_device_stream_is_rejected_and_state_is_unchanged(cp):
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(16, cp.float32),), warmup=1)
    real = cp.cuda.Stream(non_blocking=True)

    class OtherDeviceStream:
        device_id = 99

        def __cuda_stream__(self):
            return (0, real.ptr)

    with pytest.raises(ValueError, match="wrong device"):
        program.copy_inputs_from(np.ones(16, np.float32), stream=OtherDeviceStream())
    out = program.replay_prepared(synchronize=True)  # no outstanding copy was left behind
    np.testing.assert_array_equal(cp.asnumpy(out), affine_np(np.zeros(16, np.float32)))
    program.close()


def test_examples_on_several_gpus_are_rejected(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    a = cp.zeros(8)
    with cp.cuda.Device(1):
        b = cp.zeros(8)
    with pytest.raises(ValueError, match="one CUDA device"):
        CudaGraphProgram.capture(lambda x, y: x + 1, example_inputs=(a, b))
    with pytest.raises(ValueError, match="CudaGraphPool is on"):
        CudaGraphProgram.capture(affine, example_inputs=(b,), pool=CudaGraphPool(0))
