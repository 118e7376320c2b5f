"""Every engine operation and compositions against cleartext NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks import Ciphertext, CkksEngine, Plaintext, periodic_message
from fhelium_cupy.errors import StateMismatchError
from tests.helpers.ckks_engines import (
    TOLERANCE,
    centered_difference,
    make_engine,
    matvec_8x8,
    random_message,
    three_special_primes,
)

PRESETS = list(TOLERANCE)


@pytest.fixture(params=PRESETS, scope="module")
def setup(request):
    engine = make_engine(request.param)
    return engine, TOLERANCE[request.param]


def _err(got, want):
    return float(np.max(np.abs(np.asarray(got) - np.asarray(want))))


def test_encrypt_decrypt_round_trip_real_complex_short_and_batched(setup):
    e, tol = setup
    m = random_message(e, 1)
    ct = e.encrypt_message(m)
    assert (ct.level, ct.polynomial_domain, ct.component_count, ct.scale) == (0, "coefficient", 2, e.scale)
    assert _err(e.decrypt_message(ct), m) < tol
    short = random_message(e, 2, complex_values=False, length=10)
    got = e.decrypt_message(e.encrypt_message(short), real=True)
    assert _err(got[:10], short) < tol and _err(got[10:], 0) < tol
    batch = np.stack([random_message(e, 3), random_message(e, 4)])
    ctb = e.encrypt_message(batch, level=1)
    assert ctb.data.shape == (2, 2, e.context.q_count - 1, e.context.ring_degree)
    assert _err(e.decrypt_message(ctb), batch) < tol


def test_encode_decode_round_trip_and_message_inputs(setup):
    e, tol = setup
    m = random_message(e, 5)
    assert _err(e.decode(e.encode(m)), m) < tol
    assert _err(e.decode(e.encode(m, polynomial_domain="coefficient")), m) < tol
    torch = pytest.importorskip("torch")
    t = torch.tensor(m.real)
    assert _err(e.decrypt_message(e.encrypt_message(t), real=True), m.real) < tol


def test_add_subtract_negate_add_plaintext(setup):
    e, tol = setup
    a, b = random_message(e, 6), random_message(e, 7)
    ca, cb = e.encrypt_message(a), e.encrypt_message(b)
    assert _err(e.decrypt_message(e.add(ca, cb)), a + b) < tol
    assert _err(e.decrypt_message(e.subtract(ca, cb)), a - b) < tol
    assert _err(e.decrypt_message(e.negate(ca)), -a) < tol
    pt = e.encode(b, polynomial_domain="coefficient")
    assert _err(e.decrypt_message(e.add_plaintext(ca, pt)), a + b) < tol
    batch = np.stack([a, b, -a])  # one unbatched plaintext broadcast to every entry, as multiply_plaintext does
    summed = e.decrypt_message(e.add_plaintext(e.encrypt_message(batch), pt))
    for i in range(3):
        assert _err(summed[i], batch[i] + b) < tol
    with pytest.raises(StateMismatchError, match="fits neither"):
        e.add_plaintext(e.encrypt_message(batch), e.encode(np.stack([b, b]), polynomial_domain="coefficient"))
    na, nb = e.coefficient_domain_to_ntt_domain(ca), e.coefficient_domain_to_ntt_domain(cb)
    s = e.add(na, nb)
    assert s.polynomial_domain == "ntt"
    assert _err(e.decrypt_message(e.ntt_domain_to_coefficient_domain(s)), a + b) < tol


def test_multiply_plaintext_then_rescale(setup):
    e, tol = setup
    a, b = random_message(e, 8), random_message(e, 9)
    ct = e.coefficient_domain_to_ntt_domain(e.encrypt_message(a))
    prod = e.multiply_plaintext(ct, e.encode(b))
    assert prod.scale == e.scale * e.scale and prod.level == 0
    r = e.rescale_to_next_level(prod)
    assert r.level == 1 and r.prime_ids == e.context.prime_ids(1)
    assert r.scale == e.scale * e.scale / e.context.moduli[0]
    assert _err(e.decrypt_message(r), a * b) < tol


@pytest.mark.parametrize("output_domain", ["coefficient", "ntt"])
def test_multiply_relinearize_rescale(setup, output_domain):
    e, tol = setup
    a, b = random_message(e, 10), random_message(e, 11)
    na = e.coefficient_domain_to_ntt_domain(e.encrypt_message(a))
    nb = e.coefficient_domain_to_ntt_domain(e.encrypt_message(b))
    c3 = e.multiply(na, nb)
    assert c3.component_count == 3
    assert _err(e.decrypt_message(c3), a * b) < tol  # decryption handles 3 components
    c2 = e.relinearize(c3, output_domain=output_domain)
    assert c2.component_count == 2 and c2.polynomial_domain == output_domain
    assert _err(e.decrypt_message(e.rescale_to_next_level(c2)), a * b) < tol


@pytest.mark.parametrize("step", [1, 3, -1, -7, 100, 2047, 2048 + 5])
def test_rotation_follows_numpy_roll(setup, step):
    e, tol = setup
    m = random_message(e, 12)
    ct = e.encrypt_message(m)
    key = e.rotation_key(step)
    assert -e.num_slots // 2 <= key.rotation_step < e.num_slots // 2
    assert _err(e.decrypt_message(e.rotate_with_key(ct, key)), np.roll(m, step)) < tol


def test_rotation_from_and_to_the_ntt_domain_and_at_a_deeper_level(setup):
    e, tol = setup
    m = random_message(e, 13)
    ct = e.coefficient_domain_to_ntt_domain(e.encrypt_message(m, level=1))
    r = e.rotate_with_key(ct, e.rotation_key(-3), output_domain="ntt")
    assert r.polynomial_domain == "ntt" and r.level == 1
    assert _err(e.decrypt_message(r), np.roll(m, -3)) < tol


def test_hoisted_rotations_equal_individual_rotations(setup):
    e, tol = setup
    m = random_message(e, 14)
    ct = e.encrypt_message(m)
    keys = [e.rotation_key(s) for s in (1, 2, -5)]
    rotated = e.rotate_hoisted_with_keys(ct, keys)
    assert len(rotated) == len(keys)
    for key, r in zip(keys, rotated):
        assert _err(e.decrypt_message(r), np.roll(m, key.rotation_step)) < tol


def test_rotation_equals_the_explicit_automorphism_then_key_switch(setup):
    """rotate_with_key / conjugate run in the hoisted form (ModUp of the unrotated c1, the
    permutation applied inside the key switch); bit for bit the textbook order: automorphism of
    both components, ModUp of the rotated c1, key switch, add the rotated c0."""
    e, _ = setup
    be = e.backend
    ct = e.encrypt_message(random_message(e, 17))
    rows = ct.prime_ids
    for key in (e.rotation_key(3), e.rotation_key(-7), e.conjugation_key()):
        rot = be.automorphism(ct.data, key.galois_element, rows, domain="coefficient")
        y = be.keyswitch_from_digits(be.modup(np.ascontiguousarray(rot[1]), rows), key.data, rows)
        want = np.stack([be.add(rot[0], y[0], rows), y[1]])
        got = e.conjugate(ct, key) if key.galois_element == 2 * e.context.ring_degree - 1 else e.rotate_with_key(ct, key)
        np.testing.assert_array_equal(np.asarray(got.data), want)


def test_ntt_domain_key_switch_outputs_are_exactly_the_ntt_of_the_coefficient_outputs(setup):
    """Every key-switching op with output_domain="ntt" (Q rows never leave the NTT domain)
    equals the forward NTT of its coefficient-domain output bit for bit, from either input domain."""
    e, tol = setup
    m = random_message(e, 16)
    ct = e.encrypt_message(m)
    nt = e.coefficient_domain_to_ntt_domain(ct)
    keys = [e.rotation_key(s) for s in (1, -5)]

    def same(coef, ntt):
        assert ntt.polynomial_domain == "ntt"
        np.testing.assert_array_equal(np.asarray(ntt.data), np.asarray(e.coefficient_domain_to_ntt_domain(coef).data))

    for source in (ct, nt):
        same(e.rotate_with_key(source, keys[0]), e.rotate_with_key(source, keys[0], output_domain="ntt"))
        same(e.conjugate(source), e.conjugate(source, output_domain="ntt"))
    c3 = e.multiply(nt, nt)
    same(e.relinearize(c3), e.relinearize(c3, output_domain="ntt"))
    hoisted = e.rotate_hoisted_with_keys(ct, keys, output_domain="ntt")
    for coef, ntt in zip(e.rotate_hoisted_with_keys(ct, keys), hoisted):
        same(coef, ntt)
    assert _err(e.decrypt_message(hoisted[1]), np.roll(m, -5)) < tol
    with pytest.raises(ValueError, match="output_domain"):
        e.rotate_hoisted_with_keys(ct, keys, output_domain="slots")


def test_rotate_hoisted_batch_is_the_stack_of_the_source_and_its_rotations(setup):
    e, tol = setup
    m = random_message(e, 17)
    ct = e.encrypt_message(m)
    keys = [e.rotation_key(s) for s in (2, -1, 3)]
    for domain in ("coefficient", "ntt"):
        got = e.rotate_hoisted_batch(ct, keys, output_domain=domain)
        source = ct if domain == "coefficient" else e.coefficient_domain_to_ntt_domain(ct)
        want = Ciphertext.stack_batch([source] + e.rotate_hoisted_with_keys(ct, keys, output_domain=domain))
        assert got.batch_shape == (4,) and got.polynomial_domain == domain
        np.testing.assert_array_equal(np.asarray(got.data), np.asarray(want.data))
    decrypted = e.decrypt_message(got)
    assert _err(decrypted[2], np.roll(m, -1)) < tol
    assert e.rotate_hoisted_batch(ct, []).batch_shape == (1,)
    with pytest.raises(ValueError, match="output_domain"):
        e.rotate_hoisted_batch(ct, keys, output_domain="slots")


def test_rotate_hoisted_batch_of_a_batched_source_is_per_entry(setup):
    # a batched source [2, B, L, N]: entry (k, b) of the result is entry k of the unbatched
    # call on source entry b (the storage keeps the source's batch axis after the key axis)
    e, _ = setup
    parts = [e.encrypt_message(random_message(e, s)) for s in (21, 22)]
    stacked = Ciphertext.stack_batch(parts)
    keys = [e.rotation_key(s) for s in (1, -2)]
    for domain in ("coefficient", "ntt"):
        got = np.asarray(e.rotate_hoisted_batch(stacked, keys, output_domain=domain).data)
        assert got.shape == (2, 1 + len(keys)) + tuple(np.asarray(stacked.data).shape[1:])
        for b, part in enumerate(parts):
            want = np.asarray(e.rotate_hoisted_batch(part, keys, output_domain=domain).data)
            np.testing.assert_array_equal(got[:, :, b], want)


def test_conjugate(setup):
    e, tol = setup
    m = random_message(e, 15)
    ct = e.encrypt_message(m)
    assert _err(e.decrypt_message(e.conjugate(ct)), np.conj(m)) < tol
    nt = e.coefficient_domain_to_ntt_domain(ct)
    assert _err(e.decrypt_message(e.conjugate(nt, output_domain="ntt")), np.conj(m)) < tol


def test_stack_and_sum_ciphertext_batch(setup):
    e, tol = setup
    ms = [random_message(e, 20 + i) for i in range(4)]
    stacked = Ciphertext.stack_batch([e.encrypt_message(m) for m in ms])
    assert stacked.batch_shape == (4,)
    total = e.sum_ciphertext_batch(stacked)
    assert not total.is_batched
    assert _err(e.decrypt_message(total), sum(ms)) < tol
    pts = Plaintext.stack_batch([e.encode(m) for m in ms])
    assert pts.batch_shape == (4,)


def test_multiply_plaintext_and_sum_is_the_fused_product_and_batch_sum(setup):
    e, tol = setup
    ms = [random_message(e, 30 + i) for i in range(3)]
    ws = [random_message(e, 40 + i) for i in range(3)]
    ct = e.coefficient_domain_to_ntt_domain(Ciphertext.stack_batch([e.encrypt_message(m) for m in ms]))
    pt = Plaintext.stack_batch([e.encode(w) for w in ws])  # NTT/Montgomery form
    fused = e.multiply_plaintext_and_sum(ct, pt)
    unfused = e.sum_ciphertext_batch(e.multiply_plaintext(ct, pt))
    np.testing.assert_array_equal(np.asarray(fused.data), np.asarray(unfused.data))
    assert fused.scale == unfused.scale and not fused.is_batched
    want = sum(m * w for m, w in zip(ms, ws))
    assert _err(e.decrypt_message(e.rescale_to_next_level(fused)), want) < 3 * tol
    with pytest.raises(StateMismatchError, match="batch shape"):
        e.multiply_plaintext_and_sum(ct, pt._with_data(pt.data[:2]))


def test_depth_two_circuit(setup):
    e, tol = setup
    a, b, c = (random_message(e, 30 + i) for i in range(3))
    ntt = e.coefficient_domain_to_ntt_domain
    ab = e.rescale_to_next_level(
        e.relinearize(e.multiply(ntt(e.encrypt_message(a)), ntt(e.encrypt_message(b))), output_domain="ntt")
    )
    cc = ntt(e.encrypt_message(c, level=1, scale=ab.scale))
    abc = e.rescale_to_next_level(e.relinearize(e.multiply(ab, cc), output_domain="ntt"))
    assert abc.level == 2
    want = a * b * c + np.roll(a, 2)
    rotated = e.rotate_with_key(e.encrypt_message(a, level=2, scale=abc.scale), e.rotation_key(2), output_domain="ntt")
    assert _err(e.decrypt_message(e.add(abc, rotated)), want) < tol


def test_realistic_preset_rotation_and_multiplication_use_the_exact_60_bit_path():
    from fhelium_cupy.ckks import CkksEngine

    e = CkksEngine("slots8192-scale40-depth7")
    m = random_message(e, 40, length=64)
    ct = e.coefficient_domain_to_ntt_domain(e.encrypt_message(m, level=5))
    r = e.rotate_with_key(ct, e.rotation_key(-2), output_domain="ntt")
    c2 = e.rescale_to_next_level(e.relinearize(e.multiply(r, ct)))
    want = np.roll(np.pad(m, (0, e.num_slots - 64)), -2) * np.pad(m, (0, e.num_slots - 64))
    assert _err(e.decrypt_message(c2), want) < 1e-6


def _squared_product(e) -> tuple[Ciphertext, np.ndarray]:
    """An NTT-domain CT3 ``a * b`` of two fresh encryptions, and its cleartext."""
    a, b = random_message(e, 30), random_message(e, 31)
    na = e.coefficient_domain_to_ntt_domain(e.encrypt_message(a))
    nb = e.coefficient_domain_to_ntt_domain(e.encrypt_message(b))
    return e.multiply(na, nb), a * b


def _fused_and_two_step(e, entry: str) -> tuple[Ciphertext, Ciphertext, np.ndarray]:
    """``entry(..., rescale=True)`` (one division by P q_0), ``rescale_to_next_level`` of the
    coefficient-domain result of ``entry(...)`` (ModDown, then the division by q_0), and the
    cleartext both decrypt to (real for the matrix-vector product)."""
    if entry == "relinearize":
        c3, want = _squared_product(e)
        return e.relinearize(c3, rescale=True), e.rescale_to_next_level(e.relinearize(c3)), want
    mv = matvec_8x8(e)
    fused = e.linear_transform(mv.ct, mv.ordered, mv.diagonals, rescale=True)
    two_step = e.rescale_to_next_level(
        e.ntt_domain_to_coefficient_domain(e.linear_transform(mv.ct, mv.ordered, mv.diagonals)))
    return fused, two_step, periodic_message(mv.matrix @ mv.x, e.num_slots)


@pytest.mark.parametrize("special_primes", [1, 3])
@pytest.mark.parametrize("entry", ["relinearize", "linear_transform"])
def test_fused_rescale_rounds_once_where_the_two_steps_round_twice(entry, special_primes):
    """``rescale=True`` divides by P q_0 in one rounding: against rescale_to_next_level of the
    coefficient-domain default result, the same level, scale, primes, components and domain,
    and the two differ per coefficient by one integer (the same centered value on every row)
    of at most floor(K / 2) + 1: the fused quotient is within (K + 1) / 2 of the exact one
    (K + 1 centered fractions), the two-step one within 1 / 2 + K / (2 q_0). Both decrypt."""
    e = make_engine("test-n4096-scale40") if special_primes == 1 else three_special_primes()
    assert e.context.p_count == special_primes
    fused, two_step, want = _fused_and_two_step(e, entry)
    assert fused.polynomial_domain == two_step.polynomial_domain == "coefficient"
    assert (fused.level, fused.prime_ids, fused.scale, fused.component_count) == (
        two_step.level, two_step.prime_ids, two_step.scale, 2)
    centered = centered_difference(e, fused, two_step)  # [2, L - 1, N]
    assert (centered == centered[:, :1]).all()  # one integer per coefficient, whatever the row
    assert 1 <= np.abs(centered).max() <= special_primes // 2 + 1  # >= 1: the roundings do differ
    for y in (fused, two_step):
        assert _err(e.decrypt_message(y, real=np.isrealobj(want)), want) < TOLERANCE["test-n4096-scale40"]


@pytest.mark.parametrize("special_primes", [1, 3])
def test_relinearize_with_rescale_in_either_domain_from_either_domain_batched_or_not(special_primes):
    """relinearize(rescale=True)'s NTT output is exactly the NTT of its coefficient output (the
    kept rows never leave the NTT domain), the same from a coefficient-domain CT3, and a
    batch decrypts entry by entry."""
    e = make_engine("test-n4096-scale40") if special_primes == 1 else three_special_primes()
    c3, _ = _squared_product(e)
    fused = e.relinearize(c3, rescale=True)
    fused_ntt = e.relinearize(c3, output_domain="ntt", rescale=True)
    assert fused_ntt.polynomial_domain == "ntt" and fused_ntt.level == fused.level
    assert np.array_equal(fused_ntt.data, e.coefficient_domain_to_ntt_domain(fused).data)
    c3_coef = e.ntt_domain_to_coefficient_domain(c3)
    assert np.array_equal(e.relinearize(c3_coef, rescale=True).data, fused.data)
    a, b = random_message(e, 30), random_message(e, 31)
    batch = e.multiply(e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.stack([a, b]))),
                       e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.stack([b, b]))))
    batched = e.relinearize(batch, output_domain="ntt", rescale=True)
    assert batched.batch_shape == (2,) and batched.level == 1
    assert _err(e.decrypt_message(batched), np.stack([a * b, b * b])) < TOLERANCE["test-n4096-scale40"]


def test_relinearize_with_rescale_validates_before_any_work():
    e = make_engine("test-n4096-scale40")
    m = random_message(e, 32)
    # a product at the last level must fit its one prime: scale 2^20 squared, not 2^40 squared
    top = e.coefficient_domain_to_ntt_domain(e.encrypt_message(m, level=e.context.max_level, scale=2.0**20))
    c3 = e.multiply(top, top)
    with pytest.raises(StateMismatchError, match="last level"):
        e.relinearize(c3, rescale=True)
    with pytest.raises(TypeError, match="rescale"):
        e.relinearize(e.multiply(*(2 * [e.coefficient_domain_to_ntt_domain(e.encrypt_message(m))])), rescale=1)
    assert e.relinearize(c3).level == e.context.max_level  # without the rescale the last level is fine


def test_a_party_holding_only_the_public_key_encrypts_for_the_owner(tmp_path):
    """Client / server: the server loads the client's public key and encrypts with it; it never
    makes a secret of its own, and the client decrypts (a security-audit finding, session 25:
    encrypt used to reach for the engine's own key chain, making a fresh secret)."""
    from fhelium_cupy.ckks import load_value, save_value
    from fhelium_cupy.errors import ForeignContextError, StateMismatchError

    client = make_engine("test-n4096-scale40")
    server = CkksEngine("test-n4096-scale40", insecure=True)
    pk = load_value(save_value(client.keys.public_key, tmp_path / "pk.npz"), engine=server)
    m = random_message(client, 1)
    ct = server.encrypt_message(m, public_key=pk)
    assert server._keys is None and ct.key_id == client.keys.key_id
    np.testing.assert_allclose(client.decrypt_message(ct), m, atol=1e-6)
    pt = server.encode(m, polynomial_domain="coefficient")
    np.testing.assert_allclose(client.decrypt_message(server.encrypt(pt, public_key=pk)), m, atol=1e-6)
    with pytest.raises(StateMismatchError, match="needs a PublicKey"):
        server.encrypt_message(m, public_key=client.rotation_key(1))
    other = CkksEngine("test-n4096-scale30", insecure=True)
    with pytest.raises(ForeignContextError, match="context"):
        other.encrypt_message(m, public_key=pk)
    assert server._keys is None and other._keys is None


def test_a_product_whose_scale_outgrows_the_level_modulus_is_refused():
    """A 2^80 product scale over the last level's one 49-bit prime decrypted to garbage with no
    error (security audit, session 25); multiply, multiply_plaintext and the weighted sum now
    refuse it before any work, naming the fix. At level 0 (129 bits) the same product works."""
    e = make_engine("test-n4096-scale40")
    m = random_message(e, 4)
    last = e.context.max_level
    top = e.coefficient_domain_to_ntt_domain(e.encrypt_message(m, level=last))
    for call in (lambda: e.multiply(top, top), lambda: e.multiply_plaintext(top, e.encode(m, level=last))):
        with pytest.raises(StateMismatchError, match=r"scale 2\^80.0 does not fit the modulus of level"):
            call()
    batch = e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.stack([m, m]), level=last))
    with pytest.raises(StateMismatchError, match="rescale an operand first"):
        e.multiply_plaintext_and_sum(batch, e.encode(np.stack([m, m]), level=last))
    weights = e.encode(np.stack([m, m]), level=last, modulus_basis="QP")  # the docs audit's case
    with pytest.raises(StateMismatchError, match="linear_transform: the product's scale"):
        e.linear_transform(e.encrypt_message(m, level=last), [e.rotation_key(1)], weights)
    low = e.coefficient_domain_to_ntt_domain(e.encrypt_message(m))
    product = e.rescale_to_next_level(e.relinearize(e.multiply(low, low)))
    np.testing.assert_allclose(e.decrypt_message(product), m * m, atol=1e-4)


def test_rotation_keys_checks_every_step_before_the_engine_makes_keys():
    e = CkksEngine("test-n4096-scale40", insecure=True)
    with pytest.raises(TypeError, match="rotation step must be an int"):
        e.rotation_keys([1, "a"])
    assert e._keys is None  # no secret made for a call that was refused

