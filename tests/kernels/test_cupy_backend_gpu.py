"""CupyBackend is bit-identical to NumpyBackend on every primitive (needs a CUDA GPU)."""

from __future__ import annotations

import functools

import pytest

from tests.kernels import gpu_cases

pytestmark = pytest.mark.gpu


@functools.cache
def _backends(ctx_name: str):
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend

    ctx = gpu_cases.context(ctx_name)
    return CupyBackend(ctx), gpu_cases.reference(ctx)


@pytest.mark.parametrize("case", sorted(gpu_cases.CASES))
@pytest.mark.parametrize("ctx_name", gpu_cases.CONTEXTS)
def test_cupy_primitive_matches_numpy_reference_bit_for_bit(ctx_name, case):
    gpu, ref = _backends(ctx_name)
    error = gpu_cases.run_case(case, gpu, ref, ctx_name)
    assert error is None, f"{case} @ {ctx_name}: {error}"


@pytest.mark.parametrize("ctx_name", gpu_cases.CONTEXTS)
def test_captured_ntt_forward_replay_equals_eager(ctx_name):
    gpu, _ = _backends(ctx_name)
    error = gpu_cases.run_capture_ntt(gpu, ctx_name)
    assert error is None, error


@pytest.mark.parametrize("ctx_name", ["n4096", "n16384"])
def test_captured_rotation_replay_equals_eager(ctx_name):
    gpu, _ = _backends(ctx_name)
    error = gpu_cases.run_capture_rotation(gpu, ctx_name)
    assert error is None, error
