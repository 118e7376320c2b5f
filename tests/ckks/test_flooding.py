"""Noise flooding of decryptions: the noise's size against its formula, its freshness, the
measured error against an exact oracle, and refusals that leave nothing changed.

Statistical checks use 2**12 .. 2**18 draws from the OS CSPRNG and slack of many standard
errors (a correct sampler fails them with negligible probability).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fhelium_cupy.ckks import CkksEngine, NoiseFlooding
from fhelium_cupy.ckks.flooding import MAX_FLOODING_SIGMA_BITS
from fhelium_cupy.ckks.sampling import sample_discrete_gaussian_wide
from fhelium_cupy.errors import ForeignKeyError
from tests.helpers.ckks_engines import random_message

PRESET = "test-n4096-scale40"


def fresh_engine() -> CkksEngine:
    """An engine with a secret of its own: flooded decryptions are counted per secret key for
    the process (``FLOODED_DECRYPTIONS``), so each test starts from a count of 0."""
    engine = CkksEngine(PRESET, insecure=True)
    engine.generate_keys()
    return engine


def test_sigma_follows_the_formula_and_fields_are_validated():
    f = NoiseFlooding(error_bits=10, queries=1024)
    assert f.statistical_security == 30
    assert f.sigma == pytest.approx(math.sqrt(12 * 1024) * 2**15 * 2**10, rel=1e-12)
    assert f.sigma_bits == pytest.approx(math.log2(f.sigma), abs=1e-12)
    assert isinstance(NoiseFlooding(error_bits=np.float32(3.5), queries=np.int64(2)).queries, int)
    with pytest.raises(TypeError, match="error_bits"):
        NoiseFlooding(error_bits="10", queries=1)
    with pytest.raises(TypeError, match="queries"):
        NoiseFlooding(error_bits=1, queries=True)
    with pytest.raises(TypeError, match="statistical_security"):
        NoiseFlooding(error_bits=1, queries=1, statistical_security=30.0)
    for bad in (-1.0, math.inf, math.nan, 64.5, 10**400):
        with pytest.raises(ValueError, match="error_bits"):
            NoiseFlooding(error_bits=bad, queries=1)
    for bad in (0, 2**64 + 1):
        with pytest.raises(ValueError, match="queries"):
            NoiseFlooding(error_bits=1, queries=bad)
    for bad in (0, 129, 10**400):
        with pytest.raises(ValueError, match="statistical_security"):
            NoiseFlooding(error_bits=1, queries=1, statistical_security=bad)
    assert f.slot_noise(4096, 2.0**40) == pytest.approx(f.sigma * math.sqrt(2048) / 2.0**40)
    with pytest.raises(ValueError, match="above the largest supported"):
        NoiseFlooding(error_bits=40, queries=2**20, statistical_security=30)  # sigma = 2**66.8


@pytest.mark.parametrize("sigma_bits", [0.0, 10.0, 40.0, MAX_FLOODING_SIGMA_BITS])
def test_the_wide_gaussian_has_its_standard_deviation_and_tail(sigma_bits):
    sigma = 2.0**sigma_bits
    x = sample_discrete_gaussian_wide((2**17,), sigma)
    assert x.dtype == np.int64
    assert abs(x.mean()) < 0.02 * sigma  # > 7 standard errors
    assert x.std() == pytest.approx(sigma, rel=0.02)
    assert np.abs(x).max() <= 9 * sigma + 1
    with pytest.raises(ValueError, match="sigma"):
        sample_discrete_gaussian_wide((4,), 2.0**57)


@pytest.mark.parametrize("sigma", [2.0**50 * 1.37, 2.0**55 * 1.61])
def test_the_wide_gaussian_has_no_low_bit_structure(sigma):
    """No parity bias in any binade and no favoured low bits (the review's attack recovered the
    parity of an error from 1024 flooded decryptions of a float64-rounded Gaussian, whose even
    integers got 0.5625 / 0.625 / 0.75 of the mass in the binades below 2**52)."""
    x = sample_discrete_gaussian_wide((2**18,), sigma)
    magnitude = np.abs(x)
    for k in range(int(math.log2(sigma)) - 2, int(math.log2(sigma)) + 2):
        in_binade = x[(magnitude >= 2**k) & (magnitude < 2 ** (k + 1))]
        assert in_binade.size > 5000
        assert abs(np.mean(in_binade % 2 == 0) - 0.5) < 5 / math.sqrt(in_binade.size)  # 10 standard errors
    counts = np.bincount((x & 63).astype(np.int64), minlength=64)
    expected = x.size / 64
    assert np.all(np.abs(counts - expected) < 8 * math.sqrt(expected))  # every residue mod 64 equally likely


def test_the_wide_gaussian_keeps_its_far_tail():
    """Candidates past about 3.9 sigma (exponent > 11 ln 2) need more than the one word's 11 zero
    bits: their rarer second-word path must keep them at the Gaussian's rate, no more, no less."""
    sigma = 2.0**10
    x = sample_discrete_gaussian_wide((2**20,), sigma)
    for k in (3.5, 4.0, 4.5):
        expected = x.size * math.erfc(k / math.sqrt(2))  # the continuous tail, to within 1e-6 relative
        assert abs(int(np.sum(np.abs(x) >= k * sigma)) - expected) < 5 * math.sqrt(expected) + 2, k


def _phase_difference(engine, a, b) -> np.ndarray:
    """Centred integer coefficients of plaintext residues ``a - b`` (Python ints: exact)."""
    moduli = np.array([engine.context.moduli[r] for r in a.prime_ids], dtype=object)[:, None]
    diff = (np.asarray(a.data).astype(object) - np.asarray(b.data).astype(object)) % moduli
    centered = np.where(diff > moduli // 2, diff - moduli, diff)
    assert (centered == centered[..., :1, :]).all()  # the same integer in every row
    return centered[..., 0, :].astype(np.float64)


def test_a_flooded_decryption_is_the_phase_plus_fresh_noise_of_sigma():
    engine = fresh_engine()
    m = random_message(engine, 1)
    ct = engine.encrypt_message(m)
    flooding = NoiseFlooding(error_bits=6, queries=16)
    plain = engine.decrypt(ct)
    first, second = engine.decrypt(ct, flooding=flooding), engine.decrypt(ct, flooding=flooding)
    d1, d2 = _phase_difference(engine, first, plain), _phase_difference(engine, second, plain)
    assert d1.std() == pytest.approx(flooding.sigma, rel=0.06)  # 4096 draws: std error 1.1%
    assert not np.array_equal(d1, d2)  # fresh noise at every decryption
    assert (first.level, first.scale, first.prime_ids) == (plain.level, plain.scale, plain.prime_ids)
    # the slots carry it as predicted: a real part's standard deviation sigma * sqrt(N / 2) / scale
    got = engine.decrypt_message(ct, flooding=flooding)
    predicted = flooding.slot_noise(engine.context.ring_degree, ct.scale)
    assert np.std((got - m).real) == pytest.approx(predicted, rel=0.1)
    assert np.std((got - m).imag) == pytest.approx(predicted, rel=0.1)
    assert np.max(np.abs(engine.decrypt_message(ct) - m)) < 1e-6  # without flooding, as before
    batched = engine.encrypt_message(np.stack([m, m]))  # one fresh polynomial a batch entry
    noise = _phase_difference(engine, engine.decrypt(batched, flooding=flooding), engine.decrypt(batched))
    assert noise.shape == (2, engine.context.ring_degree) and not np.array_equal(noise[0], noise[1])
    assert noise.std() == pytest.approx(flooding.sigma, rel=0.06)


@pytest.mark.parametrize("batch", [(1,), (3,), (2, 3)])
def test_a_flooded_batch_gets_one_noise_polynomial_an_entry_and_counts_each(batch):
    """Batches whose size is not the component count: the batch was read from the component
    axis, so a batch of 1 decrypted to two entries and a batch of 3 failed to broadcast."""
    engine = fresh_engine()
    m = random_message(engine, 5)
    ct = engine.encrypt_message(np.broadcast_to(m, batch + m.shape).copy())
    flooding = NoiseFlooding(error_bits=6, queries=64)
    noise = _phase_difference(engine, engine.decrypt(ct, flooding=flooding), engine.decrypt(ct))
    entries = math.prod(batch)
    assert noise.shape == batch + (engine.context.ring_degree,)
    assert engine.flooded_decryptions == entries
    flat = noise.reshape(entries, -1)
    assert all(not np.array_equal(flat[0], row) for row in flat[1:])  # fresh a batch entry
    got = engine.decrypt_message(ct, flooding=flooding)
    assert got.shape == batch + m.shape and engine.flooded_decryptions == 2 * entries
    n = engine.coefficient_domain_to_ntt_domain(ct)
    product = engine.multiply(n, n)  # three components
    assert engine.decrypt_message(product, flooding=flooding).shape == batch + m.shape
    assert engine.flooded_decryptions == 3 * entries


def test_measured_error_bits_equal_an_exact_integer_oracle():
    engine = fresh_engine()
    m = random_message(engine, 2)
    ct = engine.encrypt_message(m)
    n = engine.coefficient_domain_to_ntt_domain(ct)
    product = engine.rescale_to_next_level(engine.relinearize(engine.multiply(n, n)))
    for value, want in ((ct, m), (product, m * m)):
        expected = engine.encode(want, level=value.level, scale=value.scale, polynomial_domain="coefficient")
        error = _phase_difference(engine, engine.decrypt(value), expected)
        oracle = math.ceil(2 * math.log2(max(float(np.max(np.abs(error))), 1.0))) / 2  # rounded up to 1/2 bit
        assert engine.measure_error_bits(value, want) == oracle
    fresh, after = engine.measure_error_bits(ct, m), engine.measure_error_bits(product, m * m)
    assert 2 < fresh < 12 and after > fresh  # sigma 3.2 encryption noise; a product adds more
    # a flooding sized from the measurement decodes the product within its predicted noise
    flooding = NoiseFlooding(error_bits=after + 1, queries=4)
    got = engine.decrypt_message(product, flooding=flooding)
    bound = 8 * flooding.sigma * math.sqrt(engine.context.ring_degree) / product.scale
    assert np.max(np.abs(got - m * m)) < bound


def test_refusals_come_first_and_change_nothing():
    engine = fresh_engine()
    m = random_message(engine, 3)
    ct = engine.encrypt_message(m)
    last = engine.encrypt_message(m, level=engine.context.max_level)
    with pytest.raises(TypeError, match="NoiseFlooding"):
        engine.decrypt(ct, flooding=2.0**30)

    class Weaker(NoiseFlooding):
        @property
        def sigma(self) -> float:
            return 1.0

    with pytest.raises(TypeError, match="NoiseFlooding"):
        engine.decrypt(ct, flooding=Weaker(error_bits=6, queries=16))
    tampered = NoiseFlooding(error_bits=6, queries=16)
    object.__setattr__(tampered, "statistical_security", 0)  # past __post_init__
    with pytest.raises(ValueError, match="statistical_security"):
        engine.decrypt(ct, flooding=tampered)
    too_big = NoiseFlooding(error_bits=25, queries=2**10)  # sigma 2**46.8: the last prime has 49 bits
    with pytest.raises(ValueError, match="does not fit the modulus of level"):
        engine.decrypt_message(last, flooding=too_big)
    engine.decrypt(ct, flooding=too_big)  # level 0 holds it
    with pytest.raises(ValueError, match="batch shape"):
        engine.measure_error_bits(ct, np.stack([m, m]))
    stranger = CkksEngine(PRESET, insecure=True)
    with pytest.raises(ForeignKeyError):
        stranger.decrypt(ct, flooding=NoiseFlooding(error_bits=1, queries=1))
    assert stranger._keys is None  # no secret generated by the refused call
    with pytest.raises(ForeignKeyError):
        stranger.measure_error_bits(ct, m)
    assert np.max(np.abs(engine.decrypt_message(ct) - m)) < 1e-6


def test_flooded_decryptions_are_counted_per_key_and_refused_past_their_queries(monkeypatch):
    engine = fresh_engine()
    m = random_message(engine, 4)
    ct, pair = engine.encrypt_message(m), engine.encrypt_message(np.stack([m, m]))
    three = NoiseFlooding(error_bits=6, queries=3)
    assert engine.flooded_decryptions == 0
    engine.decrypt(ct)  # unflooded decryptions are not counted
    engine.decrypt(pair, flooding=three)  # each batch entry counts
    assert engine.flooded_decryptions == 2
    with pytest.raises(ValueError, match="2 flooded decryptions were made .* adds 2, past the 3 queries"):
        engine.decrypt_message(pair, flooding=three)
    assert engine.flooded_decryptions == 2  # the refusal counted nothing
    engine.decrypt_message(ct, flooding=three)
    with pytest.raises(ValueError, match="past the 3 queries"):
        engine.decrypt(ct, flooding=three)
    engine.decrypt(ct, flooding=NoiseFlooding(error_bits=6, queries=4))  # sized for more: allowed
    assert engine.flooded_decryptions == 4
    # another engine holding the same secret shares the count; a new key starts at 0
    twin = CkksEngine(PRESET, insecure=True)
    twin.generate_keys(engine.keys.secret_key)
    assert twin.flooded_decryptions == 4
    with pytest.raises(ValueError, match="past the 4 queries"):
        twin.decrypt(ct, flooding=NoiseFlooding(error_bits=6, queries=4))
    other = fresh_engine()
    assert other.flooded_decryptions == 0

    # a decryption that fails after its reservation counts nothing (no result left it)
    def broken(*args, **kwargs):
        raise RuntimeError("sampler failed")

    monkeypatch.setattr("fhelium_cupy.ckks.engine.sample_discrete_gaussian_wide", broken)
    with pytest.raises(RuntimeError, match="sampler failed"):
        engine.decrypt(ct, flooding=NoiseFlooding(error_bits=6, queries=8))
    assert engine.flooded_decryptions == 4


def test_racing_flooded_decryptions_never_pass_the_queries():
    from fhelium_cupy.ckks.flooding import FloodedDecryptionLedger
    from tests.helpers.threads import run_together

    ledger, flooding = FloodedDecryptionLedger(), NoiseFlooding(error_bits=1, queries=50)
    made = []

    def worker(t: int) -> None:
        for _ in range(20):
            try:
                with ledger.reserve("k", 1, flooding):
                    made.append(t)
            except ValueError:
                pass

    run_together(worker, 8)  # 160 attempts for 50 queries
    assert len(made) == 50 and ledger.count("k") == 50 and ledger.count("other") == 0
