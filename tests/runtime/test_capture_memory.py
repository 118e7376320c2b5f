"""What a capture that fails, a closed program and a pool hold, on the CPU (``fake_capture``):
the spec's "leaves no memory held" while the caller still holds the exception, and after
close() (audit, session 30)."""

from __future__ import annotations

import gc

import pytest

from fhelium_cupy.errors import CudaGraphCaptureError
from fhelium_cupy.runtime import CudaGraphPool, CudaGraphProgram, _capture
from tests.helpers.fake_capture import LIVE, device_array, held_since, install


@pytest.fixture
def fake(monkeypatch):
    gc.collect()
    return install(monkeypatch.setattr)


def _failing(stage: str):
    calls = {"n": 0}

    def fn(x):
        calls["n"] += 1  # call 1: warmup, call 2: capture
        device_array((1024,))  # a temporary
        if (stage, calls["n"]) in (("warmup", 1), ("capture", 2)):
            raise RuntimeError(f"{stage} failed (injected)")
        return device_array(x.shape)
    return fn


def _buffers(monkeypatch) -> list:
    """Every ReusableValueBuffer the capture makes, in order: the program's own first, then
    the warmup's fresh ones."""
    made: list = []
    like = _capture.ReusableValueBuffer.like

    def recording(*args, **kwargs):
        made.append(like(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(_capture.ReusableValueBuffer, "like", staticmethod(recording))
    return made


@pytest.mark.parametrize("stage", ["warmup", "capture", "first replay"])
def test_a_failed_capture_holds_nothing_while_its_exception_is_kept(fake, monkeypatch, stage):
    buffers = _buffers(monkeypatch)
    x = device_array((4,))
    before = set(LIVE)
    fake.fail_launch = stage == "first replay"
    gc.disable()  # refcounts only: what the exception itself keeps alive
    try:
        with pytest.raises(CudaGraphCaptureError) as caught:
            CudaGraphProgram.capture(_failing(stage), example_inputs=(x,), warmup=1)
        assert caught.value.stage == stage and not fake.capturing and buffers[0].closed
        if stage == "first replay":  # (an earlier stage's frames are the user's function's, kept as Python keeps them)
            assert held_since(before) == []  # the captured output's arena chunk, the input storage: released
        del caught
        assert held_since(before) == []
    finally:
        gc.enable()


@pytest.mark.parametrize("where", ["memory_snapshot", "EventRing"])
def test_a_failure_after_the_first_replay_is_a_capture_error_that_holds_nothing(fake, monkeypatch, where):
    """The stats' snapshot and the program's construction ran outside the stage's cleanup: a
    failure there left the input buffer and the arena open and escaped as the raw error."""
    import fhelium_cupy.runtime.cuda_graph as cuda_graph

    buffers = _buffers(monkeypatch)

    def fails(*args, **kwargs):
        raise RuntimeError(f"cudaErrorMemoryAllocation in {where} (injected)")

    monkeypatch.setattr(_capture if where == "memory_snapshot" else cuda_graph, where, fails)
    x = device_array((4,))
    before = set(LIVE)
    gc.disable()
    try:
        with pytest.raises(CudaGraphCaptureError, match=where) as caught:
            CudaGraphProgram.capture(lambda v: device_array(v.shape), example_inputs=(x,), warmup=1)
        assert caught.value.stage == "first replay" and buffers[0].closed
        assert held_since(before) == []
    finally:
        gc.enable()


def test_an_interrupt_during_capture_is_cleaned_up_and_passed_on(fake, monkeypatch):
    buffers = _buffers(monkeypatch)
    calls = {"n": 0}

    def fn(x):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return device_array(x.shape)

    with pytest.raises(KeyboardInterrupt):
        CudaGraphProgram.capture(fn, example_inputs=(device_array((4,)),), warmup=1)
    assert buffers[0].closed and not fake.capturing


def test_close_releases_torch_views_of_the_input_storage(fake, monkeypatch):
    """The program kept the buffer's torch views (they hold the storage through DLPack) after
    close(); only dropping the program freed the input storage."""
    torch = pytest.importorskip("torch")
    import fhelium_cupy.runtime.buffer as buffer
    from tests.helpers.fake_cupy import FakeArray, build_program

    wrap_like = buffer.wrap_like

    def torch_view(storage, kind, **kwargs):
        if kind == "torch" and isinstance(storage, FakeArray):  # torch.from_dlpack's hold, simulated
            tensor = torch.empty(storage.shape, dtype=torch.float64)
            tensor._dlpack_owner = storage
            return tensor
        return wrap_like(storage, kind, **kwargs)

    monkeypatch.setattr(buffer, "wrap_like", torch_view)
    before = set(LIVE)
    program = build_program(fake, lambda v: device_array((4,)), (torch.zeros(512, dtype=torch.float64),))
    assert ("pool", 4096) in held_since(before)  # the input storage
    program.close()
    assert ("pool", 4096) not in held_since(before)


def test_a_pool_holds_about_its_largest_member_when_that_member_is_captured_first(fake):
    """Scratch chunks never merge (CudaGraphPool's docstring): captured largest first, the
    members share one chunk; in increasing size each needs a chunk of its own."""
    x = device_array((4,))

    def temporaries(mib):
        def fn(v):
            device_array(((mib << 20) // 8,))
            return device_array(v.shape)
        return fn

    reserved = {}
    for order, sizes in (("largest first", [7, 5, 3, 1]), ("increasing", [1, 3, 5, 7])):
        pool = CudaGraphPool(0)
        for mib in sizes:
            CudaGraphProgram.capture(temporaries(mib), example_inputs=(x,), warmup=1, pool=pool)
        reserved[order] = pool.scratch_reserved_bytes >> 20
        pool.close()
    assert reserved["largest first"] == 8 < reserved["increasing"]  # (7 MiB of temporaries, 1 MiB chunk rounding)
