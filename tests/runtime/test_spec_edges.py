"""Spec edges found by the s7 audit: leaves whose bytes are not their values, metadata that
cannot be compared, output errors that are TypeErrors, multi-device examples with an
unindexed target, event sequences, and the names of the ``cuda_graph`` module."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest

from fhelium_cupy.errors import (
    CudaGraphCaptureError,
    CudaGraphInputError,
    CudaGraphOutputError,
    ExecutionInputError,
)
from fhelium_cupy.interop import Device
from fhelium_cupy.runtime import ReusableValueBuffer, ValueTreeSignature
from fhelium_cupy.runtime._output import OutputLeafError, describe_output
from tests.helpers.fake_cupy import FakeArray, build_program, install
from tests.helpers.toy_values import ToyValue

torch = pytest.importorskip("torch")


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch.setattr)


def _host_copy(leaf):
    return leaf.numpy().copy() if isinstance(leaf, torch.Tensor) else np.array(leaf, copy=True)


def _fresh(x):
    return FakeArray(x.shape, x.dtype)


def _lazy_views():
    """Views whose bytes are not their values (torch applies the sign only when reading)."""
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    return {
        "conj": (z.conj(), torch.zeros(2, dtype=torch.complex64), "resolve_conj"),
        "neg": (z.conj().imag, torch.zeros(2), "resolve_neg"),  # an everyday op: imag of a conj view
    }


@pytest.mark.parametrize("kind", ["conj", "neg"])
def test_lazily_conjugated_or_negated_torch_views_are_refused_before_any_copy(kind):
    view, like, fix = _lazy_views()[kind]
    assert view.is_conj() or view.is_neg()
    with pytest.raises(TypeError, match=fix):
        ValueTreeSignature.from_value(view)
    with pytest.raises(TypeError, match=fix):
        ReusableValueBuffer.like((view,), device="cpu")
    buffer = ReusableValueBuffer.like((np.zeros(2, np.float32), like), device="cpu")
    before = [_host_copy(leaf) for leaf in buffer.value]
    with pytest.raises(ExecutionInputError, match=fix):
        buffer.copy_from((np.full(2, 7, np.float32), view))  # leaf 0 is fine and comes first
    for leaf, old in zip(buffer.value, before):
        np.testing.assert_array_equal(_host_copy(leaf), old)  # nothing copied
    buffer.copy_from((np.full(2, 7, np.float32), view.resolve_conj().resolve_neg()))
    np.testing.assert_array_equal(buffer.value[1].numpy(), view.resolve_conj().resolve_neg().numpy())
    buffer.close()


@pytest.mark.parametrize("kind", ["meta", "sparse"])
def test_leaves_without_strided_host_or_cuda_storage_are_refused_before_any_copy(kind):
    bad = torch.zeros(2, 2, device="meta") if kind == "meta" else torch.zeros(2, 2).to_sparse()
    with pytest.raises(TypeError, match="meta" if kind == "meta" else "layout"):
        ValueTreeSignature.from_value(bad)
    buffer = ReusableValueBuffer.like((np.zeros(4, np.float32), torch.zeros(1).expand(2, 2)), device="cpu")
    with pytest.raises(ExecutionInputError):
        buffer.copy_from((np.full(4, 7, np.float32), bad))
    np.testing.assert_array_equal(np.asarray(buffer.value[0]), np.zeros(4, np.float32))
    buffer.close()


def test_odd_byte_strides_are_an_unsupported_leaf():
    odd = np.lib.stride_tricks.as_strided(np.zeros(8, np.uint16), shape=(3,), strides=(3,))
    with pytest.raises(TypeError, match="multiple of its item size"):
        ValueTreeSignature.from_value(odd)


@pytest.mark.parametrize(
    "changes",
    [{"key_id": object()}, {"prime_ids": np.array([0, 1])}],
    ids=["unfreezable-item", "array-item"],
)
def test_metadata_that_cannot_be_compared_is_an_input_mismatch(changes, fake):
    base = dict(level=1, extras=None)
    sig = ValueTreeSignature.from_value(ToyValue(np.zeros(4, np.uint64), **base))
    candidate = ToyValue(np.zeros(4, np.uint64), **{**base, **changes})
    with pytest.raises(ExecutionInputError, match="cannot be compared|differs"):
        sig.validate(candidate)
    buffer = ReusableValueBuffer.like([ToyValue(np.zeros(4, np.uint64), **base)], device="cpu")
    with pytest.raises(ExecutionInputError):
        buffer.copy_from([ToyValue(np.ones(4, np.uint64), **{**base, **changes})])
    assert not np.asarray(buffer.value[0].data).any()
    program = build_program(fake, lambda v: _fresh(v.data), (ToyValue(FakeArray((4,), np.uint64), **base),))
    fake.log = []
    with pytest.raises(CudaGraphInputError):
        program.replay(ToyValue(FakeArray((4,), np.uint64), **{**base, **changes}))
    assert fake.log == []  # nothing copied or launched
    fake.log = None
    # a NumPy integer scalar is its Python kind (as for the signature's type skeleton)
    program.replay(ToyValue(FakeArray((4,), np.uint64), **{**base, "level": np.int64(1)}))
    with pytest.raises(CudaGraphInputError, match="level"):
        program.replay(ToyValue(FakeArray((4,), np.uint64), **{**base, "level": np.int64(2)}))
    program.close()


def test_unsupported_output_is_a_capture_error_that_is_also_a_type_error():
    assert issubclass(CudaGraphOutputError, CudaGraphCaptureError) and issubclass(CudaGraphOutputError, TypeError)
    error = CudaGraphOutputError(stage="warmup", function_name="f", detail="actual=int")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is CudaGraphOutputError and again.stage == "warmup" and str(again) == str(error)
    with pytest.raises(OutputLeafError, match="actual=int"):
        describe_output(3, Device("cuda", 0))
    with pytest.raises(OutputLeafError, match="not on the capture device"):
        describe_output(np.zeros(3), Device("cuda", 0))


def test_examples_on_several_devices_need_an_indexed_target(fake):
    examples = (np.zeros(4, np.float32), FakeArray((4,), np.float32))
    for target in ("cuda", torch.device("cuda"), None):
        with pytest.raises(ValueError, match="indexed target device"):
            ReusableValueBuffer.like(examples, device=target)
    ReusableValueBuffer.like(examples, device="cuda:0").close()


def test_wait_for_takes_any_sequence_of_events(fake):
    program = build_program(fake, _fresh, (FakeArray((4,), np.float32),))
    for events in (collections.deque([fake.cuda.Event()]), [fake.cuda.Event()], (fake.cuda.Event(),)):
        handle = program.copy_inputs_from(FakeArray((4,), np.float32), wait_for=events)
        program.replay_prepared(copy_handle=handle)
    program.close()
    buffer = ReusableValueBuffer.like((np.zeros(2),), device="cpu")
    buffer.copy_from((np.ones(2),), wait_for=collections.deque())  # an empty sequence waits on nothing
    with pytest.raises(ValueError, match="CUDA events"):
        buffer.copy_from((np.ones(2),), wait_for=collections.deque([fake.cuda.Event()]))
    buffer.close()


def test_cuda_graph_module_has_every_name_of_its_spec_page():
    import fhelium_cupy.runtime.cuda_graph as module

    names = ("CudaGraphCaptureStats", "CudaGraphPool", "CudaGraphProgram", "TensorSignature", "ValueSignature",
             "ValueTreeSignature")
    assert set(names) <= set(module.__all__)
    for name in names:
        assert getattr(module, name) is not None


def test_capture_declares_the_spec_overloads_and_tree_kind_is_exported():
    """The spec gives ``capture`` two typed forms (a program from a function, a decorator
    without one), so a type checker tells them apart; ``ValueTreeSignature.kind`` is a
    ``TreeKind``, importable from the runtime package."""
    import inspect
    import typing

    import fhelium_cupy.runtime as runtime
    from fhelium_cupy.runtime import CudaGraphProgram

    forms = typing.get_overloads(CudaGraphProgram.capture.__func__)
    signatures = [inspect.signature(form.__func__) for form in forms]
    assert [str(sig.parameters["function"].annotation) for sig in signatures] == ["Callable[..., _OutputT]", "None"]
    assert [str(sig.return_annotation) for sig in signatures] == [
        "CudaGraphProgram[_OutputT]", "Callable[[Callable[..., _OutputT]], CudaGraphProgram[_OutputT]]"]
    for sig in signatures:  # everything after function keyword-only, with the spec's defaults
        rest = list(sig.parameters.values())[2:]
        keyword, empty = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty
        assert [(q.name, q.kind, q.default) for q in rest] == [
            ("example_inputs", keyword, empty), ("warmup", keyword, 3),
            ("check_input_liveness", keyword, True), ("pool", keyword, None)]
    assert "TreeKind" in runtime.__all__
    assert typing.get_args(runtime.TreeKind) == ("tensor", "value", "list", "tuple", "dict")


def test_container_subclasses_and_bare_example_arrays_are_refused():
    """Buffers and outputs are rebuilt as plain containers (FHElium bug 7.8 erased a
    namedtuple's type silently); a bare array as example_inputs would be split into rows."""
    from collections import OrderedDict, namedtuple

    from fhelium_cupy.runtime import CudaGraphProgram

    Pair = namedtuple("Pair", "a b")
    for tree, name in ((Pair(np.zeros(2), np.zeros(2)), "Pair"), (OrderedDict(x=np.zeros(2)), "OrderedDict"),
                       ([Pair(np.zeros(2), np.zeros(2))], "Pair")):
        with pytest.raises(TypeError, match=f"{name}, a .* subclass"):
            ValueTreeSignature.from_value(tree)
        with pytest.raises(TypeError, match=name):
            ReusableValueBuffer.like(tree, device="cpu")
    with pytest.raises(OutputLeafError, match="Pair, a tuple subclass"):
        describe_output(Pair(None, None), Device("cuda", 0))
    for bare in (np.zeros((3, 4)), {"x": np.zeros(2)}):
        with pytest.raises(TypeError, match=r"example_inputs must be a sequence"):
            CudaGraphProgram.capture(lambda x: x, example_inputs=bare)
