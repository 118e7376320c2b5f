"""Mismatched values, foreign keys and contexts are rejected before computing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fhelium_cupy.ckks import CkksEngine
from fhelium_cupy.errors import CudaUnavailableError, ForeignContextError, ForeignKeyError, StateMismatchError
from tests.helpers.ckks_engines import make_engine, random_message


@pytest.fixture(scope="module")
def e():
    return make_engine("test-n4096-scale40")


@pytest.fixture(scope="module")
def other_key_engine():
    engine = CkksEngine("test-n4096-scale40", insecure=True)
    engine.generate_keys()
    return engine


def test_state_mismatches_raise_state_mismatch_error(e):
    m = random_message(e, 1)
    ct = e.encrypt_message(m)
    ntt = e.coefficient_domain_to_ntt_domain(ct)
    deeper = e.encrypt_message(m, level=1)
    other_scale = e.encrypt_message(m, scale=2.0**35)
    with pytest.raises(StateMismatchError, match="levels"):
        e.add(ct, deeper)
    with pytest.raises(StateMismatchError, match="scales"):
        e.add(ct, other_scale)
    with pytest.raises(StateMismatchError, match="domains"):
        e.add(ct, ntt)
    with pytest.raises(StateMismatchError, match="ntt-domain"):
        e.multiply(ct, ct)
    with pytest.raises(StateMismatchError, match="ntt-domain"):
        e.multiply_plaintext(ct, e.encode(m))
    with pytest.raises(StateMismatchError, match="prepare_plaintext_for_multiplication"):
        e.multiply_plaintext(ntt, e.encode(m, polynomial_domain="coefficient"))
    with pytest.raises(StateMismatchError, match="levels"):
        e.multiply_plaintext(ntt, e.encode(m, level=1))
    c3 = e.multiply(ntt, ntt)
    with pytest.raises(StateMismatchError, match="components"):
        e.rotate_with_key(c3, e.rotation_key(1))
    with pytest.raises(StateMismatchError, match="components"):
        e.relinearize(ntt)
    with pytest.raises(StateMismatchError, match="shapes"):
        e.add(c3, e.multiply_plaintext(ntt, e.encode(m)))
    with pytest.raises(StateMismatchError, match="RotationKey"):
        e.rotate_with_key(ct, e.relinearization_key())
    with pytest.raises(StateMismatchError, match="RelinearizationKey"):
        e.relinearize(c3, e.rotation_key(1))
    with pytest.raises(StateMismatchError, match="batched"):
        e.sum_ciphertext_batch(ct)
    with pytest.raises(StateMismatchError, match="last level"):
        e.rescale_to_next_level(e.encrypt_message(m, level=e.max_level))
    with pytest.raises(StateMismatchError, match="expects a Ciphertext"):
        e.add(ct, e.encode(m))
    with pytest.raises(StateMismatchError, match="ntt-domain"):
        e.ntt_domain_to_coefficient_domain(ct)


@pytest.mark.parametrize("domain", ["NTT", "bogus", ""])
def test_unknown_output_domain_is_rejected_before_any_key_switch(e, monkeypatch, domain):
    m = random_message(e, 4)
    ct = e.encrypt_message(m)
    ntt = e.coefficient_domain_to_ntt_domain(ct)
    c3 = e.multiply(ntt, ntt)

    def no_modup(*args, **kwargs):
        raise AssertionError("key switching started before output_domain was checked")

    monkeypatch.setattr(e.backend, "modup", no_modup)
    with pytest.raises(ValueError, match="relinearize: output_domain must be 'coefficient' or 'ntt'"):
        e.relinearize(c3, output_domain=domain)
    with pytest.raises(ValueError, match="rotate_with_key: output_domain must be"):
        e.rotate_with_key(ct, e.rotation_key(1), output_domain=domain)
    with pytest.raises(ValueError, match="conjugate: output_domain must be"):
        e.conjugate(ct, output_domain=domain)


def test_foreign_keys_are_rejected(e, other_key_engine):
    m = random_message(e, 2)
    mine = e.encrypt_message(m)
    theirs = other_key_engine.encrypt_message(m)
    assert mine.key_id != theirs.key_id
    with pytest.raises(ForeignKeyError):
        e.add(mine, theirs)
    with pytest.raises(ForeignKeyError):
        e.rotate_with_key(mine, other_key_engine.rotation_key(1))
    with pytest.raises(ForeignKeyError):
        e.relinearize(
            e.multiply(*(e.coefficient_domain_to_ntt_domain(mine),) * 2), other_key_engine.relinearization_key()
        )
    with pytest.raises(ForeignKeyError):
        e.decrypt_message(theirs)


def test_foreign_contexts_are_rejected(e):
    other = make_engine("test-n4096-scale30")
    m = random_message(e, 3)
    with pytest.raises(ForeignContextError):
        e.add(e.encrypt_message(m), other.encrypt_message(m))
    with pytest.raises(ForeignContextError):
        e.multiply_plaintext(e.coefficient_domain_to_ntt_domain(e.encrypt_message(m)), other.encode(m))
    with pytest.raises(ForeignContextError):
        e.rotate_with_key(e.encrypt_message(m), other.rotation_key(1))


def test_values_are_immutable_and_with_value_tensors_checks_shape(e):
    ct = e.encrypt_message(random_message(e, 4))
    with pytest.raises(AttributeError):
        ct.level = 3
    rebuilt = ct.with_value_tensors({"data": ct.data.copy()})
    assert rebuilt.value_metadata() == ct.value_metadata() and rebuilt.data is not ct.data
    with pytest.raises(StateMismatchError):
        ct.with_value_tensors({"data": ct.data[:, :1].copy()})


def test_cuda_without_a_cupy_backend_raises_a_clear_error(monkeypatch):
    # a None entry in sys.modules makes the lazy import fail exactly like a missing module
    monkeypatch.setitem(sys.modules, "fhelium_cupy.ckks.backends.cupy_backend", None)
    with pytest.raises(CudaUnavailableError, match="device='cpu'"):
        CkksEngine("test-n4096-scale40", device="cuda", insecure=True)


def test_encode_refuses_what_would_wrap_or_is_not_a_number(e):
    """|coefficient| must stay below half the product of the level's primes: past it the
    residues wrap and the plaintext decodes to garbage with no error."""
    import math

    import numpy as np

    last = e.context.max_level
    q_last = e.context.moduli[e.context.prime_ids(last)[0]]
    fits = 0.4 * q_last / e.parameters.scale  # a message constant over every slot: value * scale in c_0
    slots = e.num_slots
    np.testing.assert_allclose(e.decode(e.encode(np.full(slots, fits), level=last)).real, fits, rtol=1e-6)
    with pytest.raises(ValueError, match="hold only"):
        e.encode(np.full(slots, 2 * fits), level=last)  # 0.8 q: decoded as 0.8 q - q before this check
    with pytest.raises(ValueError, match="hold only"):
        e.encrypt_message(np.full(slots, 2 * fits), level=last)
    big = math.prod(e.context.moduli[r] for r in e.context.prime_ids(0)) / e.parameters.scale
    assert big > 1e6  # level 0 holds far more
    e.encode([1e6] * 4, level=0)
    for bad in ([np.nan, 1.0], [np.inf], [1.0, -np.inf]):
        with pytest.raises(ValueError, match="NaN or infinite"):
            e.encode(bad)
    for scale in (float("nan"), 0.0, -2.0**40):
        with pytest.raises(ValueError, match="scale"):
            e.encode([1.0], scale=scale)
    with pytest.raises(TypeError, match="numbers"):
        e.encode("abc")
    with pytest.raises(TypeError, match="numbers"):
        e.encode([object()])


def test_an_operation_on_a_foreign_ciphertext_never_generates_keys(other_key_engine):
    """decrypt, relinearize and conjugate (with the engine's own lazily made keys) check the
    ciphertext's secret before generating anything: no random secret or key is left behind."""
    import numpy as np

    foreign = other_key_engine.encrypt_message(np.ones(4))
    ntt = other_key_engine.coefficient_domain_to_ntt_domain(foreign)
    ct3 = other_key_engine.multiply(ntt, ntt)
    fresh = CkksEngine("test-n4096-scale40", insecure=True)
    with pytest.raises(StateMismatchError):
        fresh.conjugate("not a ciphertext")
    for call in (lambda: fresh.decrypt(foreign), lambda: fresh.conjugate(foreign), lambda: fresh.relinearize(ct3)):
        with pytest.raises(ForeignKeyError, match="holds no keys"):
            call()
    assert fresh._keys is None  # nothing was generated
    chain = fresh.generate_keys()
    for call in (lambda: fresh.conjugate(foreign), lambda: fresh.relinearize(ct3)):
        with pytest.raises(ForeignKeyError, match="engine holds"):
            call()
    assert chain._conj is None and chain._relin is None


def test_clear_errors_for_malformed_helper_inputs(e):
    import numpy as np

    from fhelium_cupy.ckks import SecretKey, matrix_diagonals, periodic_message

    with pytest.raises(TypeError, match="rotation step must be an int"):
        e.rotation_key(1.5)
    with pytest.raises(TypeError, match="rotation step must be an int"):
        e.rotation_key("1")
    assert e.rotation_key(np.int64(3)).rotation_step == 3
    with pytest.raises(ValueError, match="scalar"):
        periodic_message(1.0, e.num_slots)
    with pytest.raises(ValueError, match="square"):
        matrix_diagonals(np.zeros((0, 0)), e.num_slots)
    sk = e.keys.secret_key
    fewer = SecretKey(sk.data[:-1], prime_ids=sk.prime_ids[:-1], context_id=sk.context_id, key_id=sk.key_id)
    other = CkksEngine("test-n4096-scale40", insecure=True)
    with pytest.raises(StateMismatchError, match="every Q and P prime"):
        other.generate_keys(fewer)
    assert other._keys is None


def test_plaintext_form_errors_name_a_call_that_makes_the_form_and_it_works():
    """add_plaintext(ct, encode(m)) is the first thing users try (a new-user walkthrough,
    session 25); every wrong-form error names how to get the form from encode, and doing what
    it says succeeds."""
    e = make_engine("test-n4096-scale40")
    m = random_message(e, 1)
    coeff_ct = e.encrypt_message(m)
    ntt_ct = e.coefficient_domain_to_ntt_domain(coeff_ct)
    with pytest.raises(StateMismatchError, match=r"engine\.encode\(m, polynomial_domain='coefficient'\) gives it"):
        e.add_plaintext(coeff_ct, e.encode(m))
    e.add_plaintext(coeff_ct, e.encode(m, polynomial_domain="coefficient"))
    with pytest.raises(StateMismatchError, match=r"coefficient_domain_to_ntt_domain\(engine\.encode\(m, polynomial"):
        e.add_plaintext(ntt_ct, e.encode(m))
    summed = e.add_plaintext(ntt_ct, e.coefficient_domain_to_ntt_domain(e.encode(m, polynomial_domain="coefficient")))
    np.testing.assert_allclose(e.decrypt_message(summed), 2 * m, atol=1e-6)
    with pytest.raises(StateMismatchError, match="already returns the form multiply_plaintext takes"):
        e.prepare_plaintext_for_multiplication(e.encode(m))
    with pytest.raises(StateMismatchError, match=r"engine\.encode\(m\) returns that form"):
        e.multiply_plaintext(ntt_ct, e.encode(m, polynomial_domain="coefficient"))
    e.multiply_plaintext(ntt_ct, e.encode(m))


# -- audit, session 30 ----------------------------------------------------------------------


def test_a_bad_rotation_step_makes_no_keys():
    fresh = CkksEngine("test-n4096-scale40", insecure=True)
    for bad in (1.5, "2", None):
        with pytest.raises(TypeError, match="rotation step"):
            fresh.rotation_key(bad)
    assert fresh._keys is None  # no secret, public key or chain was made for a call that failed


def test_decode_checks_the_plaintext_against_the_engine(e):
    other = make_engine("test-n4096-scale30")  # same ring degree, other primes
    with pytest.raises(ForeignContextError, match="decode"):
        e.decode(other.encode(np.arange(4.0)))  # decoded to values around 1e31 before
    own = e.encode(np.arange(4.0), level=1)
    with pytest.raises(StateMismatchError):
        e.decode(own._with_data(own.data, level=0))  # level 0 claimed with level 1's primes
    np.testing.assert_allclose(e.decode(own, real=True)[:4], np.arange(4.0), atol=1e-6)


def test_matrix_vector_checks_its_diagonals_before_any_rotation(e, monkeypatch):
    from fhelium_cupy.ckks import linalg

    other = make_engine("test-n4096-scale30")
    A = np.eye(4)
    keys = e.rotation_keys(linalg.required_rotation_steps(4))
    source = e.encrypt_message(linalg.periodic_message(np.ones(4), e.num_slots))
    last = e.encrypt_message(linalg.periodic_message(np.ones(4), e.num_slots), level=e.context.max_level)
    modups = []
    original = e.backend.modup
    monkeypatch.setattr(e.backend, "modup", lambda *a, **k: modups.append(1) or original(*a, **k))
    cases = [
        (source, linalg.encode_diagonals(other, A, modulus_basis="Q"), ForeignContextError),
        (source, e.encode(linalg.matrix_diagonals(A, e.num_slots), polynomial_domain="coefficient"),
         StateMismatchError),
        (last, linalg.encode_diagonals(e, A, level=e.context.max_level, modulus_basis="Q", scale=2.0**20),
         StateMismatchError),
        (source, None, StateMismatchError),
        (source, [1, 2], StateMismatchError),
    ]
    for src, diagonals, error in cases:
        with pytest.raises(error):
            linalg.matrix_vector(src, engine=e, diagonals=diagonals, rotation_keys=keys)
    for diagonals, error in ((linalg.encode_bsgs_diagonals(other, A), ForeignContextError),
                             (None, StateMismatchError)):
        with pytest.raises(error):
            linalg.matrix_vector_bsgs(source, engine=e, diagonals=diagonals, rotation_keys=keys)
    assert modups == []  # no rotation ran for a call that then failed


def test_encode_validates_level_and_scale_types_and_products_of_tiny_scales(e):
    for level in (True, 1.0, "1"):
        with pytest.raises(TypeError, match="level must be an int"):
            e.encode(np.ones(2), level=level)
    for scale in (True, 1 + 2j, "2"):
        with pytest.raises(TypeError, match="scale must be a real number"):
            e.encode(np.ones(2), scale=scale)
    np.testing.assert_allclose(e.decode(e.encode(np.ones(2), level=np.int64(1)), real=True)[:2], 1.0, atol=1e-6)
    for scale in (0.5, 1.0, 1e-300):  # the message would round away: garbage, with no error before
        with pytest.raises(ValueError, match="scale must be a finite number > 1"):
            e.encode(np.ones(2), scale=scale)
        with pytest.raises(ValueError, match="scale must be a finite number > 1"):
            e.encrypt_message(np.ones(2), scale=scale)
    from fhelium_cupy.ckks.values import Ciphertext

    base = e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.ones(2)))
    tiny = Ciphertext(base.data, **{**base.value_metadata(), "scale": 1e-200})  # built by hand
    with pytest.raises(StateMismatchError, match="not a positive finite number"):
        e.multiply(tiny, tiny)  # the scales' product underflows to 0 (math domain error before)


def test_a_rescale_that_would_leave_a_scale_below_1_is_refused_before_any_work(e):
    """A 2^20 scale over a 40-bit prime decrypted to values of 1e9, with no error."""
    low = e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.ones(2), scale=2.0**20))
    with pytest.raises(StateMismatchError, match="below 1"):
        e.rescale_to_next_level(low)
    product = e.multiply(low, e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.ones(2), scale=2.0**10)))
    with pytest.raises(StateMismatchError, match="below 1"):
        e.relinearize(product, rescale=True)  # 2^30 over a 40-bit prime
    ok = e.rescale_to_next_level(e.coefficient_domain_to_ntt_domain(e.encrypt_message(np.ones(2))))
    assert ok.level == 1


def test_summing_an_empty_batch_is_a_state_mismatch(e):
    empty = e.encrypt_message(np.ones((0, 2)))
    assert empty.batch_shape == (0,)
    with pytest.raises(StateMismatchError, match="at least one entry"):
        e.sum_ciphertext_batch(empty)


def test_hoisted_rotations_read_their_keys_once(e):
    """A generator of keys was used up by the key checks, and the rotations then ran on none."""
    ct = e.encrypt_message(random_message(e, 21))
    keys = {s: e.rotation_key(s) for s in (1, 2)}
    want = e.rotate_hoisted_with_keys(ct, list(keys.values()))
    for given in ((k for k in keys.values()), keys.values()):
        got = e.rotate_hoisted_with_keys(ct, given)
        assert len(got) == 2
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.data, b.data)
    batch = e.rotate_hoisted_batch(ct, (k for k in keys.values()))
    assert batch.batch_shape == (3,)
    with pytest.raises(TypeError, match="iterable of RotationKey"):
        e.rotate_hoisted_with_keys(ct, 3)


def test_stack_batch_takes_any_iterable_once():
    """A generator was used up by the state check, and the stack then saw nothing."""
    from fhelium_cupy.ckks.values import Ciphertext, Plaintext

    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 5))
    stacked = Ciphertext.stack_batch(c for c in (ct, ct))
    assert stacked.batch_shape == (2,)
    pt = e.encode(random_message(e, 6))
    assert Plaintext.stack_batch(p for p in (pt, pt, pt)).batch_shape == (3,)
