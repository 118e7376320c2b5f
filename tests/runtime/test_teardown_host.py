"""close() after a CUDA error (fake CuPy): every wait that fails is a sticky error here, as
after a faulting kernel. Programs, buffers and pools still release everything and close; the
first error is raised once, and never from ``__exit__`` over the exception that ended the block."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks.values import Ciphertext
from fhelium_cupy.errors import ExecutionError
from fhelium_cupy.runtime import CudaGraphPool
from fhelium_cupy.runtime._teardown import TeardownErrors
from tests.helpers.fake_cupy import FakeArray, build_program, install


class StickyError(RuntimeError):
    """Stands for cudaErrorIllegalAddress: every later wait reports it."""


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch.setattr)


def _ct() -> Ciphertext:
    return Ciphertext(FakeArray((2, 3, 16), np.uint64), level=0, scale=2.0**40, prime_ids=(0, 1, 2),
                      polynomial_domain="ntt", context_id="ctx", key_id="key")


def _add(ct: Ciphertext) -> Ciphertext:
    return ct._with_data(FakeArray(ct.data.shape, ct.data.dtype))


def test_teardown_runs_every_step_and_raises_the_first_error_at_the_end():
    ran = []
    errors = TeardownErrors()
    errors.run(lambda: ran.append(1))
    errors.run(lambda: (_ for _ in ()).throw(StickyError("first")))
    errors.run(lambda: ran.append(2))
    errors.run(lambda: (_ for _ in ()).throw(ValueError("second")))
    assert ran == [1, 2]
    with pytest.raises(StickyError, match="first"):
        errors.raise_first()
    TeardownErrors().raise_first()  # nothing failed: nothing raised


def test_a_program_closes_and_releases_everything_when_its_last_replay_cannot_be_waited_for(fake):
    program = build_program(fake, _add, (_ct(),))
    program.replay(_ct())
    buffer = program._buffer
    fake.sticky = StickyError("illegal address")
    with pytest.raises(StickyError, match="illegal address"):
        program.close()
    assert program.closed and buffer.closed
    assert program._graph is None and program._output is None and program._arena is None  # released
    program.close()  # idempotent: the error was raised once
    with pytest.raises(ExecutionError, match="closed"):
        program.replay(_ct())


def test_exit_never_masks_the_exception_that_ended_the_block(fake):
    program = build_program(fake, _add, (_ct(),))
    with pytest.raises(ValueError, match="user error"), program:
        program.replay(_ct())
        fake.sticky = StickyError("illegal address")
        raise ValueError("user error")
    assert program.closed


def test_a_clean_block_end_still_reports_the_failed_wait(fake):
    program = build_program(fake, _add, (_ct(),))
    with pytest.raises(StickyError):
        with program:
            program.replay(_ct())
            fake.sticky = StickyError("illegal address")
    assert program.closed


def test_a_buffer_with_a_copy_in_flight_closes_and_raises_once(fake):
    program = build_program(fake, _add, (_ct(),))
    buffer = program._buffer
    buffer.copy_from((_ct(),))
    assert buffer._inflight  # a copy not yet waited for
    fake.sticky = StickyError("illegal address")
    with pytest.raises(StickyError):
        buffer.close()
    assert buffer.closed and not buffer._inflight
    buffer.close()


def test_a_pool_closes_every_member_and_its_scratch_when_waits_fail(fake):
    pool = CudaGraphPool(0)
    first = build_program(fake, _add, (_ct(),), pool=pool)
    second = build_program(fake, _add, (_ct(),), pool=pool)
    first.replay(_ct())
    second.replay(_ct())
    fake.sticky = StickyError("illegal address")
    with pytest.raises(StickyError):
        pool.close()
    assert pool.closed and first.closed and second.closed
    pool.close()


def test_a_buffer_s_exit_never_masks_the_exception_that_ended_the_block(fake):
    program = build_program(fake, _add, (_ct(),))
    buffer = program._buffer
    with pytest.raises(ValueError, match="user error"), buffer:
        buffer.copy_from((_ct(),))
        fake.sticky = StickyError("illegal address")
        raise ValueError("user error")
    assert buffer.closed and not buffer._inflight
