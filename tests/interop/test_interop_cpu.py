"""Interop on the CPU: devices, leaf facts, torch <-> NumPy zero-copy, negative strides."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.interop import Device, as_device
from fhelium_cupy.interop.arrays import (
    element_strides,
    leaf_device,
    leaf_kind,
    leaf_span,
    numpy_dtype_of,
    to_numpy,
    wrap_like,
)
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason
from fhelium_cupy.runtime import ReusableValueBuffer, TensorSignature

torch = pytest.importorskip("torch", reason="torch is an optional dependency")


def test_device_normalization():
    assert as_device("cpu") == Device("cpu")
    assert as_device("cuda:3") == Device("cuda", 3)
    assert as_device(2) == Device("cuda", 2)
    assert as_device(torch.device("cpu")) == Device("cpu")
    assert as_device(torch.device("cuda", 1)) == Device("cuda", 1)
    assert str(Device("cuda", 0)) == "cuda:0"
    with pytest.raises(ValueError, match="unknown device"):
        as_device("gpu")
    with pytest.raises(ValueError, match="non-negative"):
        as_device(-1)
    with pytest.raises(TypeError, match="cannot interpret"):
        as_device(3.0)
    with pytest.raises(TypeError):
        as_device(True)


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="checks the CPU-only error path")
def test_unindexed_cuda_without_a_gpu_names_the_missing_piece():
    from fhelium_cupy.errors import CudaUnavailableError

    with pytest.raises(CudaUnavailableError, match="needs a CUDA GPU"):
        as_device("cuda")


def test_torch_and_numpy_leaves_share_one_signature():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2]
    n = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert leaf_kind(t) == "torch" and leaf_kind(n) == "numpy"
    assert element_strides(t) == element_strides(n) == (4, 2)
    assert TensorSignature.from_tensor(t) == TensorSignature.from_tensor(n)
    assert leaf_device(t) == Device("cpu")
    assert numpy_dtype_of(torch.int64) == np.int64
    assert leaf_span(t)[1] == leaf_span(n)[1] == (2 * 4 + 1 * 2 + 1) * 4


def test_unsupported_torch_dtype_is_a_clear_type_error():
    with pytest.raises(TypeError, match="uint4 has no NumPy equivalent"):  # sub-byte: not one value a byte
        TensorSignature.from_tensor(torch.empty(2, dtype=torch.uint4))


def test_requires_grad_is_recorded_and_detached_for_transfer():
    t = torch.zeros(4, requires_grad=True)
    sig = TensorSignature.from_tensor(t)
    assert sig.requires_grad is True
    assert TensorSignature.from_tensor(t.detach()) != sig
    view = to_numpy(t)
    assert view.__array_interface__["data"][0] == t.data_ptr()
    buffer = ReusableValueBuffer.like([t], device="cpu")
    target = buffer.value[0]
    assert isinstance(target, torch.Tensor) and target.requires_grad
    buffer.copy_from([torch.full((4,), 3.0, requires_grad=True)])
    assert torch.equal(buffer.value[0].detach(), torch.full((4,), 3.0))


def test_torch_never_receives_negative_strides():
    reversed_view = np.arange(5)[::-1]
    with pytest.raises(ValueError, match="negative strides"):
        wrap_like(reversed_view, "torch")


def test_torch_examples_give_torch_targets_and_accept_numpy_sources():
    example = {"a": torch.zeros(2, 3, dtype=torch.int64), "b": np.zeros(3)}
    buffer = ReusableValueBuffer.like(example, device="cpu")
    value = buffer.value
    assert isinstance(value["a"], torch.Tensor) and isinstance(value["b"], np.ndarray)
    buffer.copy_from({"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": torch.ones(3, dtype=torch.float64)})
    assert buffer.value["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_array_equal(buffer.value["b"], np.ones(3))


def test_device_is_the_string_torch_accepts_and_equals_the_torch_device():
    """The spec types the ``device`` properties as ``torch.device``: a ``Device`` is the
    string torch takes, equal to the torch.device either way round, and rebuilt by pickle."""
    import pickle

    import pytest

    torch = pytest.importorskip("torch")
    from fhelium_cupy.interop import Device
    from fhelium_cupy.runtime import ReusableValueBuffer

    cuda = Device("cuda", 1)
    assert cuda == "cuda:1" and cuda == torch.device("cuda", 1) and torch.device("cuda", 1) == cuda
    assert cuda != torch.device("cuda", 0) and cuda != Device("cuda", 0) and not (cuda != "cuda:1")
    assert (cuda.type, cuda.index, cuda.is_cuda, repr(cuda)) == ("cuda", 1, True, "Device('cuda:1')")
    assert {cuda: 1}["cuda:1"] == 1 and pickle.loads(pickle.dumps(cuda)) == cuda
    assert type(pickle.loads(pickle.dumps(cuda))) is Device
    with pytest.raises(AttributeError):
        cuda.index = 0
    for bad in (("cuda", None), ("cuda", -1), ("cpu", 0), ("tpu", 0), ("cuda", True)):
        with pytest.raises(ValueError):
            Device(*bad)
    buffer = ReusableValueBuffer.like((torch.zeros(2),), device="cpu")
    assert buffer.device == torch.device("cpu")
    assert torch.ones(2).to(buffer.device).device == torch.device("cpu")
    assert torch.zeros(1, device=buffer.device).device.type == "cpu"
    buffer.close()


def test_stream_identity_never_equates_per_thread_default_streams():
    """Handle 2 (cudaStreamPerThread) is a different stream in every host thread, and a thread
    started after another ended may reuse its ident: its identity equals nothing, so the
    runtime's "same stream as the last replay: no wait" rule never applies to it. Other
    handles are their own identity."""
    from fhelium_cupy.interop.streams import stream_identity

    assert stream_identity(2) != stream_identity(2)
    assert stream_identity(0) == 0 and stream_identity(1) == 1 and stream_identity(0x7F00) == 0x7F00


class _FakeDriver:
    """The driver calls check_stream_context makes, over a table of stream handle -> context
    and context -> device (contexts 100 + i: device i's primary one)."""

    def __init__(self, streams: dict[int, int], devices: dict[int, int]) -> None:
        self.streams, self.devices = streams, devices
        self.current = 100
        self.asked: list[int] = []

    def ctxGetCurrent(self) -> int:  # noqa: N802 - CuPy's names
        return self.current

    def ctxSetCurrent(self, ctx: int) -> None:  # noqa: N802
        self.current = ctx

    def ctxGetDevice(self) -> int:  # noqa: N802
        return self.devices[self.current]

    def streamGetCtx(self, handle: int) -> int:  # noqa: N802
        self.asked.append(handle)
        return self.streams[handle]


def _fake_cupy(driver: _FakeDriver):
    import contextlib
    import types

    @contextlib.contextmanager
    def device(index: int):
        previous = driver.current
        driver.current = 100 + index  # cudaSetDevice: the primary context
        try:
            yield
        finally:
            driver.current = previous

    return types.SimpleNamespace(cuda=types.SimpleNamespace(driver=driver, Device=device))


def test_a_foreign_stream_is_checked_against_the_devices_primary_context(monkeypatch):
    """check_stream_context asks the driver for the stream's context once per handle and
    device: the device's primary context passes, another device's or another context of the
    same device is a ValueError naming it, the caller's context is restored either way, and the
    default-stream handles are not asked about."""
    from fhelium_cupy.interop import streams

    monkeypatch.setattr(streams, "_CONTEXT_CHECKED", set())
    # handle 7: a stream of device 0's primary context; 8: of device 1's; 9: of a second context on device 0
    driver = _FakeDriver({7: 100, 8: 101, 9: 555}, {100: 0, 101: 1, 555: 0})
    driver.current = 42  # some context the caller had current
    cupy = _fake_cupy(driver)
    for handle in (0, 1, 2):
        streams.check_stream_context(cupy, handle, Device("cuda", 0))
    assert driver.asked == []
    streams.check_stream_context(cupy, 7, Device("cuda", 0))
    streams.check_stream_context(cupy, 7, Device("cuda", 0))
    assert driver.asked == [7] and driver.current == 42
    with pytest.raises(ValueError, match=r"wrong device: expected=cuda:0, actual=cuda:1"):
        streams.check_stream_context(cupy, 8, Device("cuda", 0))
    assert driver.current == 42
    streams.check_stream_context(cupy, 8, Device("cuda", 1))
    with pytest.raises(ValueError, match=r"expected=cuda:0, actual=another context of cuda:0"):
        streams.check_stream_context(cupy, 9, Device("cuda", 0))
    with pytest.raises(ValueError, match="wrong device"):  # a refusal is not cached
        streams.check_stream_context(cupy, 9, Device("cuda", 0))
    assert driver.current == 42 and driver.asked == [7, 8, 8, 9, 9]


def test_foreign_streams_are_wrapped_on_the_target_device(monkeypatch):
    """resolve_stream wraps a torch or __cuda_stream__ stream as a CuPy view of the target
    device that keeps the foreign object alive (Stream.from_external alone says device -1), and
    the current-stream cache of foreign handles hits on its second call. Real CuPy objects, no
    GPU: building a view calls no CUDA."""
    import gc
    import weakref

    cupy = pytest.importorskip("cupy")
    from fhelium_cupy.interop import streams

    monkeypatch.setattr(streams, "require_cupy", lambda what: cupy)
    monkeypatch.setattr(streams, "_EXTERNAL", {})
    monkeypatch.setattr(streams, "_CONTEXT_CHECKED", {(0x7100, 1), (0x7200, 1)})  # the driver said yes

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x7100)

    foreign = Protocol()
    alive = weakref.ref(foreign)
    wrapped = streams.resolve_stream(foreign, Device("cuda", 1))
    assert isinstance(wrapped, cupy.cuda.Stream) and (wrapped.ptr, wrapped.device_id) == (0x7100, 1)
    del foreign
    gc.collect()
    assert alive() is not None  # the view holds it
    del wrapped
    gc.collect()
    assert alive() is None
    view = cupy.cuda.Stream.from_external(Protocol())  # device -1: checked, wrapped again
    assert view.device_id == -1
    assert streams.resolve_stream(view, Device("cuda", 1)).device_id == 1
    own = streams._wrap_handle(cupy, 0x7300, 0)  # says its device: passes through or is refused
    assert streams.resolve_stream(own, Device("cuda", 0)) is own
    with pytest.raises(ValueError, match="expected=cuda:1, actual=cuda:0"):
        streams.resolve_stream(own, Device("cuda", 1))

    class Broken:
        def __cuda_stream__(self):
            return 0x7100

    with pytest.raises(TypeError, match=r"gave 28928, not \(version, handle\)"):
        streams.resolve_stream(Broken(), Device("cuda", 1))
    first = streams._external(cupy, 0x7200, 1)
    assert streams._external(cupy, 0x7200, 1) is first and first.device_id == 1
    assert streams._external(cupy, 0x7200, 0).device_id == 0  # the same number on another device


def test_wrap_like_refuses_a_read_only_array_for_torch(tmp_path):
    """torch tensors are always writable: a view of read-only NumPy memory let writes land in
    it (a segmentation fault for a read-only memmap)."""
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        wrap_like(frozen, "torch")
    np.arange(4.0).tofile(tmp_path / "m.bin")
    with pytest.raises(ValueError, match="read-only"):
        wrap_like(np.memmap(tmp_path / "m.bin", dtype=np.float64, mode="r"), "torch")
    assert wrap_like(np.arange(4.0), "torch")[3].item() == 3.0  # writable arrays still wrap
