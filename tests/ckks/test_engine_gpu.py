"""CkksEngine on CUDA: every operation bit-identical to the NumPy engine; matvec precision.

The CPU engine makes the keys and the inputs; the CUDA engine receives copies of them
(``.to("cuda")``) and must return exactly the same residues, operation by operation.
"""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks import (
    CkksEngine,
    encode_bsgs_diagonals,
    encode_diagonals,
    matrix_vector,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps,
    required_rotation_steps_bsgs,
)
from tests.helpers.ckks_engines import random_message
from tests.helpers.gpu_memory import replay_over_freed_blocks

pytestmark = pytest.mark.gpu

PRESETS = {"test-n4096-scale40": 1e-6, "slots8192-scale40-depth7": 1e-6}
_PAIRS: dict[str, tuple[CkksEngine, CkksEngine]] = {}


def engines(preset: str) -> tuple[CkksEngine, CkksEngine]:
    """(cpu, cuda) engines sharing one secret key."""
    if preset not in _PAIRS:
        cpu = CkksEngine(preset, device="cpu", insecure=True)
        chain = cpu.generate_keys()
        gpu = CkksEngine(preset, device="cuda", insecure=True)
        gpu.generate_keys(secret_key=chain.secret_key.to("cuda"))
        _PAIRS[preset] = (cpu, gpu)
    return _PAIRS[preset]


def _host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def assert_same(cpu_value, gpu_value):
    """Bit-identical residues and identical metadata."""
    assert type(cpu_value) is type(gpu_value)
    assert dict(cpu_value.value_metadata()) == dict(gpu_value.value_metadata())
    a, b = cpu_value.data, gpu_value.data
    assert type(b).__module__.startswith("cupy"), "the CUDA engine must keep data on the GPU"
    a, b = np.asarray(a), _host(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    mismatch = np.argwhere(a != b)
    assert mismatch.size == 0, f"{mismatch.shape[0]} residues differ, first at {tuple(mismatch[0])}"


def _pair(preset, seed, **kw):
    cpu, gpu = engines(preset)
    ct = cpu.encrypt_message(random_message(cpu, seed), **kw)
    return cpu, gpu, ct, ct.to("cuda")


@pytest.mark.parametrize("preset", PRESETS)
def test_linear_operations_are_bit_identical(preset):
    cpu, gpu, a, ga = _pair(preset, 1)
    b = cpu.encrypt_message(random_message(cpu, 2))
    gb = b.to("cuda")
    assert_same(cpu.add(a, b), gpu.add(ga, gb))
    assert_same(cpu.subtract(a, b), gpu.subtract(ga, gb))
    assert_same(cpu.negate(a), gpu.negate(ga))
    na, gna = cpu.coefficient_domain_to_ntt_domain(a), gpu.coefficient_domain_to_ntt_domain(ga)
    assert_same(na, gna)
    assert_same(cpu.ntt_domain_to_coefficient_domain(na), gpu.ntt_domain_to_coefficient_domain(gna))
    assert_same(cpu.rescale_to_next_level(a), gpu.rescale_to_next_level(ga))
    assert_same(cpu.rescale_to_next_level(na), gpu.rescale_to_next_level(gna))
    batch = type(a).stack_batch([a, b])
    assert_same(cpu.sum_ciphertext_batch(batch), gpu.sum_ciphertext_batch(batch.to("cuda")))


@pytest.mark.parametrize("preset", PRESETS)
def test_multiplications_are_bit_identical(preset):
    cpu, gpu, a, ga = _pair(preset, 3)
    b = cpu.encrypt_message(random_message(cpu, 4))
    na, nb = cpu.coefficient_domain_to_ntt_domain(a), cpu.coefficient_domain_to_ntt_domain(b)
    gna, gnb = na.to("cuda"), nb.to("cuda")
    pt = cpu.encode(random_message(cpu, 5))
    assert_same(cpu.multiply_plaintext(na, pt), gpu.multiply_plaintext(gna, pt.to("cuda")))
    c3, g3 = cpu.multiply(na, nb), gpu.multiply(gna, gnb)
    assert_same(c3, g3)
    relin = cpu.relinearization_key()
    for domain in ("coefficient", "ntt"):
        for rescale in (False, True):
            assert_same(
                cpu.relinearize(c3, relin, output_domain=domain, rescale=rescale),
                gpu.relinearize(g3, relin.to("cuda"), output_domain=domain, rescale=rescale),
            )


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("step", [1, -3, 5])
def test_rotations_and_conjugation_are_bit_identical(preset, step):
    cpu, gpu, a, ga = _pair(preset, 6 + step)
    key = cpu.rotation_key(step)
    assert_same(cpu.rotate_with_key(a, key), gpu.rotate_with_key(ga, key.to("cuda")))
    na = cpu.coefficient_domain_to_ntt_domain(a)
    assert_same(
        cpu.rotate_with_key(na, key, output_domain="ntt"),
        gpu.rotate_with_key(na.to("cuda"), key.to("cuda"), output_domain="ntt"),
    )
    conj = cpu.conjugation_key()
    assert_same(cpu.conjugate(a, conj), gpu.conjugate(ga, conj.to("cuda")))
    keys = [cpu.rotation_key(s) for s in (1, 2, 3)]
    gkeys = [k.to("cuda") for k in keys]
    for domain in ("coefficient", "ntt"):
        want = cpu.rotate_hoisted_with_keys(a, keys, output_domain=domain)
        got = gpu.rotate_hoisted_with_keys(ga, gkeys, output_domain=domain)
        assert len(want) == len(got) == len(keys)
        for c, g in zip(want, got):
            assert_same(c, g)
    for domain in ("coefficient", "ntt"):  # the key switch writes into the strided batch storage
        assert_same(
            cpu.rotate_hoisted_batch(a, keys, output_domain=domain),
            gpu.rotate_hoisted_batch(ga, gkeys, output_domain=domain),
        )
    # a batched source: entries (key, component, batch entry) of the strided storage (the
    # coefficient-domain ModDown once decoded them as if the batch were 1: rows landed in other
    # entries and past the end of the storage)
    from fhelium_cupy.ckks import Ciphertext

    stacked = Ciphertext.stack_batch([a, cpu.encrypt_message(random_message(cpu, 99)), a])
    for domain in ("coefficient", "ntt"):
        assert_same(
            cpu.rotate_hoisted_batch(stacked, keys, output_domain=domain),
            gpu.rotate_hoisted_batch(stacked.to("cuda"), gkeys, output_domain=domain),
        )
    assert_same(  # coefficient-domain input, NTT output (the NTT-domain ModDown, one key)
        cpu.rotate_with_key(a, key, output_domain="ntt"), gpu.rotate_with_key(ga, key.to("cuda"), output_domain="ntt")
    )


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("method", ["cyclic", "cyclic-hoisted", "cyclic-double-hoisted", "bsgs"])
@pytest.mark.parametrize("output_domain", ["coefficient", "ntt"])
def test_matvec_is_bit_identical_and_decrypts_within_precision(preset, method, output_domain):
    cpu, gpu = engines(preset)
    n = 8
    rng = np.random.default_rng(11)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = cpu.encrypt_message(periodic_message(x, cpu.num_slots))
    if method == "bsgs":
        keys = cpu.rotation_keys(required_rotation_steps_bsgs(n))
        diag = encode_bsgs_diagonals(cpu, a)
        run_cpu = matrix_vector_bsgs(ct, engine=cpu, diagonals=diag, rotation_keys=keys, output_domain=output_domain)
        gkeys = {s: k.to("cuda") for s, k in keys.items()}
        run_gpu = matrix_vector_bsgs(ct.to("cuda"), engine=gpu, diagonals=diag.to("cuda"), rotation_keys=gkeys,
                                     output_domain=output_domain)
    else:
        hoisted = method.endswith("hoisted")
        keys = cpu.rotation_keys(required_rotation_steps(n))
        diag = encode_diagonals(cpu, a, modulus_basis="QP" if "double" in method else "Q")
        run_cpu = matrix_vector(ct, engine=cpu, diagonals=diag, rotation_keys=keys, hoisted=hoisted,
                                output_domain=output_domain)
        gkeys = {s: k.to("cuda") for s, k in keys.items()}
        run_gpu = matrix_vector(
            ct.to("cuda"), engine=gpu, diagonals=diag.to("cuda"), rotation_keys=gkeys, hoisted=hoisted,
            output_domain=output_domain,
        )
    assert run_gpu.polynomial_domain == output_domain
    assert_same(run_cpu, run_gpu)
    got = gpu.decrypt_message(run_gpu, real=True)
    error = np.max(np.abs(got - periodic_message(a @ x, gpu.num_slots)))
    assert error < PRESETS[preset], f"max abs error {error:.3e}"


def test_gpu_encrypt_decrypt_round_trip_and_torch_cuda_messages():
    _, gpu = engines("slots8192-scale40-depth7")
    m = random_message(gpu, 21)
    ct = gpu.encrypt_message(m)
    assert type(ct.data).__module__.startswith("cupy")
    assert np.max(np.abs(gpu.decrypt_message(ct) - m)) < 1e-6
    torch = pytest.importorskip("torch", reason="torch is optional")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    tm = torch.from_numpy(m.real.copy()).cuda()
    got = gpu.decrypt_message(gpu.encrypt_message(tm), real=True)
    assert np.max(np.abs(got - m.real)) < 1e-6


def test_loading_keys_into_a_cuda_engine_and_adopting_a_secret_there(tmp_path):
    """load_value(engine=<CUDA engine>) puts a key on the GPU and refuses another secret's label
    (key material is never tested against the secret: a decryption oracle, session 25);
    generate_keys(secret) on the CUDA engine checks the secret's distribution on its backend
    (``engines`` adopted the CPU engine's secret that way)."""
    from fhelium_cupy.ckks import SecretKey, load_value, save_value
    from fhelium_cupy.errors import ForeignKeyError, StateMismatchError

    cpu, gpu = engines("test-n4096-scale40")
    key = cpu.rotation_key(3)
    loaded = load_value(save_value(key, tmp_path / "rk.npz"), engine=gpu)
    assert type(loaded.data).__module__.startswith("cupy")
    np.testing.assert_array_equal(_host(loaded.data), np.asarray(key.data))
    stranger = CkksEngine("test-n4096-scale40", device="cpu", insecure=True)
    stranger.generate_keys()
    path = save_value(stranger.rotation_key(3), tmp_path / "foreign.npz")
    with pytest.raises(ForeignKeyError, match="secret key"):
        load_value(path, engine=gpu)
    sk = gpu.keys.secret_key
    zero = SecretKey(sk.data * 0, prime_ids=sk.prime_ids, context_id=sk.context_id, key_id="zero")
    with pytest.raises(StateMismatchError, match="non-zero"):
        gpu.generate_keys(zero)
    assert gpu.keys.key_id == cpu.keys.key_id


def test_a_graph_keeps_the_default_key_it_read_after_generate_keys():
    """The captured relinearization reads the engine's default key by address. A new key chain
    (``generate_keys``, here adopting the same secret so the old outputs still decrypt) drops
    that key from the engine; the program must hold it while it lives."""
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    engine = CkksEngine("test-n4096-scale40", device="cuda", insecure=True)
    engine.generate_keys()
    m = random_message(engine, 21)

    def square(ct):
        return engine.relinearize(engine.multiply(ct, ct))  # the engine's own relinearization key

    ct = engine.coefficient_domain_to_ntt_domain(engine.encrypt_message(m))
    program = CudaGraphProgram.capture(square, example_inputs=(ct,))
    try:
        engine.generate_keys(secret_key=engine.keys.secret_key)
        got = replay_over_freed_blocks(program, ct)
        np.testing.assert_allclose(engine.decrypt_message(got), m * m, atol=1e-4)
    finally:
        program.close()


def test_a_warmup_0_capture_that_needs_a_table_upload_is_refused_and_publishes_nothing():
    """warmup=0 on an engine whose table cache is empty: the first device table (twiddles, row
    maps, constants) would be built while capturing, and CuPy (>= 14, the package's floor)
    refuses host-to-device uploads during a capture. The capture fails at its capture stage
    with an error that says to warm up, no table it began is published to the cache, and eager
    calls afterwards build their own and stay right."""
    from fhelium_cupy.errors import CudaGraphCaptureError
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    engine = CkksEngine("test-n4096-scale40", device="cuda", insecure=True)
    engine.generate_keys()
    key = engine.rotation_key(3)
    m = random_message(engine, 22)
    ct = engine.encrypt_message(m)
    engine.rotate_with_key(ct, key)  # the kernels are compiled and loaded: only the tables are missing
    engine.backend._cache.clear()

    def rotate(c):
        return engine.rotate_with_key(c, key)

    with pytest.raises(CudaGraphCaptureError, match=r"warmup >= 1") as refused:
        CudaGraphProgram.capture(rotate, example_inputs=(ct,), warmup=0)
    assert refused.value.stage == "capture"
    assert len(engine.backend._cache) == 0
    eager = engine.rotate_with_key(ct, key)  # builds (and publishes) its own tables
    np.testing.assert_allclose(engine.decrypt_message(eager), np.roll(m, 3), atol=1e-4)
    assert len(engine.backend._cache) > 0


def test_capturing_an_encryption_fails_at_the_capture_stage_and_says_why():
    """Encryption draws host randomness: in a graph every replay would reuse one mask. The
    eager warmup encrypts; the capture refuses, names why, and the next capture works."""
    from fhelium_cupy.errors import CudaGraphCaptureError, ExecutionError
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    _, gpu = engines("test-n4096-scale40")
    m = random_message(gpu, 1)
    ct = gpu.encrypt_message(m)

    def add_a_fresh_encryption(x):
        return gpu.add(x, gpu.encrypt_message(m))

    with pytest.raises(CudaGraphCaptureError) as info:
        CudaGraphProgram.capture(add_a_fresh_encryption, example_inputs=(ct,))
    assert info.value.stage == "capture"
    assert isinstance(info.value.__cause__, ExecutionError)
    assert "cannot run inside a CUDA Graph capture" in str(info.value.__cause__)
    with CudaGraphProgram.capture(lambda x: gpu.add(x, x), example_inputs=(ct,)) as program:
        np.testing.assert_allclose(gpu.decrypt_message(program.replay(ct)), 2 * m, atol=1e-6)


def test_a_cuda_engine_without_a_secret_encrypts_under_a_loaded_public_key():
    cpu, _ = engines("test-n4096-scale40")
    server = CkksEngine("test-n4096-scale40", device="cuda", insecure=True)
    m = random_message(cpu, 1)
    ct = server.encrypt_message(m, public_key=cpu.keys.public_key.to("cuda"))
    assert server._keys is None and type(ct.data).__module__.startswith("cupy")
    np.testing.assert_allclose(cpu.decrypt_message(ct.to("cpu")), m, atol=1e-6)


def test_a_flooded_gpu_decryption_adds_one_noise_polynomial_of_sigma_to_the_cpu_phase():
    """The GPU engine's phase equals the CPU engine's; flooding adds one integer polynomial of
    standard deviation sigma (the same in every prime) and keeps the plaintext on the GPU."""
    from fhelium_cupy.ckks import NoiseFlooding

    cpu, gpu = engines("slots8192-scale40-depth7")
    m = random_message(cpu, 31)
    ct = cpu.encrypt_message(m)
    flooding = NoiseFlooding(error_bits=8, queries=64)
    plain = cpu.decrypt(ct)
    flooded = gpu.decrypt(ct.to("cuda"), flooding=flooding)
    assert type(flooded.data).__module__.startswith("cupy")
    assert_same(plain, gpu.decrypt(ct.to("cuda")))
    moduli = np.array([cpu.context.moduli[r] for r in plain.prime_ids], dtype=object)[:, None]
    diff = (_host(flooded.data).astype(object) - plain.data.astype(object)) % moduli
    centered = np.where(diff > moduli // 2, diff - moduli, diff)
    assert (centered == centered[:1]).all()
    assert np.std(centered[0].astype(np.float64)) == pytest.approx(flooding.sigma, rel=0.05)
    predicted = flooding.sigma * np.sqrt(cpu.context.ring_degree / 2) / ct.scale
    got = gpu.decrypt_message(ct.to("cuda"), flooding=flooding)
    assert np.std((got - m).real) == pytest.approx(predicted, rel=0.1)
    assert gpu.measure_error_bits(ct.to("cuda"), m) == pytest.approx(cpu.measure_error_bits(ct, m), abs=1e-9)
