"""The replay host path on a fake CuPy: compiled validation, copies, events, shared outputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fhelium_cupy.ckks.values import Ciphertext, Plaintext
from fhelium_cupy.errors import CudaGraphInputError, ExecutionInputError
from fhelium_cupy.interop.arrays import data_pointer, leaf_kind
from fhelium_cupy.runtime import ValueTreeSignature
from fhelium_cupy.runtime._validate import _compile, leaf_collector
from fhelium_cupy.values import register_value_type, registered_type_of, value_type_info
from tests.helpers.fake_cupy import FakeArray, build_program, install
from tests.helpers.toy_values import ToyValue
from tests.helpers.trees import build_tree, mutate_spec, tree_specs

SHAPE = (2, 3, 16)


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch.setattr)


def _ct(level: int = 0, *, shape: tuple[int, ...] = SHAPE, **changes) -> Ciphertext:
    fields = dict(level=level, scale=2.0**40, prime_ids=tuple(range(shape[-2])), polynomial_domain="ntt", context_id="ctx", key_id="key")
    fields.update(changes)
    return Ciphertext(FakeArray(shape, np.uint64), **fields)


def _add(ct: Ciphertext) -> Ciphertext:
    return ct._with_data(FakeArray(ct.data.shape, ct.data.dtype))


def _names(calls):
    return [call[0] for call in calls]


# -- the replay sequence ------------------------------------------------------------------


def test_replay_copies_each_leaf_then_launches_and_records(fake):
    program = build_program(fake, _add, (_ct(),))
    source = _ct()
    (_, low, offset, span), = program._buffer.copy_plan()
    calls = fake.calls(lambda: program.replay(source))
    assert _names(calls) == ["getDevice", "memcpyAsync", "graphLaunch", "eventRecord"]
    assert calls[1][1:] == (low, source.data.data.ptr - offset, span, 4, 0)
    program.close()


def test_a_launch_that_fails_after_the_input_copies_still_records_their_event(fake, monkeypatch):
    """The copies were enqueued before the launch raised (runtime audit, session 25): without an
    event, later copies and replays would not order behind them and a host source could be
    released mid-copy. The event is recorded and holds the source."""
    program = build_program(fake, _add, (_ct(),))
    source = _ct()

    def refused(stream):
        raise RuntimeError("launch refused")

    monkeypatch.setattr(program, "_launch", refused)
    fake.log = []  # what fake.calls does, kept through the exception
    try:
        with pytest.raises(RuntimeError, match="launch refused"):
            program.replay(source)
        calls = fake.log
    finally:
        fake.log = None
    assert _names(calls) == ["getDevice", "memcpyAsync", "eventRecord"]
    assert program._events.last is not None
    monkeypatch.undo()
    program.close()


def test_immutable_value_output_is_one_shared_object(fake):
    program = build_program(fake, _add, (_ct(),))
    first = program.replay(_ct())
    second = program.replay_prepared()
    assert first is second is program.output  # a Ciphertext cannot be mutated: sharing is safe
    assert registered_type_of(first).immutable
    program.close()


def test_mutable_value_outputs_stay_fresh_wrappers(fake):
    def scale(v: ToyValue) -> ToyValue:
        return ToyValue(FakeArray(v.data.shape, v.data.dtype), level=v.level + 1, extras=None)  # type: ignore[arg-type]

    program = build_program(fake, scale, (ToyValue(FakeArray((4,), np.int64), extras=None),))  # type: ignore[arg-type]
    first = program.replay(ToyValue(FakeArray((4,), np.int64), extras=None))  # type: ignore[arg-type]
    second = program.replay_prepared()
    assert first is not second and first.data is second.data  # FHElium bug 7.5 stays fixed
    first.level = 99
    assert program.output.level == 1
    program.close()


def test_output_trees_share_exactly_their_immutable_nodes(fake):
    def tree(ct: Ciphertext):
        out = _add(ct)
        return {"pair": (out, None), "list": [out], "array": out.data}

    program = build_program(fake, tree, (_ct(),))
    a, b = program.output, program.replay_prepared()
    assert a is not b and a["list"] is not b["list"]  # dicts and lists are rebuilt
    assert a["pair"] is b["pair"] and a["list"][0] is b["list"][0] and a["array"] is b["array"]
    program.close()


# -- validation before side effects -------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        lambda: _ct(level=1),
        lambda: _ct(scale=2.0**41),
        lambda: _ct(key_id="other"),
        lambda: _ct(context_id="other"),
        lambda: _ct(polynomial_domain="coefficient"),
        lambda: _ct(shape=(2, 3, 32)),
        lambda: _ct()._with_data(FakeArray(SHAPE, np.int64)),
        lambda: _ct()._with_data(FakeArray(SHAPE, np.uint64, strides=(3 * 32 * 8, 32 * 8, 16))),
        lambda: _ct()._with_data(np.zeros((2, 3, 16), np.uint32)),
        lambda: Plaintext(FakeArray((3, 16), np.uint64), level=0, scale=2.0**40, prime_ids=(0, 1, 2), context_id="ctx"),
        lambda: FakeArray(SHAPE, np.uint64),
        lambda: (_ct(),),
    ],
)
def test_a_mismatching_input_raises_before_anything_is_enqueued(fake, bad):
    program = build_program(fake, _add, (_ct(),))
    program.replay(_ct())  # the fast path has seen a good ciphertext
    candidate = bad()
    for attempt in (lambda: program.replay(candidate), lambda: program.copy_inputs_from(candidate)):
        fake.log = []
        with pytest.raises(CudaGraphInputError, match="differs"):
            attempt()
        assert fake.log == []  # no copy, no launch, no event
    fake.log = None
    assert program.replay(_ct()) is program.output  # still usable afterwards
    program.close()


def test_metadata_equal_in_value_but_not_in_type_is_rejected(fake):
    program = build_program(fake, _add, (_ct(),))
    bool_ids = object.__new__(Ciphertext)
    for name in Ciphertext._FIELDS:
        object.__setattr__(bool_ids, name, getattr(_ct(), name))
    object.__setattr__(bool_ids, "prime_ids", (0, True, 2))
    object.__setattr__(bool_ids, "data", FakeArray(SHAPE, np.uint64))
    assert bool_ids.value_metadata() == _ct().value_metadata()
    fake.log = []
    with pytest.raises(CudaGraphInputError, match="prime_ids"):
        program.replay(bool_ids)
    assert fake.log == []
    fake.log = None
    program.close()


def test_numpy_host_sources_and_numpy_scalar_metadata_still_match(fake):
    program = build_program(fake, _add, (_ct(),))
    host = _ct()._with_data(np.zeros(SHAPE, np.uint64))
    calls = fake.calls(lambda: program.replay(host))
    assert calls[1][2] == host.data.__array_interface__["data"][0]
    as_numpy = object.__new__(Ciphertext)  # np.int64 prime ids: the generic walk accepts them
    for name in Ciphertext._FIELDS:
        object.__setattr__(as_numpy, name, getattr(_ct(), name))
    object.__setattr__(as_numpy, "prime_ids", tuple(np.int64(i) for i in range(3)))
    object.__setattr__(as_numpy, "data", FakeArray(SHAPE, np.uint64))
    program.replay(as_numpy)
    program.close()


@settings(max_examples=80, deadline=None)
@given(spec=tree_specs, seed=st.integers(0, 2**32 - 1), frozen=st.booleans())
def test_compiled_check_accepts_matching_trees_with_the_same_leaves(spec, seed, frozen):
    sig = ValueTreeSignature.from_value(build_tree(spec, seed, frozen_metadata=frozen))
    candidate = build_tree(spec, seed + 1, frozen_metadata=frozen)
    expected: list = []
    sig.collect_leaves(candidate, "source", expected)
    fast: list = []
    # trees of arrays only always take the fast path; with value objects, exactly the frozen ones
    assert _compile(sig, frozenset({np.ndarray}))(candidate, fast) is (frozen or not _has_value(spec))
    got = leaf_collector(sig)(candidate)
    assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected))


@settings(max_examples=120, deadline=None)
@given(spec=tree_specs, seed=st.integers(0, 2**32 - 1), where=st.integers(0, 50), what=st.integers(0, 50))
def test_compiled_check_never_accepts_what_the_generic_walk_rejects(spec, seed, where, what):
    mutated = mutate_spec(spec, where, what)
    assume(mutated is not None)
    sig = ValueTreeSignature.from_value(build_tree(spec, seed, frozen_metadata=True))
    candidate = build_tree(mutated, seed, frozen_metadata=True)
    try:
        sig.validate(candidate)
    except ExecutionInputError:
        assert _compile(sig, frozenset({np.ndarray}))(candidate, []) is False
        with pytest.raises(ExecutionInputError):
            leaf_collector(sig)(candidate)


def test_compiled_check_matches_an_empty_leaf_by_shape_and_dtype_whatever_its_strides():
    """A leaf with a zero dimension addresses no element, so its strides mean nothing: the
    compiled check takes any empty NumPy array of the captured shape and dtype (as
    ``TensorSignature.matches`` does), where a non-empty leaf must match its strides too.
    Any other shape, dtype or leaf kind is no match, and the generic walk names the path."""
    captured = {"e": np.ones((2, 3))[:0], "x": np.ones(2)}  # the empty leaf's strides: (24, 8)
    sig = ValueTreeSignature.from_value(captured)
    check = _compile(sig, frozenset({np.ndarray}))
    for empty in (np.zeros((0, 3)), np.empty((0, 3), order="F"), np.ones((3, 6))[:0, ::2]):
        assert empty.shape == (0, 3) and empty.strides != captured["e"].strides
        candidate = {"e": empty, "x": np.zeros(2)}
        out: list = []
        assert check(candidate, out) is True
        assert len(out) == 2 and out[0] is empty and out[1] is candidate["x"]
        got = leaf_collector(sig)(candidate)
        assert len(got) == 2 and got[0] is empty and got[1] is candidate["x"]
    assert check({"e": np.zeros((0, 3)), "x": np.zeros(4)[::2]}, []) is False  # non-empty: strides count
    for bad in (np.zeros((0, 3), np.float32), np.zeros((0, 4)), np.zeros((3, 0)), []):
        candidate = {"e": bad, "x": np.zeros(2)}
        assert check(candidate, []) is False
        with pytest.raises(ExecutionInputError, match=r"source\['e'\]"):
            leaf_collector(sig)(candidate)


def _has_value(spec: dict) -> bool:
    if spec["node"] == "value":
        return True
    if spec["node"] == "array":
        return False
    items = spec["items"].values() if spec["node"] == "dict" else spec["items"]
    return any(_has_value(item) for item in items)


# -- events, copies, pointers -------------------------------------------------------------


def test_replay_events_are_swept_without_per_replay_queries_and_release_sources(fake):
    program = build_program(fake, _add, (_ct(),))
    ring = program._events
    calls = fake.calls(lambda: [program.replay(_ct()) for _ in range(4)])
    assert "eventQuery" not in _names(calls) and ring.busy_count == 4  # sources held: not done yet
    fake.current_stream.synchronize()
    calls = fake.calls(lambda: program.replay(_ct()))
    assert _names(calls).count("eventQuery") == 1 and ring.busy_count == 1  # one query freed all four
    for _ in range(40):  # the device lags: the sweep threshold grows, events are created
        program.replay(_ct())
    assert ring.busy_count == 41 and ring._sweep_at > 4
    calls = fake.calls(lambda: [program.replay_prepared() for _ in range(3)])
    assert _names(calls) == ["getDevice", "graphLaunch", "eventRecord"] * 3  # no sources: the spare event
    assert program._events.last is ring._spare is ring.last
    program.close()
    assert ring.busy_count == 0


def test_prepared_replays_release_the_sources_of_earlier_replays_now_and_then(fake):
    """Only replay() swept: with prepared replays after it, its sources were held until
    close(). Every 64th prepared replay sweeps once (one query), none of the others."""
    program = build_program(fake, _add, (_ct(),))
    ring = program._events
    program.replay(_ct())
    fake.current_stream.synchronize()
    calls = fake.calls(lambda: [program.replay_prepared() for _ in range(63)])
    assert "eventQuery" not in _names(calls) and ring.busy_count == 1
    calls = fake.calls(program.replay_prepared)
    assert _names(calls).count("eventQuery") == 1 and ring.busy_count == 0  # released
    calls = fake.calls(lambda: [program.replay_prepared() for _ in range(100)])
    assert "eventQuery" not in _names(calls)  # nothing held: no sweeps at all
    program.close()


def test_copy_inputs_from_waits_only_on_the_newest_copy_and_prunes_in_order(fake):
    program = build_program(fake, _add, (_ct(),))
    buffer = program._buffer
    fake.current_stream.synchronize()
    handles = [program.copy_inputs_from(_ct()) for _ in range(5)]
    calls = fake.calls(lambda: program.copy_inputs_from(_ct()))
    waits = [call for call in calls if call[0] == "streamWaitEvent"]
    assert waits == [("streamWaitEvent", 0, handles[-1].event.ptr)]  # the newest covers the chain
    assert all(h.holds_sources for h in handles)
    fake.current_stream.synchronize()
    latest = program.copy_inputs_from(_ct())
    assert len(buffer._inflight) == 1 and not any(h.holds_sources for h in handles)
    program.replay_prepared(copy_handle=latest)
    program.close()


def test_a_prepared_copy_on_the_replay_s_own_stream_needs_no_event_wait(fake):
    """Stream order already puts the copy before the launch: replay_prepared(copy_handle=) and a
    later replay() skip the wait on its event there, and keep it for a copy on another stream."""
    program = build_program(fake, _add, (_ct(),))
    fake.current_stream.synchronize()
    handle = program.copy_inputs_from(_ct())
    calls = fake.calls(lambda: program.replay_prepared(copy_handle=handle))
    assert _names(calls) == ["getDevice", "graphLaunch", "eventRecord"]
    other = fake.cuda.Stream()
    handle = program.copy_inputs_from(_ct(), stream=other)
    calls = fake.calls(lambda: program.replay_prepared(copy_handle=handle))
    assert [c for c in calls if c[0] == "streamWaitEvent"] == [("streamWaitEvent", 0, handle.event.ptr)]
    program.copy_inputs_from(_ct())  # current stream, then a replay() with new inputs
    calls = fake.calls(lambda: program.replay(_ct()))
    assert "streamWaitEvent" not in _names(calls)
    handle = program.copy_inputs_from(_ct(), stream=other)
    calls = fake.calls(lambda: program.replay(_ct()))
    assert ("streamWaitEvent", 0, handle.event.ptr) in calls  # write-after-write across streams
    program.close()


def test_the_per_thread_default_stream_always_waits_for_a_prepared_copy(monkeypatch):
    """Handle 2 is a different stream in every host thread: its copy is never taken for in order."""
    fake = install(monkeypatch.setattr, current_stream_ptr=2)
    program = build_program(fake, _add, (_ct(),))
    handle = program.copy_inputs_from(_ct())
    calls = fake.calls(lambda: program.replay_prepared(copy_handle=handle))
    assert ("streamWaitEvent", 2, handle.event.ptr) in calls
    program.close()


def test_data_pointer_and_leaf_kind_are_cached_per_class(fake):
    array = FakeArray(SHAPE, np.uint64)
    assert leaf_kind(array) == "cupy" and data_pointer(array) == array.data.ptr
    host = np.arange(6)[::-1]
    assert leaf_kind(host) == "numpy" and data_pointer(host) == host.__array_interface__["data"][0]
    assert leaf_kind([1, 2]) is None and leaf_kind(3) is None


# -- registry -----------------------------------------------------------------------------


def test_immutable_flag_is_validated_and_identical_registration_keeps_the_entry():
    entry = value_type_info(Ciphertext)
    assert entry.immutable and not value_type_info(ToyValue).immutable
    register_value_type(Ciphertext, type_name="ckks.Ciphertext", schema_version=1, immutable=True)
    assert value_type_info(Ciphertext) is entry
    with pytest.raises(TypeError, match="immutable must be a bool"):
        register_value_type(Ciphertext, type_name="ckks.Ciphertext", immutable=1)  # type: ignore[arg-type]


# -- the GPU breakdown script, run on the fake ----------------------------------------------


def test_breakdown_script_runs_end_to_end_on_the_fake(tmp_path):
    import json
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    out = tmp_path / "nested" / "breakdown.json"
    args = ["--fake", "--runs", "40", "--warmup", "5", "--cold-runs", "10", "--json", str(out)]
    done = subprocess.run([sys.executable, str(root / "bench" / "replay_host_breakdown.py"), *args], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    entry = json.loads(out.read_text())["programs"]["add"]
    assert entry["checks"] == {"mismatch_rejected": True, "borrowed_output_shared": True}
    for mode, ops in (("warm", 5), ("cold", 5), ("parts", 7)):
        assert len(entry[mode]) == ops and all("median_us" in row for row in entry[mode].values()), entry[mode]


# -- an input copy that fails partway (audit, session 30) -------------------------------------


class _FailingSecondCopy:
    """``memcpyAsync`` that enqueues (logs) every copy and raises on the second one once armed."""

    def __init__(self, original):
        self.original, self.armed, self.count = original, False, 0

    def __call__(self, *args):
        self.original(*args)
        if self.armed:
            self.count += 1
            if self.count == 2:
                raise RuntimeError("cudaErrorInvalidValue (injected)")


def _pair():
    return FakeArray((4,), np.float32), FakeArray((4,), np.float32)


def _first(a, b):
    return FakeArray(a.shape, a.dtype)


def test_a_replay_whose_copies_fail_partway_is_ordered_and_supersedes_the_prepared_handle(fake, monkeypatch):
    """The copies enqueued before the failure still write the inputs: later copies must order
    behind them (an event recorded, the sources kept), and the prepared handle no longer
    describes the payload."""
    failing = _FailingSecondCopy(fake.cuda.runtime.memcpyAsync)
    monkeypatch.setattr(fake.cuda.runtime, "memcpyAsync", staticmethod(failing))
    program = build_program(fake, _first, _pair())
    other = fake.cuda.Stream()
    handle = program.copy_inputs_from(*_pair(), stream=other)
    before = program._events.last
    failing.armed = True
    with pytest.raises(RuntimeError, match="injected"):
        program.replay(*_pair())
    failing.armed = False
    event = program._events.last
    assert event is not None and event is not before  # recorded behind the enqueued copy
    with pytest.raises(CudaGraphInputError, match="latest CopyHandle"):
        program.replay_prepared(copy_handle=handle)
    calls = fake.calls(lambda: program.copy_inputs_from(*_pair(), stream=other))
    assert ("streamWaitEvent", other.ptr, event.ptr) in calls  # the next write waits for them
    program.close()


def test_a_prepared_copy_that_fails_partway_retires_the_earlier_handle(fake, monkeypatch):
    failing = _FailingSecondCopy(fake.cuda.runtime.memcpyAsync)
    monkeypatch.setattr(fake.cuda.runtime, "memcpyAsync", staticmethod(failing))
    program = build_program(fake, _first, _pair())
    handle = program.copy_inputs_from(*_pair())
    failing.armed = True
    with pytest.raises(RuntimeError, match="injected"):
        program.copy_inputs_from(*_pair())
    failing.armed = False
    with pytest.raises(CudaGraphInputError, match="latest CopyHandle"):
        program.replay_prepared(copy_handle=handle)  # part of its payload was overwritten
    fresh = program.copy_inputs_from(*_pair())
    program.replay_prepared(copy_handle=fresh)
    program.close()


def test_an_input_viewing_the_program_s_input_storage_is_refused_and_the_handle_kept(fake):
    """Swapping the program's own two input leaves would copy one into both; the refusal is a
    CudaGraphInputError before anything is written, and the outstanding handle stays valid."""
    program = build_program(fake, lambda a, b: a, (FakeArray((4, 8), np.uint64), FakeArray((4, 8), np.uint64)))
    fake.current_stream.synchronize()
    handle = program.copy_inputs_from(FakeArray((4, 8), np.uint64), FakeArray((4, 8), np.uint64))
    a, b = program._buffer.value
    with pytest.raises(CudaGraphInputError, match="shares memory"):
        program.copy_inputs_from(b, a)
    assert program._latest_copy is handle
    program.replay_prepared(copy_handle=handle)
    program.close()


def test_replay_refuses_an_input_viewing_another_slot_of_the_input_storage(fake):
    """replay() copies leaf by leaf too: a borrowed output that views input a, passed as input
    b, is refused before anything is enqueued; passed in its own slot it is a no-op copy."""
    program = build_program(fake, lambda a, b: a, (FakeArray((4, 8), np.uint64), FakeArray((4, 8), np.uint64)))
    fake.current_stream.synchronize()
    out = program.replay(FakeArray((4, 8), np.uint64), FakeArray((4, 8), np.uint64))
    a, _ = program._buffer.value
    assert out.data.ptr == a.data.ptr  # the output views input slot a
    before = program._events.last

    def refused() -> None:
        with pytest.raises(CudaGraphInputError, match="shares memory with leaf 0"):
            program.replay(FakeArray((4, 8), np.uint64), out)

    assert fake.calls(refused) == []  # nothing enqueued, waited on or launched
    assert program._events.last is before
    program.replay(out, FakeArray((4, 8), np.uint64))  # exactly its own slot: allowed
    assert program._events.last is not before
    program.close()


def test_a_consumed_handle_is_named_as_such_and_a_foreign_one_is_not(fake):
    """The spec: replay_prepared consumes its handle. Passing it again says so and how to
    replay the payload again; a handle of another program keeps the plain message."""
    program = build_program(fake, _first, _pair())
    other = build_program(fake, _first, _pair())
    handle = program.copy_inputs_from(*_pair())
    program.replay_prepared(copy_handle=handle)
    with pytest.raises(CudaGraphInputError, match="consumed by a replay"):
        program.replay_prepared(copy_handle=handle)
    program.replay_prepared()  # the current payload again
    foreign = other.copy_inputs_from(*_pair())
    with pytest.raises(CudaGraphInputError, match="latest CopyHandle") as caught:
        program.replay_prepared(copy_handle=foreign)
    assert "consumed" not in str(caught.value)
    other.replay_prepared(copy_handle=foreign)
    program.close()
    other.close()
