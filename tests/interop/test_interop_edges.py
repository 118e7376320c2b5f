"""Edges of values crossing frameworks found by the s7 interop audit: tensors without storage,
object arrays, autograd versions, zero-copy views, message dtypes, value construction."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.errors import ExecutionInputError, StateMismatchError
from fhelium_cupy.interop.arrays import leaf_kind, to_cupy, to_numpy
from fhelium_cupy.runtime import ReusableValueBuffer, ValueTreeSignature
from fhelium_cupy.values import freeze_metadata
from tests.helpers.ckks_engines import make_engine

torch = pytest.importorskip("torch")


def test_torch_tensors_without_storage_are_refused_before_any_copy():
    """A FakeTensor (what torch.export and make_fx trace with) has data_ptr() 0: copying it
    read address 0 and killed the process."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.zeros(4)
    with pytest.raises(TypeError, match="no addressable storage"):
        ValueTreeSignature.from_value(fake)
    buffer = ReusableValueBuffer.like((np.zeros(2), torch.zeros(4)), device="cpu")
    with pytest.raises(ExecutionInputError, match="no addressable storage"):
        buffer.copy_from((np.full(2, 9.0), fake))
    np.testing.assert_array_equal(buffer.value[0], np.zeros(2))  # leaf 0 untouched
    buffer.close()


def test_object_arrays_are_refused():
    objects = np.array(["a", "b"], dtype=object)
    with pytest.raises(TypeError, match="object references"):
        ValueTreeSignature.from_value(objects)
    with pytest.raises(TypeError, match="object references"):
        ReusableValueBuffer.like((objects,), device="cpu")


def test_masked_arrays_are_not_leaves():
    masked = np.ma.masked_array([1.0, 2.0], mask=[False, True])
    assert leaf_kind(masked) is None
    with pytest.raises(TypeError, match="MaskedArray"):
        ValueTreeSignature.from_value((masked,))


def test_dtypes_that_cannot_be_staged_are_refused_with_the_leaf_path():
    with pytest.raises(TypeError, match=r"value\['layer'\]\[1\]: torch dtype torch.uint4"):
        ValueTreeSignature.from_value({"layer": [torch.zeros(2), torch.empty(2, dtype=torch.uint4)]})


def test_a_copy_bumps_the_autograd_version_of_the_buffer_s_torch_views():
    """The bytes change under torch's feet; torch's copy_ would bump the version so that a
    graph which saved the old values refuses backward instead of using the new ones."""
    buffer = ReusableValueBuffer.like((torch.ones(3, requires_grad=True),), device="cpu")
    (x,) = buffer.value
    y = (x * x).sum()  # saves x for backward
    before = x._version
    buffer.copy_from((torch.zeros(3, requires_grad=True),))
    assert x._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    buffer.close()


def test_zero_copy_views_refuse_lazy_bits_and_share_memory():
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    for view, fix in ((z.conj(), "resolve_conj"), (z.conj().imag, "resolve_neg")):
        with pytest.raises(TypeError, match=fix):
            to_numpy(view)
        with pytest.raises(TypeError):
            to_cupy(view)  # a CPU tensor has no CuPy view either way
    t = torch.arange(4.0)
    view = to_numpy(t)
    view[0] = 7.0  # a view, as documented
    assert t[0].item() == 7.0
    with pytest.raises(TypeError, match="bfloat16"):
        to_numpy(torch.zeros(2, dtype=torch.bfloat16))


def test_subclasses_of_torch_tensor_defined_elsewhere_are_leaves():
    class Activation(torch.Tensor):
        pass

    tagged = torch.arange(4.0).as_subclass(Activation)
    assert leaf_kind(tagged) == "torch"
    buffer = ReusableValueBuffer.like((torch.zeros(4),), device="cpu")
    buffer.copy_from((tagged,))
    np.testing.assert_array_equal(buffer.value[0].numpy(), np.arange(4.0))
    buffer.close()


def test_messages_in_any_torch_float_format_encode_exactly():
    e = make_engine("test-n4096-scale40")
    want = e.encode(np.array([1.5, -2.25, 0.5]))
    for dtype in (torch.bfloat16, torch.float16, getattr(torch, "float8_e4m3fn", torch.float16)):
        got = e.encode(torch.tensor([1.5, -2.25, 0.5], dtype=dtype))
        np.testing.assert_array_equal(got.data, want.data)
    np.testing.assert_array_equal(e.encode(torch.tensor([1.5, -2.25, 0.5], requires_grad=True)).data, want.data)
    with pytest.raises(TypeError, match="dense CPU or CUDA"):
        e.encode(torch.zeros(2, device="meta"))
    for name in ("uint4", "int4", "bits8", "bits16"):  # no arithmetic at all: a TypeError, not NotImplementedError
        if hasattr(torch, name):
            with pytest.raises(TypeError, match="no numeric reading"):
                e.encode(torch.zeros(2, dtype=getattr(torch, name)))
    with pytest.raises(TypeError, match="sequence of numbers"):
        e.encode([torch.ones(1, requires_grad=True), torch.ones(1)])


def test_value_construction_normalizes_numpy_scalars_and_names_bad_data():
    from fhelium_cupy.ckks.values import Ciphertext, to_device

    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(np.ones(4))
    rebuilt = Ciphertext(ct.data, level=np.int64(ct.level), scale=np.float64(ct.scale), prime_ids=ct.prime_ids,
                         context_id=np.str_(ct.context_id), key_id=np.str_(ct.key_id))
    assert type(rebuilt.level) is int and type(rebuilt.context_id) is str and type(rebuilt.scale) is float
    e.decrypt(rebuilt)
    assert freeze_metadata({"id": np.str_("a"), "x": np.float64(1.5)}) == (("id", "a"), ("x", 1.5))
    assert type(freeze_metadata(np.float64(1.5))) is float
    with pytest.raises(StateMismatchError, match="to_cupy / to_numpy"):
        Ciphertext(torch.from_numpy(ct.data), level=ct.level, scale=ct.scale, prime_ids=ct.prime_ids,
                   context_id=ct.context_id, key_id=ct.key_id)
    with pytest.raises(StateMismatchError, match="exactly one tensor 'data'"):
        ct.with_value_tensors({"x": ct.data})
    with pytest.raises(TypeError, match="NumPy or CuPy"):
        to_device(torch.zeros(2), "cpu")


def test_engine_device_accepts_what_as_device_accepts():
    from fhelium_cupy.ckks import CkksEngine

    for spec in ("CPU", " cpu", "cpu"):
        assert CkksEngine("test-n4096-scale40", device=spec, insecure=True).device == "cpu"
    with pytest.raises(ValueError, match="unknown device"):
        CkksEngine("test-n4096-scale40", device="gpu", insecure=True)


def test_empty_arrays_share_one_signature_across_frameworks():
    torch = pytest.importorskip("torch")
    from fhelium_cupy.runtime import TensorSignature

    # NumPy reports (0, 0) or the parent's strides for empty arrays, torch C strides
    empties = [np.zeros((0, 3)), np.zeros((4, 3))[:0], np.zeros((3, 4)).T[:0], torch.zeros(0, 3, dtype=torch.float64)]
    signatures = {TensorSignature.from_tensor(a) for a in empties}
    assert len(signatures) == 1
    (signature,) = signatures
    assert signature.stride == (3, 1)
    assert all(signature.matches(a) for a in empties)
    assert TensorSignature(shape=(2, 0, 3), stride=(0, 0, 0), dtype=np.int64, layout="strided",
                           requires_grad=False).stride == (3, 3, 1)
    # shape and dtype still decide
    assert not signature.matches(np.zeros((0, 4)))
    assert not signature.matches(np.zeros((0, 3), np.float32))
    assert not signature.matches(torch.zeros(0, 3, dtype=torch.float32))
    # replay's compiled check takes the same empty leaves (no fall-back to the generic walk)
    from fhelium_cupy.runtime._validate import _compile
    from fhelium_cupy.runtime.signature import ValueTreeSignature

    check = _compile(ValueTreeSignature.from_value(np.zeros((0, 3))), frozenset({np.ndarray}))
    assert all(check(a, []) for a in empties[:3])
    assert not check(np.zeros((0, 4)), []) and not check(np.zeros((0, 3), np.float32), [])

    buffer = ReusableValueBuffer.like({"empty": np.zeros((0, 3)), "x": np.arange(4.0)})
    buffer.copy_from({"empty": torch.zeros(0, 3, dtype=torch.float64), "x": np.full(4, 7.0)}).synchronize()
    buffer.copy_from({"empty": np.zeros((5, 3))[:0], "x": np.full(4, 8.0)}).synchronize()
    np.testing.assert_array_equal(buffer.value["x"], np.full(4, 8.0))
    with pytest.raises(ExecutionInputError):
        buffer.copy_from({"empty": np.zeros((0, 4)), "x": np.full(4, 9.0)})
    np.testing.assert_array_equal(buffer.value["x"], np.full(4, 8.0))  # nothing copied
    buffer.close()


TORCH_ONLY_DTYPES = [
    getattr(torch, name)
    for name in ("bfloat16", "complex32", "float8_e4m3fn", "float8_e5m2")
    if hasattr(torch, name)
]


def _random_bits(shape, dtype):
    """A tensor of ``dtype`` holding random bit patterns (every byte its own value)."""
    raw = torch.randint(0, 256, (*shape, dtype.itemsize), dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)


def _same_bits(a, b) -> bool:
    same_size = {1: torch.int8, 2: torch.int16, 4: torch.int32}[a.dtype.itemsize]
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(same_size), b.view(same_size))


@pytest.mark.parametrize("dtype", TORCH_ONLY_DTYPES, ids=str)
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_torch_only_dtypes_are_staged_as_their_own_dtype(dtype):
    from fhelium_cupy.interop.arrays import is_torch_only_dtype, numpy_dtype_of, storage_dtype
    from fhelium_cupy.runtime import TensorSignature

    tag = numpy_dtype_of(dtype)
    assert is_torch_only_dtype(tag) and tag.itemsize == dtype.itemsize
    assert storage_dtype(tag) == np.dtype(f"u{dtype.itemsize}")
    unsigned = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32}[dtype.itemsize]
    # a tag equals no numeric dtype: an unsigned tensor of the same size is another signature
    assert TensorSignature.from_tensor(torch.zeros(3, dtype=unsigned)) != TensorSignature.from_tensor(
        torch.zeros(3, dtype=dtype))
    assert TensorSignature((3,), (1,), dtype, torch.strided, False) == TensorSignature.from_tensor(
        torch.zeros(3, dtype=dtype))

    example = {"w": _random_bits((4, 6), dtype)[:, ::2], "x": np.zeros(3)}
    buffer = ReusableValueBuffer.like(example, device="cpu")
    target = buffer.value["w"]
    assert target.dtype == dtype and target.stride() == (6, 2) and target.shape == (4, 3)  # the example's strides
    address = target.data_ptr()
    for _ in range(2):
        source = {"w": _random_bits((4, 6), dtype)[:, ::2], "x": np.arange(3.0)}
        buffer.copy_from(source).synchronize()
        assert buffer.value["w"].data_ptr() == address
        assert _same_bits(buffer.value["w"], source["w"])
    before = buffer.value["w"].clone()
    with pytest.raises(ExecutionInputError):  # same bytes, other dtype: refused, nothing copied
        buffer.copy_from({"w": torch.zeros(4, 3, dtype=unsigned), "x": np.full(3, 5.0)})
    assert _same_bits(buffer.value["w"], before)
    np.testing.assert_array_equal(buffer.value["x"], np.arange(3.0))
    with pytest.raises(TypeError, match="no NumPy view"):
        to_numpy(buffer.value["w"])
    buffer.close()


def test_a_bfloat16_signature_differs_from_float16_and_int16():
    from fhelium_cupy.runtime import TensorSignature

    signatures = {TensorSignature.from_tensor(torch.zeros(2, dtype=d))
                  for d in (torch.bfloat16, torch.float16, torch.int16, torch.uint16)}
    assert len(signatures) == 4


def test_nested_torch_tensors_are_refused_with_a_type_error():
    """A nested tensor's layout reads strided, and its shape raises torch's RuntimeError; every
    entry point now names it first (audit, session 30)."""
    import warnings

    from fhelium_cupy.interop.arrays import check_plain_torch
    from fhelium_cupy.runtime import TensorSignature, value_tree_nbytes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the strided nested API is a prototype, torch says)
        nested = [torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=layout)
                  for layout in (torch.strided, torch.jagged)]
    for call in (check_plain_torch, to_numpy, TensorSignature.from_tensor, value_tree_nbytes,
                 ValueTreeSignature.from_value, lambda t: ReusableValueBuffer.like((t,), device="cpu"),
                 make_engine("test-n4096-scale40").encode):
        for tensor in nested:
            with pytest.raises(TypeError, match="nested torch tensors"):
                call(tensor)


def test_a_quantized_torch_message_encodes_the_values_it_stands_for():
    e = make_engine("test-n4096-scale40")
    values = torch.tensor([0.5, -1.0, 2.25, 0.0])
    import warnings

    for dtype, zero in ((torch.quint8, 64), (torch.qint8, 0), (torch.qint32, 0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (quantized dtypes are deprecated in torch 2.13)
            quantized = torch.quantize_per_tensor(values, 0.25, zero, dtype)
        decoded = e.decode(e.encode(quantized), real=True)[:4]
        np.testing.assert_allclose(decoded, quantized.dequantize().numpy(), atol=1e-6)
        np.testing.assert_allclose(decoded, values.numpy(), atol=1e-6)  # (exact in these scales)


def test_a_masked_message_is_refused_as_the_runtime_refuses_masked_leaves():
    e = make_engine("test-n4096-scale40")
    masked = np.ma.masked_array([1.0, 1e6, 3.0], mask=[False, True, False])
    for call in (e.encode, e.encrypt_message):
        with pytest.raises(TypeError, match="masked array"):
            call(masked)
    np.testing.assert_allclose(e.decode(e.encode(masked.filled(0.0)), real=True)[:3], [1.0, 0.0, 3.0], atol=1e-6)


def test_a_cuda_buffer_refuses_a_dtype_in_the_other_byte_order():
    """CuPy keeps '>f8' on storage it is handed, and its kernels then read the bytes as '<f8'
    (on the H200: [1.5, 2.5, 3.5] summed to 3.3e-319). Refused before anything is allocated; on
    the CPU NumPy honours the byte order, so it stays allowed there."""
    from fhelium_cupy.interop.devices import Device
    from fhelium_cupy.runtime import TensorSignature
    from fhelium_cupy.runtime.buffer import allocate_storage

    big = np.array([1.5, 2.5, 3.5], dtype=">f8")
    sig = TensorSignature.from_tensor(big)
    with pytest.raises(TypeError, match="byte order"):
        allocate_storage(sig, Device("cuda", 0))
    host = allocate_storage(sig, Device("cpu"))
    host[...] = big
    np.testing.assert_array_equal(host, [1.5, 2.5, 3.5])
    buffer = ReusableValueBuffer.like((big,), device="cpu")
    buffer.copy_from((big[::-1].copy(),))
    np.testing.assert_array_equal(buffer.value[0], [3.5, 2.5, 1.5])
    buffer.close()
