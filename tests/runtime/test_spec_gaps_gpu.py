"""Spec'd runtime behaviours on a GPU that other suites leave out.

Pool close during running replays, retained pool outputs (no autograd history, no
aliases), the caller's grad mode during capture, ``synchronize=True``, direct launches
of ``cuda_graph``, CPU-target buffers fed from CUDA sources, and mixed-device examples.
"""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.errors import ExecutionError
from fhelium_cupy.interop import Device
from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram, ReusableValueBuffer, pin_value_tree
from tests.helpers.gpu_spin import cycles_for_ms, spin_ms
from tests.helpers.graph_workloads import affine, affine_np, long_affine, random_tile
from tests.helpers.torch_cuda import torch_with_cuda
from tests.helpers.toy_values import ToyValue

pytestmark = pytest.mark.gpu


# -- 1. CudaGraphPool.close() while member replays are running ---------------------------


def _assert_closed(program, n):
    for action in (
        lambda: program.replay(np.zeros(n, np.float32)),
        lambda: program.replay_prepared(),
        lambda: program.copy_inputs_from(np.zeros(n, np.float32)),
        lambda: program.output,
        lambda: program.cuda_graph,
        lambda: program.input_signature,
    ):
        with pytest.raises(ExecutionError, match="CUDA Graph program is closed"):
            action()


def test_pool_close_waits_for_running_replays_and_closes_every_member(cp):
    rng = np.random.default_rng(100)
    n = 1 << 14
    cycles = cycles_for_ms(100)
    pool = CudaGraphPool("cuda")
    a = CudaGraphProgram.capture(long_affine(cycles), example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=1)
    b = CudaGraphProgram.capture(long_affine(cycles), example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=1)
    ha, hb = random_tile(rng, (n,)), random_tile(rng, (n,))
    compute = cp.cuda.Stream(non_blocking=True)
    with compute:
        owned_a = a.replay(pin_value_tree(ha), copy_output=True)  # spins ~100 ms before computing
        owned_b = b.replay(pin_value_tree(hb), copy_output=True)  # chained behind a: another ~100 ms
    assert not compute.done  # both replays are still running
    pool.close()
    assert compute.done  # close synchronized the members' work
    assert pool.closed and a.closed and b.closed
    for program in (a, b):
        _assert_closed(program, n)
    with pytest.raises(ExecutionError, match="closed"):
        CudaGraphProgram.capture(affine, example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=1)
    # copies taken before close are owned storage: intact and final (compute is non-blocking,
    # so these reads on the default stream are not ordered after it; close did that)
    np.testing.assert_array_equal(cp.asnumpy(owned_a), affine_np(ha))
    np.testing.assert_array_equal(cp.asnumpy(owned_b), affine_np(hb))


# -- 2. retained pool outputs: independent storage, no aliases, no autograd history ------


def test_pool_outputs_do_not_preserve_input_output_or_output_output_aliases(cp):
    rng = np.random.default_rng(101)
    n = 1024

    def aliased(x):
        y = x * 2
        return (x, y, y, y[: n // 2])  # an input returned as is, one array twice, and a view of it

    pool = CudaGraphPool("cuda")
    program = CudaGraphProgram.capture(aliased, example_inputs=(cp.zeros(n, cp.float32),), pool=pool, warmup=1)
    h1, h2 = random_tile(rng, (n,)), random_tile(rng, (n,))
    out = program.replay(h1, synchronize=True)
    assert len({leaf.data.ptr for leaf in out}) == 4  # four independent storages
    out[1].fill(-1)  # overwriting one retained leaf leaves the others intact
    np.testing.assert_array_equal(cp.asnumpy(out[0]), h1)
    np.testing.assert_array_equal(cp.asnumpy(out[1]), np.full(n, -1, np.float32))
    np.testing.assert_array_equal(cp.asnumpy(out[2]), h1 * 2)
    np.testing.assert_array_equal(cp.asnumpy(out[3]), (h1 * 2)[: n // 2])
    # the retained input leaf is not the input buffer: a new payload does not reach it
    handle = program.copy_inputs_from(h2)
    handle.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out[0]), h1)
    again = program.replay_prepared(copy_handle=handle, synchronize=True)
    np.testing.assert_array_equal(cp.asnumpy(again[0]), h2)
    for leaf in again[1:3]:
        np.testing.assert_array_equal(cp.asnumpy(leaf), h2 * 2)
    np.testing.assert_array_equal(cp.asnumpy(again[3]), (h2 * 2)[: n // 2])
    program.close()
    pool.close()


def test_pool_torch_outputs_have_no_autograd_history_and_no_aliases(cp):
    torch = torch_with_cuda()

    def with_history(t):
        y = torch.from_dlpack(affine(cp.from_dlpack(t)))
        y.requires_grad_(True)
        return (y, y.view(y.shape))  # a leaf that requires grad, and a view of it with a grad_fn

    pool = CudaGraphPool("cuda")
    with torch.enable_grad():
        program = CudaGraphProgram.capture(with_history, example_inputs=(torch.zeros(256, device="cuda"),), pool=pool, warmup=1)
        borrowed = program.replay(torch.full((256,), 2.0), synchronize=True)
        for leaf in borrowed:
            assert isinstance(leaf, torch.Tensor) and leaf.is_cuda
            assert not leaf.requires_grad and leaf.grad_fn is None and leaf.is_leaf
        assert borrowed[0].data_ptr() != borrowed[1].data_ptr()  # the view/base alias is gone
        borrowed[0].fill_(-1.0)
        torch.testing.assert_close(borrowed[1].cpu(), torch.full((256,), 5.0), rtol=0, atol=0)
        torch.testing.assert_close(borrowed[0].cpu(), torch.full((256,), -1.0), rtol=0, atol=0)
        owned = program.replay(torch.full((256,), 3.0), copy_output=True, synchronize=True)
    for leaf in owned:
        assert isinstance(leaf, torch.Tensor) and leaf.is_cuda
        assert not leaf.requires_grad and leaf.grad_fn is None
        torch.testing.assert_close(leaf.cpu(), torch.full((256,), 7.0), rtol=0, atol=0)
    assert owned[0].data_ptr() != owned[1].data_ptr()
    program.close()
    pool.close()


# -- 3. the callable runs in the caller's grad mode --------------------------------------


@pytest.mark.parametrize("pooled", [False, True], ids=["plain", "pool"])
@pytest.mark.parametrize("grad_enabled", [False, True], ids=["no_grad", "enable_grad"])
def test_captured_callable_runs_in_the_callers_grad_mode(cp, grad_enabled, pooled):
    torch = pytest.importorskip("torch", reason="torch is optional")
    seen = []

    def recording(x):
        seen.append(torch.is_grad_enabled())
        return affine(x)

    pool = CudaGraphPool("cuda") if pooled else None
    with torch.set_grad_enabled(grad_enabled):
        program = CudaGraphProgram.capture(recording, example_inputs=(cp.zeros(64, cp.float32),), warmup=2, pool=pool)
    assert seen == [grad_enabled] * 3  # two warmups and the capture
    with torch.set_grad_enabled(not grad_enabled):
        out = program.replay(np.full(64, 2, np.float32), synchronize=True)
    assert len(seen) == 3  # replay never calls the Python function
    np.testing.assert_array_equal(cp.asnumpy(out), np.full(64, 5, np.float32))
    program.close()
    if pool is not None:
        pool.close()


# -- 4. synchronize=True ------------------------------------------------------------------


def test_synchronize_true_returns_only_after_the_work_completed(cp):
    rng = np.random.default_rng(104)
    program = CudaGraphProgram.capture(long_affine(cycles_for_ms(50)), example_inputs=(cp.zeros((4, 1024), cp.float32),), warmup=1)
    compute = cp.cuda.Stream(non_blocking=True)
    transfer = cp.cuda.Stream(non_blocking=True)
    reader = cp.cuda.Stream(non_blocking=True)  # never ordered after compute

    def snapshot(array):
        with reader:
            copy = array.copy()
        reader.synchronize()
        return cp.asnumpy(copy)

    with compute:
        program.replay(random_tile(rng))
    assert not compute.done  # control: without synchronize the spin is still running
    compute.synchronize()
    h1, h2, h3 = random_tile(rng), random_tile(rng), random_tile(rng)
    with compute:
        borrowed = program.replay(h1, synchronize=True)
    assert compute.done
    np.testing.assert_array_equal(snapshot(borrowed), affine_np(h1))
    with compute:
        owned = program.replay(h2, copy_output=True, synchronize=True)
    assert compute.done
    np.testing.assert_array_equal(snapshot(owned), affine_np(h2))
    handle = program.copy_inputs_from(pin_value_tree(h3), stream=transfer)
    with compute:
        prepared = program.replay_prepared(copy_handle=handle, synchronize=True)
    assert compute.done and transfer.done and handle.query()
    np.testing.assert_array_equal(snapshot(prepared), affine_np(h3))
    program.close()


# -- 5. direct cuda_graph.launch replays the current input payload ---------------------


def test_direct_graph_launch_replays_the_current_input_payload(cp):
    rng = np.random.default_rng(105)
    program = CudaGraphProgram.capture(affine, example_inputs=(cp.zeros((4, 1024), cp.float32),), warmup=1)
    transfer = cp.cuda.Stream(non_blocking=True)
    compute = cp.cuda.Stream(non_blocking=True)
    for _ in range(2):
        host = random_tile(rng)
        spin_ms(50, stream=transfer)  # the copy lands late: the launch must wait for its event
        handle = program.copy_inputs_from(pin_value_tree(host), stream=transfer)
        compute.wait_event(handle.event)
        program.cuda_graph.launch(compute)
        compute.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(program.output), affine_np(host))
        program.cuda_graph.launch(compute)  # no new copy: the same payload again
        compute.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(program.output), affine_np(host))
    transfer.synchronize()
    program.close()


# -- 6. CPU-target buffers fed from CUDA sources -----------------------------------------


def test_cpu_target_buffer_copies_from_a_cupy_source(cp):
    rng = np.random.default_rng(106)
    hx = random_tile(rng)
    hv = rng.integers(0, 2**40, size=(2, 256), dtype=np.uint64)
    buffer = ReusableValueBuffer.like({"x": np.zeros_like(hx), "values": [ToyValue(np.zeros_like(hv), level=2)]})
    assert buffer.device == Device("cpu")
    dx, dv = cp.asarray(hx), cp.asarray(hv)
    spin_ms(50)  # the sources below are produced behind ~50 ms of work on the current stream
    source = {"x": dx * np.float32(2), "values": [ToyValue(dv + np.uint64(1), level=2)]}
    handle = buffer.copy_from(source)
    assert handle.event is None and handle.query() and not handle.holds_sources  # synchronous
    value = buffer.value
    assert isinstance(value["x"], np.ndarray) and isinstance(value["values"][0].data, np.ndarray)
    np.testing.assert_array_equal(value["x"], hx * np.float32(2))
    np.testing.assert_array_equal(value["values"][0].data, hv + np.uint64(1))
    assert value["values"][0].level == 2
    buffer.close()


def test_pinned_cpu_target_like_a_cuda_example(cp):
    rng = np.random.default_rng(107)
    hx, hy = random_tile(rng), rng.integers(-(2**40), 2**40, size=(3, 5), dtype=np.int64)
    buffer = ReusableValueBuffer.like([cp.asarray(hx), cp.asarray(hy)], device="cpu", pin_memory=True)
    assert buffer.device == Device("cpu") and buffer.is_pinned
    for array in buffer.storage_arrays():
        assert isinstance(array, np.ndarray)
        attributes = cp.cuda.runtime.pointerGetAttributes(array.ctypes.data)
        assert attributes.type == cp.cuda.runtime.memoryTypeHost  # page-locked host memory
    value = buffer.value
    np.testing.assert_array_equal(value[0], hx)
    np.testing.assert_array_equal(value[1], hy)
    hx2, hy2 = random_tile(rng), rng.integers(-(2**40), 2**40, size=(3, 5), dtype=np.int64)
    assert buffer.copy_from([cp.asarray(hx2), cp.asarray(hy2)]).event is None
    np.testing.assert_array_equal(buffer.value[0], hx2)
    np.testing.assert_array_equal(buffer.value[1], hy2)
    buffer.close()


def test_cpu_target_buffer_copies_from_a_torch_cuda_source(cp):
    torch = torch_with_cuda()
    rng = np.random.default_rng(108)
    h1, h2 = random_tile(rng, (4, 256)), random_tile(rng, (4, 256))
    buffer = ReusableValueBuffer.like(np.zeros((4, 256), np.float32))
    handle = buffer.copy_from(torch.from_numpy(h1).cuda() * 2)
    assert handle.event is None
    np.testing.assert_array_equal(buffer.value, h1 * 2)
    # a torch CUDA example with a CPU target: torch CPU tensors around host storage
    tbuffer = ReusableValueBuffer.like(torch.from_numpy(h1).cuda() * 2, device="cpu")
    assert isinstance(tbuffer.value, torch.Tensor) and tbuffer.value.device.type == "cpu"
    np.testing.assert_array_equal(tbuffer.value.numpy(), h1 * 2)
    tbuffer.copy_from(torch.from_numpy(h2).cuda() + 1)
    np.testing.assert_array_equal(tbuffer.value.numpy(), h2 + np.float32(1))
    tbuffer.close()
    buffer.close()


# -- 7. mixed CPU/CUDA examples need an indexed target -----------------------------------


def test_like_with_cpu_and_cuda_examples_needs_an_indexed_target(cp):
    host = np.arange(12, dtype=np.float64).reshape(3, 4)
    example = {"host": host, "device": cp.arange(8, dtype=cp.int64) * 5}
    for device in (None, "cuda"):
        with pytest.raises(ValueError, match="indexed target device"):
            ReusableValueBuffer.like(example, device=device)
    index = cp.cuda.runtime.getDevice()
    buffer = ReusableValueBuffer.like(example, device=f"cuda:{index}")
    assert buffer.device == Device("cuda", index)
    value = buffer.value
    assert isinstance(value["host"], cp.ndarray) and isinstance(value["device"], cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(value["host"]), host)
    np.testing.assert_array_equal(cp.asnumpy(value["device"]), np.arange(8, dtype=np.int64) * 5)
    buffer.close()


def test_bfloat16_torch_tensors_in_and_out_of_a_graph(cp):
    """torch dtypes NumPy lacks are staged as their own dtype (a tag over uint16 storage)."""
    torch = torch_with_cuda()
    from fhelium_cupy.errors import CudaGraphInputError

    def double(x):
        out = torch.from_dlpack(cp.empty(tuple(x.shape), cp.uint16)).view(torch.bfloat16)  # CuPy-allocated
        torch.add(x, x, out=out)  # exact in bfloat16
        return out

    example = torch.zeros(4, 256, dtype=torch.bfloat16, device="cuda")
    program = CudaGraphProgram.capture(double, example_inputs=(example,), warmup=2)
    assert program.output.dtype == torch.bfloat16
    for source in (torch.randn(4, 256, device="cuda").bfloat16(), torch.randn(4, 256).bfloat16()):
        out = program.replay(source, synchronize=True)
        assert out.dtype == torch.bfloat16 and out.is_cuda
        assert torch.equal(out.cpu(), source.cpu() * 2)
    source = torch.randn(4, 256, device="cuda").bfloat16()
    owned = program.replay(source, copy_output=True, synchronize=True)
    assert owned.dtype == torch.bfloat16 and owned.data_ptr() != program.output.data_ptr()
    program.replay(torch.zeros(4, 256, dtype=torch.bfloat16, device="cuda"), synchronize=True)
    assert torch.equal(owned.cpu(), source.cpu() * 2)  # owned storage: not overwritten
    for wrong in (torch.zeros(4, 256, dtype=torch.float16, device="cuda"),
                  torch.zeros(4, 256, dtype=torch.int16, device="cuda")):
        with pytest.raises(CudaGraphInputError):
            program.replay(wrong)
    program.close()
