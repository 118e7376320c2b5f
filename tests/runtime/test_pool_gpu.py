"""CudaGraphPool on a GPU: shared scratch, retained outputs, event chain, shuffled replay, close."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from fhelium_cupy.errors import ExecutionError
from fhelium_cupy.interop import Device
from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram
from tests.helpers.gpu_spin import cycles_for_ms
from tests.helpers.graph_workloads import (
    affine,
    affine_np,
    random_tile,
    rawkernel_axpy,
    rawkernel_axpy_np,
    scale_value,
    scratch_spin_affine,
)
from tests.helpers.toy_values import ToyValue

pytestmark = pytest.mark.gpu



def test_pool_device_and_validation(cp):
    pool = CudaGraphPool("cuda")
    assert pool.device == Device("cuda", cp.cuda.runtime.getDevice())
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(ValueError, match="CUDA device"):
        CudaGraphPool("cpu")


def test_programs_share_scratch_but_not_outputs(cp):
    n = 1 << 18
    with CudaGraphPool(0) as pool:
        a = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=1)
        reserved_after_a = pool.scratch_reserved_bytes
        assert reserved_after_a >= n * 4
        b = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=1)
        assert pool.scratch_reserved_bytes == reserved_after_a  # b reused a's scratch
        assert a.output.data.ptr != b.output.data.ptr
        assert a.pool is pool and b.pool is pool
        ha, hb = random_tile(np.random.default_rng(0), n), random_tile(np.random.default_rng(1), n)
        out_a = a.replay(ha)
        out_b = b.replay(hb, synchronize=True)
        np.testing.assert_array_equal(cp.asnumpy(out_a), affine_np(ha))  # b did not overwrite a's output
        np.testing.assert_array_equal(cp.asnumpy(out_b), affine_np(hb))
    assert a.closed and b.closed


def test_shuffled_replay_order_keeps_every_output_intact(cp):
    rng = np.random.default_rng(2)
    pool = CudaGraphPool(0)
    shapes = [(1000,), (4, 513), (3, 4096)]
    programs = []
    for shape in shapes:
        programs.append(("affine", shape, CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(shape, cp.float32),), pool=pool)))
    axpy_examples = (cp.zeros(2048, cp.float32), cp.zeros(2048, cp.float32))
    programs.append(("axpy", (2048,), CudaGraphProgram.capture(rawkernel_axpy, example_inputs=axpy_examples, pool=pool)))
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    expected = {}
    outputs = {}
    for step in range(24):
        index = int(rng.integers(len(programs)))
        kind, shape, program = programs[index]
        with streams[step % 2]:
            if kind == "affine":
                host = random_tile(rng, shape)
                outputs[index] = program.replay(host)
                expected[index] = affine_np(host)
            else:
                hx, hy = random_tile(rng, shape), random_tile(rng, shape)
                outputs[index] = program.replay(hx, hy)
                expected[index] = rawkernel_axpy_np(hx, hy)
    cp.cuda.runtime.deviceSynchronize()
    for index, out in outputs.items():
        np.testing.assert_array_equal(cp.asnumpy(out), expected[index])
    pool.close()
    assert all(program.closed for _, _, program in programs)


def test_event_chain_serializes_members_across_streams(cp):
    """Two long members launched on two streams at once must not share scratch concurrently."""
    rng = np.random.default_rng(3)
    pool = CudaGraphPool(0)
    n = 1 << 16
    cycles = cycles_for_ms(20)
    a = CudaGraphProgram.capture(scratch_spin_affine(cycles), example_inputs=(cp.zeros(n, cp.float32),), pool=pool,
                                 warmup=1)
    b = CudaGraphProgram.capture(scratch_spin_affine(cycles), example_inputs=(cp.zeros(n, cp.float32),), pool=pool,
                                 warmup=1)
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    for _ in range(3):
        ha, hb = random_tile(rng, n), random_tile(rng, n)
        with s1:
            owned_a = a.replay(ha, copy_output=True)
        with s2:
            owned_b = b.replay(hb, copy_output=True)
        cp.cuda.runtime.deviceSynchronize()
        np.testing.assert_array_equal(cp.asnumpy(owned_a), affine_np(ha))
        np.testing.assert_array_equal(cp.asnumpy(owned_b), affine_np(hb))
    pool.close()


def test_pool_value_outputs_and_owned_copies(cp):
    rng = np.random.default_rng(4)
    pool = CudaGraphPool(0)
    v0 = ToyValue(cp.zeros((2, 64), cp.int64), level=0)
    program = CudaGraphProgram.capture(scale_value, example_inputs=(v0,), pool=pool, warmup=2)
    other = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(128, cp.float32),), pool=pool, warmup=1)
    host = rng.integers(0, 100, size=(2, 64), dtype=np.int64)
    borrowed = program.replay(ToyValue(host))
    owned = program.replay(ToyValue(host), copy_output=True)
    other.replay(np.ones(128, np.float32), synchronize=True)
    assert borrowed.level == 1 and owned.level == 1
    assert owned.data.data.ptr != borrowed.data.data.ptr
    np.testing.assert_array_equal(cp.asnumpy(borrowed.data), host * 3)
    np.testing.assert_array_equal(cp.asnumpy(owned.data), host * 3)
    pool.close()


def test_allocation_storm_between_pool_replays(cp):
    rng = np.random.default_rng(5)
    pool = CudaGraphPool(0)
    a = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(1 << 16, cp.float32),), pool=pool, warmup=1)
    b = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(1 << 15, cp.float32),), pool=pool, warmup=1)
    ha = random_tile(rng, 1 << 16)
    out_a = a.replay(ha, synchronize=True)
    for _ in range(3):
        junk = [cp.full(int(n), 255, cp.uint8) for n in rng.integers(1, 1 << 20, size=64)]
        del junk
        cp.get_default_memory_pool().free_all_blocks()
        hb = random_tile(rng, 1 << 15)
        out_b = b.replay(hb, synchronize=True)
        np.testing.assert_array_equal(cp.asnumpy(out_a), affine_np(ha))
        np.testing.assert_array_equal(cp.asnumpy(out_b), affine_np(hb))
    pool.close()


def test_pool_does_not_extend_member_lifetimes(cp):
    pool = CudaGraphPool(0)
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(64, cp.float32),), pool=pool, warmup=1)
    program.replay(np.ones(64, np.float32))
    ref = weakref.ref(program)
    program.close()
    del program
    gc.collect()
    assert ref() is None
    survivor = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(64, cp.float32),), pool=pool, warmup=1)
    pool.close()
    with pytest.raises(ExecutionError, match="closed"):
        survivor.replay(np.ones(64, np.float32))


def test_torch_outputs_in_a_pool(cp):
    torch = pytest.importorskip("torch", reason="torch is optional")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA on this machine")

    def torch_affine(t):
        return torch.from_dlpack(affine(cp.from_dlpack(t)))

    pool = CudaGraphPool(0)
    program = CudaGraphProgram.capture(torch_affine, example_inputs=(torch.zeros(256, device="cuda"),), pool=pool, warmup=1)
    out = program.replay(torch.full((256,), 2.0), synchronize=True)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out.cpu(), torch.full((256,), 5.0), rtol=0, atol=0)
    pool.close()
