"""ReusableValueBuffer on CPU targets: addresses, validation before copy, lifetime."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fhelium_cupy.errors import CudaUnavailableError, ExecutionError, ExecutionInputError
from fhelium_cupy.interop.capabilities import cuda_unavailable_reason
from fhelium_cupy.runtime import ReusableValueBuffer, ValueTreeSignature, pin_value_tree, value_tree_nbytes
from tests.helpers.toy_values import ToyValue
from tests.helpers.trees import build_tree, mutate_spec, topology, tree_specs


def _addresses(buffer):
    return [a.__array_interface__["data"][0] for a in buffer.storage_arrays()]


def _snapshot(buffer):
    return [a.copy() for a in buffer.storage_arrays()]


def test_reusable_value_buffer_preserves_addresses_and_validates_before_copy():
    prototype = {"tensor": np.arange(4, dtype=np.float64), "values": [ToyValue(np.array([1, 2], np.uint64))]}
    buffer = ReusableValueBuffer.like(prototype, device="cpu")
    before = _addresses(buffer)
    handle = buffer.copy_from({"tensor": np.full(4, 7.0), "values": [ToyValue(np.array([3, 4], np.uint64))]})
    assert handle.query() and handle.event is None
    assert _addresses(buffer) == before
    value = buffer.value
    np.testing.assert_array_equal(value["tensor"], np.full(4, 7.0))
    np.testing.assert_array_equal(value["values"][0].data, [3, 4])
    assert buffer.signature == ValueTreeSignature.from_value(prototype)
    assert buffer.nbytes == value_tree_nbytes(prototype) == 32 + 16
    with pytest.raises(ExecutionInputError, match="value signature"):
        buffer.copy_from({"tensor": np.full(4, 99.0), "values": [ToyValue(np.array([5, 6], np.uint64), level=1)]})
    np.testing.assert_array_equal(buffer.value["tensor"], np.full(4, 7.0))
    buffer.close()
    buffer.close()
    with pytest.raises(ExecutionError, match="closed"):
        buffer.value  # noqa: B018
    with pytest.raises(ExecutionError, match="closed"):
        buffer.copy_from(prototype)


def test_buffer_keeps_gapped_and_negative_strides_exactly():
    example = np.arange(24, dtype=np.int64).reshape(4, 6)[::2, ::-2]
    buffer = ReusableValueBuffer.like(example, device="cpu")
    target = buffer.value
    assert target.strides == example.strides
    np.testing.assert_array_equal(target, example)
    assert ValueTreeSignature.from_value(target) == buffer.signature
    source = (np.arange(24, dtype=np.int64).reshape(4, 6) * 10)[::2, ::-2]
    buffer.copy_from(source)
    np.testing.assert_array_equal(buffer.value, source)


def test_value_returns_fresh_wrappers_around_the_same_arrays():
    buffer = ReusableValueBuffer.like([ToyValue(np.zeros(3, np.uint64))], device="cpu")
    a, b = buffer.value[0], buffer.value[0]
    assert a is not b
    assert a.data is b.data
    a.level = 9  # mutating a wrapper cannot corrupt the buffer
    assert buffer.value[0].level == 0


def test_eager_consumption_of_buffer_value():
    buffer = ReusableValueBuffer.like((np.zeros(5), np.zeros(5)), device="cpu")
    buffer.copy_from((np.arange(5.0), np.full(5, 2.0)))
    x, y = buffer.value
    np.testing.assert_array_equal(x * y, np.arange(5.0) * 2)


def test_like_argument_errors():
    with pytest.raises(ValueError, match="at least one tensor"):
        ReusableValueBuffer.like([[], {}], device="cpu")
    with pytest.raises(TypeError, match="got int at value\\[0\\]"):
        ReusableValueBuffer.like([3], device="cpu")
    base = np.zeros(10)
    with pytest.raises(ValueError, match="Aliased representative storage"):
        ReusableValueBuffer.like((base[:6], base[4:]), device="cpu")
    with pytest.raises(ValueError, match="Aliased"):
        ReusableValueBuffer.like((base, base), device="cpu")
    buffer = ReusableValueBuffer.like((base[:5], base[5:]), device="cpu")  # disjoint views are fine
    assert buffer.nbytes == 80


def test_interleaved_disjoint_views_are_not_aliases():
    """Byte ranges overlap but no element is shared (FHElium bug 7.10: the batch entries of
    one ciphertext were refused as separate inputs)."""
    m = np.arange(32.0).reshape(4, 8)
    batch = np.arange(2 * 3 * 5.0).reshape(2, 3, 5)  # [component, batch, coeff]
    for example in ((m[:, :4], m[:, 4:]), (m[::2], m[1::2]), (m[:, ::2], m[:, 1::2]), (batch[:, 0], batch[:, 1])):
        buffer = ReusableValueBuffer.like(example, device="cpu")
        for target, leaf in zip(buffer.value, example):
            np.testing.assert_array_equal(target, leaf)
        buffer.close()
    for shared in ((m[:, :5], m[:, 4:]), (m[::2], m[::4]), (m[:, ::2], m.T[::2]), (batch[:, 0], batch[0, :2])):
        with pytest.raises(ValueError, match="Aliased"):
            ReusableValueBuffer.like(shared, device="cpu")


def test_pin_memory_needs_a_cpu_target_and_cuda():
    if cuda_unavailable_reason() is None:
        pytest.skip("this test checks the CPU-only error path")
    with pytest.raises(CudaUnavailableError, match="pinned host memory needs a CUDA GPU"):
        ReusableValueBuffer.like(np.zeros(4), device="cpu", pin_memory=True)
    with pytest.raises(CudaUnavailableError, match="needs a CUDA GPU"):
        ReusableValueBuffer.like(np.zeros(4), device="cuda:0")
    with pytest.raises(CudaUnavailableError):
        pin_value_tree([np.zeros(2)])


def test_cpu_buffer_rejects_streams_and_events():
    buffer = ReusableValueBuffer.like(np.zeros(4), device="cpu")
    with pytest.raises(ValueError, match="does not accept a CUDA stream"):
        buffer.copy_from(np.ones(4), stream=object())
    with pytest.raises(ValueError, match="does not accept CUDA events"):
        buffer.copy_from(np.ones(4), wait_for=[object()])
    np.testing.assert_array_equal(buffer.value, np.zeros(4))


def test_buffer_errors_say_what_to_do_next():
    buffer = ReusableValueBuffer.like(np.zeros(4), device="cpu")
    with pytest.raises(ValueError, match="omit stream="):
        buffer.copy_from(np.ones(4), stream=object())
    with pytest.raises(ValueError, match="omit wait_for="):
        buffer.copy_from(np.ones(4), wait_for=object())
    with pytest.raises(ValueError, match="pass device='cpu' or drop pin_memory"):
        ReusableValueBuffer.like(np.zeros(4), device="cuda:0", pin_memory=True)
    with pytest.raises(ValueError, match="at least one array leaf"):
        ReusableValueBuffer.like({}, device="cpu")
    with pytest.raises(ExecutionInputError, match="returned by this buffer's copy_from"):
        buffer.wait_for(ReusableValueBuffer.like(np.zeros(4), device="cpu").copy_from(np.ones(4)))
    buffer.close()
    with pytest.raises(ExecutionError, match="create a new one with ReusableValueBuffer.like"):
        buffer.copy_from(np.ones(4))


def test_cpu_copy_handle_is_complete_and_ignores_stream_ordering():
    buffer = ReusableValueBuffer.like(np.zeros(4), device="cpu")
    handle = buffer.copy_from(np.ones(4))
    assert handle.event is None and handle.query() and handle.done() and not handle.holds_sources
    assert handle.wait_on() is handle
    assert handle.wait_on(object()) is handle  # no event: nothing to enqueue, the stream is not inspected
    handle.synchronize()
    assert handle.bytes_copied == 32 and str(handle.device) == "cpu"
    assert "cpu" in repr(handle)


def test_foreign_copy_handle_is_rejected():
    a = ReusableValueBuffer.like(np.zeros(4), device="cpu")
    b = ReusableValueBuffer.like(np.zeros(4), device="cpu")
    handle = b.copy_from(np.ones(4))
    with pytest.raises(ExecutionInputError, match="belongs to another ReusableValueBuffer"):
        a.wait_for(handle)
    a.wait_for(a.copy_from(np.ones(4)))


@settings(max_examples=60, deadline=None)
@given(spec=tree_specs, seed=st.integers(0, 2**32 - 1))
def test_matching_random_trees_copy_exactly_at_fixed_addresses(spec, seed):
    buffer = ReusableValueBuffer.like(build_tree(spec, seed), device="cpu")
    addresses = _addresses(buffer)
    source = build_tree(spec, seed + 7)
    buffer.copy_from(source)
    assert _addresses(buffer) == addresses
    leaves: list = []
    buffer.signature.collect_leaves(source, "source", leaves)
    for target, src in zip(buffer.storage_arrays(), leaves):
        np.testing.assert_array_equal(target, src)


@settings(max_examples=60, deadline=None)
@given(spec=tree_specs, seed=st.integers(0, 2**32 - 1), where=st.integers(0, 50), what=st.integers(0, 50))
def test_any_single_change_is_rejected_and_leaves_the_buffer_bit_identical(spec, seed, where, what):
    mutated = mutate_spec(spec, where, what)
    assume(mutated is not None)
    candidate = build_tree(mutated, seed + 3)
    example = build_tree(spec, seed)
    assume(topology(candidate) != topology(example))  # an oracle independent of the signature code
    buffer = ReusableValueBuffer.like(example, device="cpu")
    before = _snapshot(buffer)
    with pytest.raises(ExecutionInputError):
        buffer.copy_from(candidate)
    for old, new in zip(before, buffer.storage_arrays()):
        assert old.tobytes() == new.tobytes()


def test_copy_plan_describes_every_non_empty_leaf_exactly():
    example = {"a": np.arange(24, dtype=np.int64).reshape(4, 6)[::2, ::-2], "b": np.zeros((0, 3)), "c": np.ones(5)}
    buffer = ReusableValueBuffer.like(example, device="cpu")
    storages = buffer.storage_arrays()
    plan = buffer.copy_plan()
    assert [entry[0] for entry in plan] == [0, 2]  # the empty leaf "b" needs no copy
    for index, low, offset, span in plan:
        storage = storages[index]
        element0 = storage.__array_interface__["data"][0]
        assert low == element0 - offset
        assert span > 0
    a_index, a_low, a_offset, a_span = plan[0]
    assert a_offset == (3 - 1) * 2 * 8  # reversed last axis: extent 3, stride -2 elements
    assert a_span == ((2 - 1) * 12 + (3 - 1) * 2 + 1) * 8
    buffer.close()
    with pytest.raises(ExecutionError, match="closed"):
        buffer.copy_plan()


def test_cuda_copy_issues_one_memcpy_per_plan_entry(monkeypatch):
    """The CUDA copy path on a fake runtime: sources are read at element 0 minus the offset."""
    import fhelium_cupy.runtime.buffer as buffer_module

    buffer = ReusableValueBuffer.like((np.arange(6.0)[::-1], np.ones((2, 2))), device="cpu")
    calls = []

    class Runtime:
        @staticmethod
        def streamWaitEvent(stream, event, flags):  # noqa: N802 - CUDA name
            calls.append(("wait", stream, event))

        @staticmethod
        def memcpyAsync(dst, src, n, kind, stream):  # noqa: N802 - CUDA name
            calls.append(("copy", dst, src, n, kind, stream))

    class Event:
        def __init__(self, **kwargs):
            pass

        def record(self, stream):
            calls.append(("record", stream.ptr))

    class Device:
        def __init__(self, index):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Stream:
        ptr = 77

    fake = type("cupy", (), {"cuda": type("cuda", (), {"runtime": Runtime, "Event": Event, "Device": Device})})
    monkeypatch.setattr(buffer_module, "cupy_or_none", lambda: fake)
    buffer._device = type(buffer._device)("cuda", 0)  # exercise the CUDA branch without a GPU
    sources = (np.arange(6.0)[::-1] * 3, np.full((2, 2), 5.0))
    buffer._submit(list(sources), Stream(), (11,), non_blocking=True)
    copies = [c for c in calls if c[0] == "copy"]
    assert calls[0] == ("wait", 77, 11) and calls[-1] == ("record", 77)
    assert len(copies) == len(buffer.copy_plan()) == 2
    for (_, dst, src, n, kind, stream), (_index, low, offset, span), source in zip(copies, buffer.copy_plan(), sources):
        assert (dst, n, kind, stream) == (low, span, 4, 77)
        assert src == source.__array_interface__["data"][0] - offset


def test_closing_a_buffer_frees_its_storage_without_waiting_for_the_garbage_collector():
    """A self-calling closure in the template walk once held every buffer's storage in a
    reference cycle: closed buffers kept their memory until the next gc pass."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        for example in (np.zeros(1000), {"a": np.zeros(4), "v": [np.ones(3)]}):
            buffer = ReusableValueBuffer.like(example, device="cpu")
            leaf = buffer.value if isinstance(example, np.ndarray) else buffer.value["a"]
            storage = weakref.ref(leaf)
            del leaf
            buffer.close()
            del buffer
            assert storage() is None
    finally:
        gc.enable()


def test_a_source_with_other_strides_is_refused_not_reinterpreted():
    """Same shape and dtype, other strides: copying the bytes would store other values."""
    buffer = ReusableValueBuffer.like(np.zeros(4), device="cpu")
    with pytest.raises(ExecutionInputError, match="stride"):
        buffer.copy_from(np.arange(8.0)[::2])  # values 0, 2, 4, 6 at stride 2
    np.testing.assert_array_equal(buffer.value, np.zeros(4))
    buffer.copy_from(np.ascontiguousarray(np.arange(8.0)[::2])).synchronize()
    np.testing.assert_array_equal(buffer.value, [0.0, 2.0, 4.0, 6.0])
    buffer.close()


def test_a_source_viewing_another_leaf_of_the_buffer_is_refused_before_any_copy():
    """Copied leaf by leaf, a swap of the buffer's own two leaves copied one into both (the
    first copy overwrote what the second still had to read); a leaf that is exactly its own
    target is a no-op copy and stays allowed."""
    buf = ReusableValueBuffer.like([np.array([1.0, 1.0]), np.array([2.0, 2.0])], device="cpu")
    v = buf.value
    buf.copy_from(v)  # each leaf onto itself
    with pytest.raises(ExecutionInputError, match="shares memory with leaf 1"):
        buf.copy_from([v[1], v[0]])
    assert [x.tolist() for x in buf.value] == [[1.0, 1.0], [2.0, 2.0]]  # nothing was written
    buf.copy_from([v[1].copy(), v[0].copy()])  # copies first: the swap works
    assert [x.tolist() for x in buf.value] == [[2.0, 2.0], [1.0, 1.0]]


@pytest.mark.parametrize("dtype", ["V0", []], ids=["void0", "empty-struct"])
def test_a_dtype_of_item_size_zero_is_a_type_error_not_a_zero_division(dtype):
    leaf = np.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match="item size of 0"):
        ValueTreeSignature.from_value(leaf)
    with pytest.raises(TypeError, match="item size of 0"):
        value_tree_nbytes([leaf])
    buf = ReusableValueBuffer.like([np.zeros(3)], device="cpu")
    with pytest.raises(ExecutionInputError):
        buf.copy_from([leaf])


def test_ndarray_subclasses_other_than_memmap_are_refused(tmp_path):
    """They came back as plain ndarrays from a buffer (np.matrix's * became element-wise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # np.matrix's own warning
        matrix = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    for leaf in (matrix, np.rec.array([(1, 2.0)], dtype=[("a", "i8"), ("b", "f8")])):
        with pytest.raises(TypeError, match="must contain arrays"):
            ReusableValueBuffer.like(leaf, device="cpu")
    mapped = np.memmap(tmp_path / "m.dat", dtype="float64", mode="w+", shape=(3,))
    mapped[:] = (1.0, 2.0, 3.0)
    buf = ReusableValueBuffer.like(mapped, device="cpu")
    assert buf.value.tolist() == [1.0, 2.0, 3.0]


def test_value_keeps_the_example_s_dict_key_order():
    """The signature sorts keys; a callable iterating its dict input (d.values()) must see
    the eager order under capture too. Copies still match by key, in any order."""
    example = {"weights": np.arange(16.0), "bias": np.arange(2.0), "nested": [{"z": np.ones(1), "a": np.zeros(3)}]}
    buffer = ReusableValueBuffer.like(example, device="cpu")
    value = buffer.value
    assert list(value) == ["weights", "bias", "nested"] and list(value["nested"][0]) == ["z", "a"]
    assert [v.shape for v in value.values() if isinstance(v, np.ndarray)] == [(16,), (2,)]
    buffer.copy_from({"nested": [{"a": np.full(3, 7.0), "z": np.full(1, 5.0)}], "bias": np.full(2, 3.0),
                      "weights": np.full(16, 2.0)})
    value = buffer.value
    assert list(value) == ["weights", "bias", "nested"]
    np.testing.assert_array_equal(value["bias"], [3.0, 3.0])
    np.testing.assert_array_equal(value["nested"][0]["a"], [7.0, 7.0, 7.0])
    assert list(ReusableValueBuffer.like({"a": np.ones(1), "b": np.ones(1)}, device="cpu").value) == ["a", "b"]
