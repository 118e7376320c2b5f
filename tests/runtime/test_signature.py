"""Exact signatures: topology, value state, tree structure and path-qualified errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fhelium_cupy.errors import ExecutionInputError
from fhelium_cupy.runtime import TensorSignature, ValueSignature, ValueTreeSignature
from fhelium_cupy.values import MAPPING_TAG, register_value_type
from tests.helpers.toy_values import ToyValue
from tests.helpers.trees import build_tree, mutate_spec, topology, tree_specs


def test_tensor_signature_records_element_strides_dtype_and_no_device():
    a = np.zeros((3, 4), dtype=np.float32)[:, ::-2]
    sig = TensorSignature.from_tensor(a)
    assert sig.shape == (3, 2)
    assert sig.stride == (4, -2)
    assert sig.dtype == np.float32
    assert sig.layout == "strided"
    assert sig.requires_grad is False
    assert not hasattr(sig, "device")
    assert sig.nbytes == 3 * 2 * 4


def test_tensor_signature_rejects_non_arrays():
    with pytest.raises(TypeError, match="needs a NumPy, CuPy or torch array"):
        TensorSignature.from_tensor([1, 2, 3])


def test_value_signature_sorts_metadata_and_freezes_containers():
    value = ToyValue(data=np.zeros(4, np.uint64), extras={"b": [1, 2], "a": {"z": 1, "y": (3,)}})
    sig = ValueSignature.from_value(value)
    assert sig.type_name == "ToyValue"
    assert sig.schema_version == 1
    keys = [k for k, _ in sig.metadata]
    assert keys == sorted(keys)
    extras = dict(sig.metadata)["extras"]
    # nested mappings are tagged (MAPPING_TAG): never equal to a list of pairs
    assert extras == (MAPPING_TAG, ("a", (MAPPING_TAG, ("y", (3,)), ("z", 1))), ("b", (1, 2)))
    assert sig.tensors == (("data", TensorSignature((4,), (1,), np.dtype(np.uint64), "strided", False)),)
    hash(sig)


def test_value_signature_rejects_unregistered_objects():
    class NotRegistered:
        def value_metadata(self):
            return {}

        def value_tensors(self):
            return {"data": np.zeros(1)}

        def with_value_tensors(self, t):
            return self

    with pytest.raises(TypeError, match="not a registered value type"):
        ValueSignature.from_value(NotRegistered())


@pytest.mark.parametrize("leaf", [1, 2.0, "s", None, object(), {1, 2}])
def test_tree_signature_rejects_unsupported_leaves_naming_the_path(leaf):
    with pytest.raises(TypeError, match=r"got .* at value\[1\]\['k'\]"):
        ValueTreeSignature.from_value([np.zeros(1), {"k": leaf}])


def test_dict_key_order_does_not_change_the_signature_or_validation():
    a = {"x": np.zeros(2), "y": np.ones(3)}
    b = {"y": np.ones(3), "x": np.zeros(2)}
    sig = ValueTreeSignature.from_value(a)
    assert sig == ValueTreeSignature.from_value(b)
    sig.validate(b)
    assert sig.keys == ("x", "y")
    # int keys too: two equal dicts built in another order had unequal signatures
    c, d = {1: np.zeros(2), 2: np.ones(3)}, {2: np.ones(3), 1: np.zeros(2)}
    assert ValueTreeSignature.from_value(c) == ValueTreeSignature.from_value(d)
    assert hash(ValueTreeSignature.from_value(c)) == hash(ValueTreeSignature.from_value(d))
    assert ValueTreeSignature.from_value(d).keys == (1, 2)
    mixed = {2: np.ones(1), "a": np.zeros(1)}  # keys that do not sort together keep their order
    assert ValueTreeSignature.from_value(mixed).keys == (2, "a")


def test_validate_messages_name_path_and_both_sides():
    sig = ValueTreeSignature.from_value((np.zeros((2, 3)), [ToyValue(np.zeros(4, np.uint64), level=1)]))
    with pytest.raises(ExecutionInputError, match=r"source\[0\] tensor signature differs.*shape=\(2, 3\).*shape=\(3, 2\)"):
        sig.validate((np.zeros((3, 2)), [ToyValue(np.zeros(4, np.uint64), level=1)]), path="source")
    with pytest.raises(ExecutionInputError, match=r"value\[1\]\[0\] value signature differs.*'level' expected=1, actual=2"):
        sig.validate((np.zeros((2, 3)), [ToyValue(np.zeros(4, np.uint64), level=2)]))
    with pytest.raises(ExecutionInputError, match=r"value\[1\] length differs from the buffer: expected=1, actual=0"):
        sig.validate((np.zeros((2, 3)), []))
    with pytest.raises(ExecutionInputError, match=r"value\[1\] structure differs from the buffer: expected=list, actual=tuple"):
        sig.validate((np.zeros((2, 3)), (ToyValue(np.zeros(4, np.uint64), level=1),)))
    with pytest.raises(ExecutionInputError, match=r"value\[1\]\[0\] structure differs.*expected=value ToyValue, actual=ndarray"):
        sig.validate((np.zeros((2, 3)), [np.zeros(4, np.uint64)]))


def test_every_mismatch_message_says_what_to_do_next():
    sig = ValueTreeSignature.from_value({"x": np.zeros(3), "v": [ToyValue(np.zeros(4, np.uint64))]})
    candidates = [
        {"x": np.zeros(4), "v": [ToyValue(np.zeros(4, np.uint64))]},  # tensor topology
        {"x": np.zeros(3), "v": [ToyValue(np.zeros(4, np.uint64), level=3)]},  # value metadata
        {"x": np.zeros(3), "v": []},  # length
        {"x": np.zeros(3), "v": (ToyValue(np.zeros(4, np.uint64)),)},  # container kind
        {"x": np.zeros(3)},  # dict keys
        {"x": 1.0, "v": [ToyValue(np.zeros(4, np.uint64))]},  # leaf kind
    ]
    for candidate in candidates:
        with pytest.raises(ExecutionInputError, match="or create a new buffer or capture a new program"):
            sig.validate(candidate)


class _ArrayFreeToy(ToyValue):
    def value_tensors(self):
        return {}


register_value_type(_ArrayFreeToy, type_name="ArrayFreeToy", schema_version=1)


def test_value_without_arrays_is_a_value_error_naming_the_fix():
    with pytest.raises(ValueError, match="ArrayFreeToy at value\\[0\\] has no arrays; its value_tensors"):
        ValueTreeSignature.from_value([_ArrayFreeToy(np.zeros(2, np.uint64))])


def test_key_and_context_identity_are_part_of_the_signature():
    base = ToyValue(np.zeros(4, np.uint64))
    sig = ValueTreeSignature.from_value(base)
    with pytest.raises(ExecutionInputError, match="'key_id' expected='key-a', actual='key-b'"):
        sig.validate(ToyValue(np.zeros(4, np.uint64), key_id="key-b"))
    with pytest.raises(ExecutionInputError, match="'context_id'"):
        sig.validate(ToyValue(np.zeros(4, np.uint64), context_id="ctx-b"))


def test_scale_is_compared_exactly():
    sig = ValueTreeSignature.from_value(ToyValue(np.zeros(4, np.uint64), scale=2.0**40))
    with pytest.raises(ExecutionInputError, match="'scale'"):
        sig.validate(ToyValue(np.zeros(4, np.uint64), scale=2.0**40 * (1 + 2**-52)))


@settings(max_examples=60, deadline=None)
@given(spec=tree_specs, seed=st.integers(0, 2**32 - 1))
def test_random_matching_trees_validate_and_leaves_follow_flattened_order(spec, seed):
    example = build_tree(spec, seed)
    candidate = build_tree(spec, seed + 1)
    sig = ValueTreeSignature.from_value(example)
    assert sig == ValueTreeSignature.from_value(candidate)
    leaves: list = []
    sig.collect_leaves(candidate, "value", leaves)
    assert [TensorSignature.from_tensor(x) for x in leaves] == sig.leaf_signatures()


@settings(max_examples=80, deadline=None)
@given(spec=tree_specs, seed=st.integers(0, 2**32 - 1), where=st.integers(0, 50), what=st.integers(0, 50))
def test_any_single_change_is_rejected(spec, seed, where, what):
    mutated = mutate_spec(spec, where, what)
    assume(mutated is not None)
    example = build_tree(spec, seed)
    sig = ValueTreeSignature.from_value(example)
    candidate = build_tree(mutated, seed)
    # "changed" decided by an oracle independent of the signature code (a signature that
    # ignored some field would otherwise discard exactly the examples that expose it)
    assume(topology(candidate) != topology(example))
    with pytest.raises(ExecutionInputError):
        sig.validate(candidate)


def test_metadata_that_differs_only_in_type_is_a_different_signature():
    exact = ToyValue(np.zeros(4, np.uint64), level=1)
    as_bool = ToyValue(np.zeros(4, np.uint64), level=True)
    as_float = ToyValue(np.zeros(4, np.uint64), level=1.0)  # type: ignore[arg-type]
    assert 1 == True == 1.0  # noqa: E712 - what Python equality alone would accept
    sig = ValueTreeSignature.from_value(exact)
    assert sig != ValueTreeSignature.from_value(as_bool)
    assert sig != ValueTreeSignature.from_value(as_float)
    with pytest.raises(ExecutionInputError, match="'level' expected=1, actual=True"):
        sig.validate(as_bool)
    with pytest.raises(ExecutionInputError, match="'level' expected=1, actual=1.0"):
        sig.validate(as_float)
    # extras=None keeps every item hashable, so validation takes its fast path
    nested = ToyValue(np.zeros(4, np.uint64), prime_ids=(0, 1), extras=None)  # type: ignore[arg-type]
    candidate = ToyValue(np.zeros(4, np.uint64), prime_ids=(0, True), extras=None)  # type: ignore[arg-type]
    assert nested.value_metadata() == candidate.value_metadata()
    with pytest.raises(ExecutionInputError, match="'prime_ids' expected=\\(0, 1\\), actual=\\(0, True\\)"):
        ValueTreeSignature.from_value(nested).validate(candidate)
    ValueTreeSignature.from_value(nested).validate(ToyValue(np.zeros(4, np.uint64), prime_ids=(0, 1), extras=None))  # type: ignore[arg-type]
    sig.validate(ToyValue(np.zeros(4, np.uint64), level=1))


def test_numpy_scalars_in_metadata_count_as_their_python_kind():
    sig = ValueTreeSignature.from_value(ToyValue(np.zeros(4, np.uint64), scale=2.0**40, extras=None))  # type: ignore[arg-type]
    sig.validate(ToyValue(np.zeros(4, np.uint64), scale=np.float64(2.0**40), extras=None))  # type: ignore[arg-type]
    with pytest.raises(ExecutionInputError, match="'scale'"):
        sig.validate(ToyValue(np.zeros(4, np.uint64), scale=np.float64(2.0**41), extras=None))  # type: ignore[arg-type]


def test_tensor_signature_takes_the_spec_s_torch_typed_arguments_all_required():
    torch = pytest.importorskip("torch")
    sig = TensorSignature((4,), (1,), torch.float32, torch.strided, False)
    assert sig == TensorSignature.from_tensor(torch.zeros(4)) == TensorSignature((4,), (1,), np.float32, "strided", False)
    assert sig.dtype == np.dtype(np.float32) and sig.layout == "strided"
    with pytest.raises(TypeError):
        TensorSignature((4,), (1,), np.float32)  # layout and requires_grad are required
    with pytest.raises(ValueError, match="strided"):
        TensorSignature((4,), (1,), torch.float32, torch.sparse_coo, False)
    with pytest.raises(TypeError, match="no NumPy equivalent"):
        TensorSignature((4,), (1,), torch.quint8, torch.strided, False)  # quantized: bytes need a scale


@pytest.mark.parametrize(("field", "value", "error"), [
    ("shape", (2.7,), TypeError), ("shape", (-3,), ValueError), ("stride", (1.5,), TypeError),
    ("requires_grad", "no", TypeError), ("requires_grad", 1, TypeError),
])
def test_tensor_signature_fields_are_checked_not_coerced(field, value, error):
    """2.7 was a dimension of 2, -3 gave negative nbytes, "no" was requires_grad=True."""
    fields = {"shape": (3,), "stride": (1,), "dtype": "float32", "layout": "strided", "requires_grad": False}
    with pytest.raises(error):
        TensorSignature(**{**fields, field: value})
    assert TensorSignature(**{**fields, "shape": (np.int64(3),)}).shape == (3,)  # NumPy integers are integers


def test_dict_keys_are_str_or_int_and_compared_with_their_type():
    """True == 1 == 1.0 made {True: x} validate against {1: x} (its key came back as 1);
    bool, float and other keys are refused, and mixed str/int keys sort the same whatever
    the insertion order."""
    a = np.zeros(2)
    for key in (True, 1.0, (1, 2), None):
        with pytest.raises(TypeError, match="must be str or int"):
            ValueTreeSignature.from_value({key: a})
    sig = ValueTreeSignature.from_value({1: a})
    with pytest.raises(ExecutionInputError, match="dictionary keys differ"):
        sig.validate({True: a})
    from fhelium_cupy.runtime._validate import leaf_collector

    collect = leaf_collector(sig)  # the replay path's compiled check, then the walk that raises
    with pytest.raises(ExecutionInputError, match="dictionary keys differ"):
        collect({True: a})
    assert collect({1: a})[0] is a
    mixed = ValueTreeSignature.from_value({"b": a, 2: a, "a": a, 1: a})
    assert mixed == ValueTreeSignature.from_value({1: a, "a": a, 2: a, "b": a}) and mixed.keys == (1, 2, "a", "b")


def test_nested_metadata_mapping_and_a_list_of_pairs_are_different_states():
    a = ValueTreeSignature.from_value(ToyValue(np.zeros(2), extras={"a": 1}))
    b = ValueTreeSignature.from_value(ToyValue(np.zeros(2), extras=[["a", 1]]))
    assert a != b
    with pytest.raises(ExecutionInputError):
        a.validate(ToyValue(np.zeros(2), extras=[("a", 1)]))
    a.validate(ToyValue(np.ones(2), extras={"a": 1}))


def test_nan_metadata_is_refused_when_described_and_a_mismatch_when_validated():
    """NaN never equals itself: a signature holding it could never match the same value."""
    with pytest.raises(ValueError, match="NaN"):
        ValueTreeSignature.from_value(ToyValue(np.zeros(2), scale=float("nan")))
    sig = ValueTreeSignature.from_value(ToyValue(np.zeros(2)))
    with pytest.raises(ExecutionInputError, match="cannot be compared"):
        sig.validate(ToyValue(np.zeros(2), scale=float("nan")))
