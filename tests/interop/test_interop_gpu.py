"""Interop and buffers on a CUDA device: streams, events, DLPack views, copy paths."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.interop import Device, as_device
from fhelium_cupy.interop.arrays import leaf_span, to_cupy
from fhelium_cupy.interop.streams import event_handles, resolve_stream
from fhelium_cupy.runtime import ReusableValueBuffer, pin_value_tree
from tests.helpers.gpu_spin import spin_ms
from tests.helpers.torch_cuda import torch_with_cuda
from tests.helpers.toy_values import ToyValue

pytestmark = pytest.mark.gpu




def test_unindexed_cuda_resolves_to_the_current_device(cp):
    assert as_device("cuda") == Device("cuda", cp.cuda.runtime.getDevice())


def test_resolve_stream_accepts_cupy_torch_and_protocol_streams(cp):
    dev = Device("cuda", 0)
    s = cp.cuda.Stream(non_blocking=True)
    assert resolve_stream(s, dev) is s
    assert resolve_stream(None, dev).ptr == cp.cuda.get_current_stream().ptr
    with s:
        assert resolve_stream(None, dev).ptr == s.ptr
    torch = torch_with_cuda()
    ts = torch.cuda.Stream()
    wrapped = resolve_stream(ts, dev)
    assert (wrapped.ptr, wrapped.device_id) == (ts.cuda_stream, 0)
    with torch.cuda.stream(ts):
        current = resolve_stream(None, dev)
        assert (current.ptr, current.device_id) == (ts.cuda_stream, 0)
        assert resolve_stream(None, dev) is current  # the cached view of torch's current stream

    class Fake:
        device_id = 99

        def __cuda_stream__(self):
            return (0, s.ptr)

    with pytest.raises(ValueError, match="stream is on the wrong device"):
        resolve_stream(Fake(), dev)


class _ProtocolStream:
    """A stream handle through the CUDA stream protocol only: nothing says its device."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def test_protocol_streams_are_checked_against_the_devices_primary_context(cp):
    """A __cuda_stream__ object that does not tell its device: a stream of the device's
    primary context passes (wrapped on that device); one of a second context on the same
    device is refused by the driver's answer, not by any attribute."""
    dev = Device("cuda", 0)
    s = cp.cuda.Stream(non_blocking=True)
    wrapped = resolve_stream(_ProtocolStream(s.ptr), dev)
    assert wrapped.ptr == s.ptr and wrapped.device_id == 0
    driver, runtime = cp.cuda.driver, cp.cuda.runtime
    with cp.cuda.Device(0):
        primary = driver.ctxGetCurrent()
        ctx = driver.ctxCreate(0)  # current from here
        try:
            handle = runtime.streamCreate()
        finally:
            driver.ctxSetCurrent(primary)
        try:
            with pytest.raises(ValueError, match="actual=another context of cuda:0"):
                resolve_stream(_ProtocolStream(handle), dev)
            assert driver.ctxGetCurrent() == primary
        finally:
            driver.ctxSetCurrent(ctx)
            runtime.streamDestroy(handle)
            driver.ctxSetCurrent(primary)
            driver.ctxDestroy(ctx)


def test_a_protocol_stream_of_another_gpu_is_refused(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    with cp.cuda.Device(1):
        s1 = cp.cuda.Stream(non_blocking=True)
    with pytest.raises(ValueError, match="expected=cuda:0, actual=cuda:1"):
        resolve_stream(_ProtocolStream(s1.ptr), Device("cuda", 0))
    wrapped = resolve_stream(_ProtocolStream(s1.ptr), Device("cuda", 1))
    assert wrapped.ptr == s1.ptr and wrapped.device_id == 1


def test_event_handles_for_cupy_and_torch_events(cp):
    e = cp.cuda.Event()
    e.record()
    assert event_handles(e) == (e.ptr,)
    torch = torch_with_cuda()
    te = torch.cuda.Event()
    assert event_handles([te]) == ()  # never recorded: nothing to wait for
    te.record()
    assert event_handles([te, e]) == (te.cuda_event, e.ptr)
    with pytest.raises(TypeError, match="not a CUDA event"):
        event_handles([object()])


def _generic_torch_stream_and_event():
    torch = torch_with_cuda()
    if not hasattr(torch, "Stream") or not hasattr(torch, "Event"):
        pytest.skip("this torch has no device-generic torch.Stream / torch.Event")
    return torch


def test_device_generic_torch_streams_resolve_to_their_native_handle(cp):
    torch = _generic_torch_stream_and_event()
    dev = Device("cuda", 0)
    s = torch.Stream(device="cuda:0")
    assert type(s) is torch.Stream
    assert resolve_stream(s, dev).ptr == s.native_handle != 0
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        current = torch.accelerator.current_stream(0) if hasattr(torch, "accelerator") else ts
        assert resolve_stream(current, dev).ptr == ts.cuda_stream
    with pytest.raises(TypeError, match="is not a CUDA stream"):
        resolve_stream(torch.Stream(device="cpu"), dev)


def test_device_generic_torch_events_give_their_native_handle(cp):
    torch = _generic_torch_stream_and_event()
    e = torch.Event(device="cuda:0")
    assert event_handles(e) == ()  # never recorded: nothing to wait for
    e.record()
    assert event_handles([e]) == (e.event_id,)
    assert e.event_id != 0


def test_copy_on_a_generic_torch_stream_after_a_generic_torch_event(cp):
    torch = _generic_torch_stream_and_event()
    n = 1 << 20
    buffer = ReusableValueBuffer.like(cp.zeros(n, cp.float32), device="cuda")
    src = torch.empty(n, dtype=torch.float32, device="cuda")
    producer = torch.Stream(device="cuda:0")
    transfer = torch.Stream(device="cuda:0")
    ready = torch.Event(device="cuda:0")
    producer_cuda = torch.cuda.Stream(stream_id=producer.stream_id, device_index=producer.device_index,
                                      device_type=producer.device_type)
    with torch.cuda.stream(producer_cuda):
        # the producer is still busy when the copy is enqueued
        spin_ms(3.0, stream=resolve_stream(producer, as_device("cuda:0")))
        src.fill_(3.0)
        ready.record()
    handle = buffer.copy_from(src, stream=transfer, wait_for=[ready])
    handle.synchronize()
    assert bool((buffer.value == 3.0).all())
    buffer.close()


@pytest.mark.parametrize("source_kind", ["cupy", "numpy", "pinned", "torch_cpu", "torch_cuda"])
def test_cuda_buffer_accepts_every_source_kind_at_fixed_addresses(cp, source_kind):
    rng = np.random.default_rng(1)
    example = cp.asarray(rng.integers(0, 2**60, size=(2, 3, 64), dtype=np.uint64))
    buffer = ReusableValueBuffer.like([ToyValue(example)])
    assert buffer.device == Device("cuda", example.device.id)
    ptr = buffer.value[0].data.data.ptr
    host = rng.integers(0, 2**60, size=(2, 3, 64), dtype=np.uint64)
    if source_kind == "cupy":
        source = cp.asarray(host)
    elif source_kind == "numpy":
        source = host
    elif source_kind == "pinned":
        source = pin_value_tree(host)
        assert isinstance(source, np.ndarray)
    else:
        torch = torch_with_cuda()
        source = torch.from_numpy(host.view(np.int64)).view(torch.uint64) if hasattr(torch, "uint64") else None
        if source is None:
            pytest.skip("torch has no uint64")
        if source_kind == "torch_cuda":
            source = source.cuda()
    handle = buffer.copy_from([ToyValue(source)])
    handle.synchronize()
    out = buffer.value[0].data
    assert out.data.ptr == ptr
    np.testing.assert_array_equal(cp.asnumpy(out), host)


def test_torch_examples_give_zero_copy_torch_targets_on_cuda(cp):
    torch = torch_with_cuda()
    example = torch.arange(12, device="cuda", dtype=torch.float32).reshape(3, 4)[:, ::2]
    buffer = ReusableValueBuffer.like({"t": example})
    target = buffer.value["t"]
    assert isinstance(target, torch.Tensor) and target.is_cuda
    assert target.stride() == example.stride()
    assert target.data_ptr() == to_cupy(target).data.ptr
    source = torch.full((3, 4), 5.0, device="cuda")[:, ::2]
    torch.cuda.synchronize()
    buffer.copy_from({"t": source}).synchronize()
    assert torch.equal(buffer.value["t"], source)


def test_negative_strides_on_cuda_copy_exactly(cp):
    base = cp.arange(40, dtype=cp.int64).reshape(4, 10)
    buffer = ReusableValueBuffer.like(base[::-1, ::3])
    new = (cp.arange(40, dtype=cp.int64) * 3).reshape(4, 10)[::-1, ::3]
    buffer.copy_from(new).synchronize()
    assert bool((buffer.value == new).all())
    low, span = leaf_span(buffer.value)
    assert span == leaf_span(new)[1]
