"""CupyBackend is bit-identical to NumpyBackend on every primitive (needs a CUDA GPU)."""

from __future__ import annotations

import functools

import pytest

from tests.helpers.launches import record_launches
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


@pytest.mark.parametrize("ctx_name", gpu_cases.CONTEXTS)
def test_captured_ntt_and_modup_of_every_component_choice_match_numpy(ctx_name):
    gpu, ref = _backends(ctx_name)
    error = gpu_cases.run_capture_ntt_and_modup(gpu, ref, ctx_name)
    assert error is None, error


@pytest.mark.parametrize("ctx_name", ["n4096", "n16384"])
def test_captured_rotation_replay_equals_eager(ctx_name):
    gpu, _ = _backends(ctx_name)
    error = gpu_cases.run_capture_rotation(gpu, ctx_name)
    assert error is None, error


@pytest.mark.parametrize("ctx_name", ["n4096", "n65536"])
def test_captured_ntt_output_key_switch_with_its_moddown_on_a_side_stream_matches_numpy(ctx_name):
    """Two and four special primes: the ModDown's P rows overlap the Q rows' inner product on a
    side stream (a fork in the graph); every replay on new inputs as NumPy computes it. Both
    take the strided inner product of a bounded grid for the Q rows (no more digits than special
    primes: n4096 has 2 and 2, told of one SM so that the bound is below a row's 16 blocks;
    n65536 at its 6-row test level 2 digits against 4)."""
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend

    _, ref = _backends(ctx_name)
    gpu = CupyBackend(ref.context)  # its own instance: the launch record below stays this test's
    gpu._sm_count = 1 if ctx_name == "n4096" else gpu._sm_count
    rows = gpu_cases._levels(gpu.context, ctx_name)["ks"]
    assert gpu._overlaps_moddown("ntt", 4, len(rows))
    assert gpu._q_rows_kip_blocks(gpu._keyswitch_device(rows)["num_digits"]) > 0
    launched = record_launches(gpu)
    error = gpu_cases.run_capture_keyswitch_ntt(gpu, ref, ctx_name)
    assert error is None, error
    strided = launched.count("keyswitch_inner_product_many_strided")
    assert launched.count("keyswitch_inner_product_many") + strided == 4  # warmup and capture: two launches each
    assert strided == 2


# ModUp through keyswitch_base_convert_bytes_mma (tensor cores): n4096w by default (digits of 9
# and 8 sources of 40 to 47 bits), the other contexts with the source threshold at 1; where the
# transform has column stages, through its _columns form (the NTT's first pass in the same
# kernel: 2 stages at n4096w, 3 at n16384, 4 at n65536, 1 at n8192 with 4096-word chunks)
_BYTES_CASES = sorted(name for name in gpu_cases.CASES
                      if name.startswith(("modup", "keyswitch_from_digits", "keyswitch_linear_transform")))


@functools.cache
def _bytes_backends(ctx_name: str):
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend
    from fhelium_cupy.runtime.kernels import KernelOptions

    name, _, chunks = ctx_name.partition(" ")
    ctx = gpu_cases.context(name)
    options = None if name == "n4096w" else KernelOptions(extra=("-DFHE_BC_BYTES_MIN_SOURCES=1",))
    gpu = CupyBackend(ctx, kernel_options=options, **({"ntt_fill_blocks": 1} if chunks else {}))
    assert gpu._keyswitch_device(tuple(range(ctx.q_count)))["up_bytes"] is not None
    return gpu, gpu_cases.reference(ctx)


@pytest.mark.parametrize("case", _BYTES_CASES)
@pytest.mark.parametrize("ctx_name", ["n4096w", "n16384", "n65536", "n8192 4096-word-chunks"])
def test_modup_on_tensor_cores_matches_numpy_reference_bit_for_bit(ctx_name, case):
    gpu, ref = _bytes_backends(ctx_name)
    error = gpu_cases.run_case(case, gpu, ref, ctx_name.partition(" ")[0])
    assert error is None, f"{case} @ {ctx_name} (tensor-core ModUp): {error}"


def test_captured_rotation_with_tensor_core_modup_replay_equals_eager():
    gpu, _ = _bytes_backends("n4096w")
    error = gpu_cases.run_capture_rotation(gpu, "n4096w")
    assert error is None, error


# The one-prime divisions (the NTT-domain rescale; at N=2^13 and 2^14 the NTT-output ModDown by
# the one special prime) whose column input finishes the divided-out row's inverse NTT
# (ntt_inverse_column_stages_rescale_spread_x2) at each column-stage count: 4 at n16384 (the
# defaults, above), 3 at n8192, 2 at n16384 with 4096-word chunks (ntt_fill_blocks=1)
_DIVISION_CASES = sorted(name for name in gpu_cases.CASES
                         if name.startswith(("rescale_ntt", "keyswitch_from_digits_ntt",
                                             "keyswitch_from_digits_galois_ntt", "keyswitch_from_digits_many_ntt")))
_COLUMN_STAGES = {"n8192": ("n8192", {}, 3), "n16384, 4096-word chunks": ("n16384", {"ntt_fill_blocks": 1}, 2)}
_EVERY_X2 = ("-DFHE_INVERSE_SPREAD=1",)  # (4096-word chunks: twice the threads the default allows)


@functools.cache
def _inverse_spread_backends(setup: str):
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend
    from fhelium_cupy.runtime.kernels import KernelOptions

    ctx_name, options, column_stages = _COLUMN_STAGES[setup]
    ctx = gpu_cases.context(ctx_name)
    gpu = CupyBackend(ctx, kernel_options=KernelOptions(extra=_EVERY_X2), **options)
    L = ctx.q_count
    assert gpu._column_input_fits(2, L) and gpu._inverse_spread_fits(2, L)
    assert gpu.log_n - gpu._chunk_log(2 * L) == column_stages
    launched = record_launches(gpu)
    return gpu, gpu_cases.reference(ctx), ctx_name, launched


@pytest.mark.parametrize("case", _DIVISION_CASES)
@pytest.mark.parametrize("setup", list(_COLUMN_STAGES))
def test_divisions_finishing_the_inverse_ntt_in_their_column_input_match_numpy(setup, case):
    gpu, ref, ctx_name, launched = _inverse_spread_backends(setup)
    launched.clear()
    error = gpu_cases.run_case(case, gpu, ref, ctx_name)
    assert error is None, f"{case} @ {setup}: {error}"
    if "many" not in case:  # (several keys: the _x2 choice depends on the GPU's size)
        assert "ntt_inverse_column_stages_rescale_spread_x2" in launched, case


@pytest.mark.parametrize(("ctx_name", "entries", "log_chunk"),
                         [("n16384", 17, 11), ("n16384", 33, 12), ("n65536", 2, 12)])
def test_f64_chunk_kernels_match_numpy_reference_bit_for_bit(ctx_name, entries, log_chunk):
    """Transforms of rows below 2^45 large enough for the main chunk kernels (not the _v4
    forms) take the _f64 ones, in 2^11- or 2^12-word chunks (N=2^16 always has 2^12: at most
    four column stages): forward and inverse
    bit-identical to NumPy, inputs at the edges of [0, q) included; a batch with a wide
    (60-bit) P row beside them keeps the main kernels."""
    import numpy as np

    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend

    ctx = gpu_cases.context(ctx_name)
    gpu, ref = CupyBackend(ctx), gpu_cases.reference(ctx)
    q_rows = tuple(range(ctx.q_count))
    polys = entries * len(q_rows)
    assert gpu._chunk_log(polys) == log_chunk and not gpu._use_v4(log_chunk, polys)
    rng = np.random.default_rng(45)
    a = gpu_cases.rand(ctx, q_rows, (entries,), rng)
    log = record_launches(gpu, details=True)
    fwd = gpu.to_numpy(gpu.ntt_forward(gpu.asarray(a), q_rows))
    inv = gpu.to_numpy(gpu.ntt_inverse(gpu.asarray(a), q_rows))
    chunk_launches = [(name, block) for name, _, block, _ in log if "chunk" in name]
    block = (1 << log_chunk) >> 3
    assert chunk_launches == [("ntt_forward_chunk_stages_f64", block), ("ntt_inverse_chunk_stages_f64", block)]
    assert gpu_cases.compare(fwd, ref.ntt_forward(a, q_rows), q_rows, ctx) is None
    assert gpu_cases.compare(inv, ref.ntt_inverse(a, q_rows), q_rows, ctx) is None
    mixed = q_rows + (ctx.q_count,)  # a 60-bit P prime among them
    b = gpu_cases.rand(ctx, mixed, (entries,), rng)
    log.clear()
    got = gpu.to_numpy(gpu.ntt_forward(gpu.asarray(b), mixed))
    assert [name for name, *_ in log if "chunk" in name] == ["ntt_forward_chunk_stages"]
    assert gpu_cases.compare(got, ref.ntt_forward(b, mixed), mixed, ctx) is None
