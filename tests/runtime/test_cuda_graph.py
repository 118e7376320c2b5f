"""CUDA Graph plumbing that needs no GPU: argument checks, decorator form, names, outputs, arena."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from fhelium_cupy.errors import CudaUnavailableError
from fhelium_cupy.interop import Device
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason
from fhelium_cupy.runtime import CudaGraphCaptureStats, CudaGraphPool, CudaGraphProgram, memory_snapshot
from fhelium_cupy.runtime._capture import function_name
from fhelium_cupy.runtime._output import check_output
from fhelium_cupy.runtime.arena import _FreeList
from tests.helpers.toy_values import ToyValue

no_gpu = pytest.mark.skipif(cuda_unavailable_reason() is None, reason="checks the behaviour without a GPU")


def _identity(x):
    return x


def test_non_callable_function_is_a_type_error():
    with pytest.raises(TypeError, match="function must be callable"):
        CudaGraphProgram.capture(42, example_inputs=(np.zeros(4),))


@pytest.mark.parametrize("warmup", [-1, -10])
def test_negative_warmup_is_a_value_error(warmup):
    with pytest.raises(ValueError, match="warmup must be non-negative"):
        CudaGraphProgram.capture(_identity, example_inputs=(np.zeros(4),), warmup=warmup)


@pytest.mark.parametrize("warmup", [True, 1.0, "3", None])
def test_warmup_must_be_an_int(warmup):
    with pytest.raises(TypeError, match="warmup must be an int"):
        CudaGraphProgram.capture(_identity, example_inputs=(np.zeros(4),), warmup=warmup)


def test_check_input_liveness_must_be_a_bool():
    with pytest.raises(TypeError, match="check_input_liveness"):
        CudaGraphProgram.capture(_identity, example_inputs=(np.zeros(4),), check_input_liveness="yes")


def test_pool_must_be_a_pool():
    with pytest.raises(TypeError, match="CudaGraphPool"):
        CudaGraphProgram.capture(_identity, example_inputs=(np.zeros(4),), pool=object())


def test_examples_need_an_array_and_one_cuda_device():
    with pytest.raises(ValueError, match="at least one tensor"):
        CudaGraphProgram.capture(_identity, example_inputs=())
    with pytest.raises(ValueError, match="at least one tensor"):
        CudaGraphProgram.capture(_identity, example_inputs=([], {}))
    # host examples: "move them to one GPU" where there is one, else that CUDA is missing
    # (a plain ValueError there sent users without a GPU to value.to("cuda"), which cannot work)
    host_examples = CudaUnavailableError if cuda_unavailable_reason() else ValueError
    with pytest.raises(host_examples, match="one CUDA device|needs a CUDA GPU"):
        CudaGraphProgram.capture(_identity, example_inputs=(np.zeros(4),))
    with pytest.raises(host_examples, match="one CUDA device|needs a CUDA GPU"):
        CudaGraphProgram.capture(_identity, example_inputs=[ToyValue(np.zeros(3))])
    with pytest.raises(TypeError, match="got int"):
        CudaGraphProgram.capture(_identity, example_inputs=(np.zeros(4), 5))


def test_decorator_form_checks_arguments_at_once_and_captures_when_applied():
    with pytest.raises(ValueError, match="warmup must be non-negative"):
        CudaGraphProgram.capture(example_inputs=(np.zeros(4),), warmup=-1)
    decorator = CudaGraphProgram.capture(example_inputs=(np.zeros(4),), warmup=1)
    assert callable(decorator)
    with pytest.raises((ValueError, CudaUnavailableError), match="one CUDA device|needs a CUDA GPU"):  # runs when applied

        @decorator
        def doubled(x):
            return x * 2

    with pytest.raises(TypeError, match="function must be callable"):
        decorator("not a function")


@no_gpu
def test_cuda_pieces_say_what_is_missing_without_a_gpu():
    with pytest.raises(CudaUnavailableError, match="CudaGraphPool"):
        CudaGraphPool(0)
    with pytest.raises(CudaUnavailableError):
        CudaGraphPool("cuda")
    with pytest.raises(CudaUnavailableError):
        memory_snapshot(0)


def test_pool_needs_a_cuda_device():
    with pytest.raises(ValueError, match="CUDA device"):
        CudaGraphPool("cpu")


def test_function_names_never_call_repr():
    class Loud:
        def __repr__(self):
            raise AssertionError("repr must not be called (FHElium bug 7.3)")

        def __call__(self, x):
            return x

    def evaluator(key, x):
        return x

    assert function_name(functools.partial(evaluator, Loud())) == "test_function_names_never_call_repr.<locals>.evaluator"
    assert function_name(functools.partial(functools.partial(evaluator, Loud()))).endswith("evaluator")
    assert function_name(Loud()) == "test_function_names_never_call_repr.<locals>.Loud"
    assert function_name(_identity) == "_identity"


def test_stats_have_the_six_spec_fields():
    assert [f.name for f in dataclasses.fields(CudaGraphCaptureStats)] == [
        "warmup_iterations",
        "warmup_seconds",
        "capture_seconds",
        "first_replay_seconds",
        "memory_allocated_bytes",
        "memory_reserved_bytes",
    ]
    stats = CudaGraphCaptureStats(3, 0.1, 0.2, 0.3, 4, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.warmup_iterations = 4  # type: ignore[misc]


def test_output_validation_messages():
    device = Device("cuda", 0)
    check_output(None, device)
    check_output([None, (), {}], device)
    with pytest.raises(TypeError, match=r"actual=int"):
        check_output(3, device)
    with pytest.raises(TypeError, match=r"actual=str"):
        check_output({"a": [None, "x"]}, device)
    with pytest.raises(TypeError, match="tensor is not on the capture device"):
        check_output(np.zeros(3), device)
    with pytest.raises(TypeError, match="value ToyValue.data is not on the capture device"):
        check_output((ToyValue(np.zeros(3)),), device)


def test_arena_free_list_best_fit_and_coalescing():
    free = _FreeList()
    cid = free.add_chunk(4096)
    a = free.take(1024)
    b = free.take(1024)
    c = free.take(1024)
    assert (a, b, c) == ((cid, 0), (cid, 1024), (cid, 2048))
    assert free.used_bytes() == 3072 and free.peak_bytes == 3072
    free.release(cid, 1024, 1024)  # a 1024-byte hole in the middle, 1024 free at the tail
    assert free.take(2048) is None  # the two free ranges are not contiguous
    assert free.take(512) == (cid, 1024)  # first of the equally small ranges
    free.release(cid, 1024, 512)
    assert free.take(1024) == (cid, 1024)  # the hole merged back to 1024 bytes
    free.release(cid, 0, 1024)
    free.release(cid, 1024, 1024)
    free.release(cid, 2048, 1024)
    assert free.intervals(cid) == [(0, 4096)]  # fully coalesced
    assert free.used_bytes() == 0 and free.peak_bytes == 3072
    second = free.add_chunk(8192)
    assert free.take(4096) == (cid, 0)  # best fit: the exact 4096-byte chunk, not the larger one
    assert free.take(6000) == (second, 0)
    free.release(cid, 0, 4096)
    free.closed = True
    free.release(second, 0, 6000)  # after close: accounting only, no reuse
    assert free.used_bytes() == 0
    assert free.intervals(second) == [(6000, 2192)]  # closed: the range was not given back


def test_arena_free_list_reuses_a_block_only_on_the_stream_that_freed_it_until_merged():
    """Parallel branches of one capture: a range freed on stream A is not handed to stream B
    (B's work runs beside A's in the graph); A itself reuses it (stream order); after
    merge_streams (a capture's start and end) any stream takes it, coalesced."""
    A, B = 0x1000, 0x2000
    free = _FreeList()
    cid = free.add_chunk(4096)
    assert free.take(1024, A) == (cid, 0)  # an untagged range: any stream
    assert free.take(1024, B) == (cid, 1024)
    free.release(cid, 0, 1024, A)
    assert free.take(1024, B) == (cid, 2048)  # not A's freed block
    assert free.take(1024, A) == (cid, 0)  # A reuses its own
    free.release(cid, 0, 1024, A)
    free.release(cid, 1024, 1024, B)  # adjacent, other tag: not coalesced
    assert free.intervals(cid) == [(0, 1024), (1024, 1024), (3072, 1024)]
    assert free.take(2048, A) is None and free.take(2048, B) is None
    free.release(cid, 2048, 1024, B)  # B's two ranges coalesce; the untagged tail stays apart
    assert free.intervals(cid) == [(0, 1024), (1024, 2048), (3072, 1024)]
    with free.lock:
        free.merge_streams()
    assert free.intervals(cid) == [(0, 4096)]
    assert free.take(4096, B) == (cid, 0)


def test_memory_snapshot_counts_open_graph_arenas_of_its_device():
    from fhelium_cupy.runtime.arena import GraphArena, live_arena_bytes
    from fhelium_cupy.runtime.memory import MemorySnapshot

    snap = MemorySnapshot(Device("cuda", 0), 0, 100, 50, pool_used_bytes=7, pool_reserved_bytes=9,
                          arena_used_bytes=3, arena_reserved_bytes=4)
    assert (snap.allocated_bytes, snap.reserved_bytes) == (10, 13)
    before = live_arena_bytes(Device("cuda", 0))
    arena = GraphArena(Device("cuda", 0))  # no chunk yet: nothing reserved
    assert live_arena_bytes(Device("cuda", 0)) == before
    arena._free.add_chunk(4 << 20)  # as malloc does, without a GPU
    assert live_arena_bytes(Device("cuda", 0)) == (before[0], before[1] + (4 << 20))
    elsewhere = GraphArena(Device("cuda", 1))
    elsewhere._free.add_chunk(2 << 20)
    assert live_arena_bytes(Device("cuda", 0)) == (before[0], before[1] + (4 << 20))  # another device's
    arena.close()
    assert live_arena_bytes(Device("cuda", 0)) == before
    elsewhere.close()
