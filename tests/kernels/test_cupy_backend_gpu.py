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


# ModUp through keyswitch_base_convert_bytes_mma (tensor cores): n4096w by default (digits of 9
# and 8 sources of 40 to 47 bits), the other contexts with the source threshold at 1
_BYTES_CASES = sorted(name for name in gpu_cases.CASES
                      if name.startswith(("modup", "keyswitch_from_digits", "keyswitch_linear_transform")))


@functools.cache
def _bytes_backends(ctx_name: str):
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend
    from fhelium_cupy.runtime.kernels import KernelOptions

    ctx = gpu_cases.context(ctx_name)
    options = None if ctx_name == "n4096w" else KernelOptions(extra=("-DFHE_BC_BYTES_MIN_SOURCES=1",))
    gpu = CupyBackend(ctx, kernel_options=options)
    assert gpu._keyswitch_device(tuple(range(ctx.q_count)))["up_bytes"] is not None
    return gpu, gpu_cases.reference(ctx)


@pytest.mark.parametrize("case", _BYTES_CASES)
@pytest.mark.parametrize("ctx_name", ["n4096w", "n16384", "n65536"])
def test_modup_on_tensor_cores_matches_numpy_reference_bit_for_bit(ctx_name, case):
    gpu, ref = _bytes_backends(ctx_name)
    error = gpu_cases.run_case(case, gpu, ref, ctx_name)
    assert error is None, f"{case} @ {ctx_name} (tensor-core ModUp): {error}"


def test_captured_rotation_with_tensor_core_modup_replay_equals_eager():
    gpu, _ = _bytes_backends("n4096w")
    error = gpu_cases.run_capture_rotation(gpu, "n4096w")
    assert error is None, error
