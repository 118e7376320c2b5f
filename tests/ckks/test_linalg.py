"""Encrypted matrix-vector products (cyclic diagonals and BSGS) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks import (
    Ciphertext,
    CkksEngine,
    bsgs_split,
    encode_bsgs_diagonals,
    encode_diagonals,
    matrix_diagonals,
    matrix_vector,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps,
    required_rotation_steps_bsgs,
)
from fhelium_cupy.errors import CkksError, StateMismatchError
from tests.helpers.ckks_engines import TOLERANCE, make_engine, matvec_8x8


def test_diagonal_identity_holds_in_cleartext():
    rng = np.random.default_rng(0)
    n, slots = 8, 64
    a, x = rng.normal(size=(n, n)), rng.normal(size=n)
    d = matrix_diagonals(a, slots)
    xp = periodic_message(x, slots)
    y = sum(d[k] * np.roll(xp, k) for k in range(n))
    np.testing.assert_allclose(y, periodic_message(a @ x, slots))
    assert bsgs_split(16) == (4, 4) and bsgs_split(8) == (3, 3)
    assert required_rotation_steps(4) == (1, 2, 3)
    assert required_rotation_steps_bsgs(16) == (1, 2, 3, 4, 8, 12)


@pytest.mark.parametrize("preset", list(TOLERANCE))
@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("method", ["cyclic", "cyclic-hoisted", "cyclic-double-hoisted", "bsgs"])
def test_matrix_vector_matches_numpy(preset, n, method):
    e = make_engine(preset)
    rng = np.random.default_rng(n)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    if method.startswith("cyclic"):
        keys = e.rotation_keys(required_rotation_steps(n))
        basis = "QP" if "double" in method else "Q"
        y = matrix_vector(
            ct, engine=e, diagonals=encode_diagonals(e, a, modulus_basis=basis), rotation_keys=keys,
            hoisted=method.endswith("hoisted"),
        )
    else:
        keys = e.rotation_keys(required_rotation_steps_bsgs(n))
        y = matrix_vector_bsgs(ct, engine=e, diagonals=encode_bsgs_diagonals(e, a), rotation_keys=keys)
    assert y.level == 1 and y.scale == ct.scale and y.polynomial_domain == "coefficient"
    got = e.decrypt_message(y, real=True)
    assert np.max(np.abs(got - periodic_message(a @ x, e.num_slots))) < TOLERANCE[preset]


def test_bsgs_giant_steps_equal_the_stacked_rotations_bit_for_bit():
    """The giant steps as independent terms written into one batch (``_giant_step_sum``) are
    the sum of the stacked products and rotations, bit for bit; a giant key of another
    context is refused before any work."""
    e = make_engine("test-n4096-scale40")
    n = 16
    rng = np.random.default_rng(3)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    b = bsgs_split(n)[1]
    keys = e.rotation_keys(required_rotation_steps_bsgs(n))
    giant = [keys[i * b] for i in range(1, n // b)]
    stacked = e.rotate_hoisted_batch(ct, [keys[k] for k in range(1, b)], output_domain="ntt")
    diagonals = encode_bsgs_diagonals(e, a)
    terms = [e.multiply_plaintext_and_sum(stacked, diagonals._with_data(diagonals.data[i])) for i in range(n // b)]
    terms[1:] = [e.rotate_with_key(t, k, output_domain="ntt") for t, k in zip(terms[1:], giant)]
    want = e.sum_ciphertext_batch(Ciphertext.stack_batch(terms))
    got = e._giant_step_sum(stacked, diagonals, giant)
    assert (got.scale, got.level, got.polynomial_domain, got.batch_shape) == (want.scale, want.level, "ntt", ())
    np.testing.assert_array_equal(got.data, want.data)
    other = CkksEngine("test-n4096-scale40", insecure=True)
    other.generate_keys()
    foreign = other.rotation_keys([b])[b]
    with pytest.raises(CkksError, match="context|secret"):
        e._giant_step_sum(stacked, diagonals, [foreign] + giant[1:])


def test_matrix_vector_rejects_missing_keys_and_wrong_diagonals():
    e = make_engine("test-n4096-scale40")
    a = np.eye(4)
    ct = e.encrypt_message(periodic_message(np.ones(4), e.num_slots))
    with pytest.raises(StateMismatchError, match="no rotation key for step 3"):
        matrix_vector(
            ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys={1: e.rotation_key(1), 2: e.rotation_key(2)}
        )
    with pytest.raises(StateMismatchError, match="level"):
        matrix_vector(ct, engine=e, diagonals=encode_diagonals(e, a, level=1), rotation_keys=e.rotation_keys((1, 2, 3)))
    with pytest.raises(StateMismatchError):
        matrix_vector_bsgs(ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys={})


@pytest.mark.parametrize("container", [list, tuple, dict])
@pytest.mark.parametrize("method", ["cyclic-double-hoisted", "cyclic-hoisted", "bsgs"])
def test_matrix_vector_takes_keys_as_a_sequence_or_a_mapping(container, method):
    """A sequence's item k - 1 is step k (as documented); it must give the same bits as a dict."""
    e = make_engine("test-n4096-scale40")
    n = 8
    rng = np.random.default_rng(11)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    if method == "bsgs":
        steps = required_rotation_steps_bsgs(n)
        run, diagonals = matrix_vector_bsgs, encode_bsgs_diagonals(e, a)
        kwargs = {}
    else:
        steps = required_rotation_steps(n)
        run, diagonals = matrix_vector, encode_diagonals(e, a, modulus_basis="QP" if "double" in method else "Q")
        kwargs = {"hoisted": True}
    by_step = e.rotation_keys(steps)
    if container is dict:
        keys = by_step
    else:  # item k - 1 is step k: every step up to the largest one the method needs
        keys = container(e.rotation_key(k) for k in range(1, max(steps) + 1))
    y = run(ct, engine=e, diagonals=diagonals, rotation_keys=keys, **kwargs)
    want = run(ct, engine=e, diagonals=diagonals, rotation_keys=by_step, **kwargs)
    np.testing.assert_array_equal(y.data, want.data)
    got = e.decrypt_message(y, real=True)
    assert np.max(np.abs(got - periodic_message(a @ x, e.num_slots))) < TOLERANCE["test-n4096-scale40"]


def test_matrix_vector_refuses_keys_filed_under_another_step_before_any_work(monkeypatch):
    e = make_engine("test-n4096-scale40")  # shared by the tests: patch through monkeypatch only
    a = np.eye(4)
    ct = e.encrypt_message(periodic_message(np.ones(4), e.num_slots))
    diagonals = encode_diagonals(e, a)
    swapped = {1: e.rotation_key(2), 2: e.rotation_key(1), 3: e.rotation_key(3)}
    calls = []
    monkeypatch.setattr(e, "linear_transform", lambda *args, **kw: calls.append(args))  # never reached
    with pytest.raises(StateMismatchError, match="step 1 rotates by 2"):
        matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=swapped)
    with pytest.raises(StateMismatchError, match="step 3"):  # a sequence one short
        matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=[e.rotation_key(1), e.rotation_key(2)])
    with pytest.raises(TypeError, match="RotationKey"):
        matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys={1: "key", 2: None, 3: 3})
    with pytest.raises(TypeError, match="mapping"):
        matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=e.rotation_key(1))
    assert calls == []
    # the BSGS giant-step keys are checked before the baby rotations run
    b, g = bsgs_split(16)
    bsgs = encode_bsgs_diagonals(e, np.eye(16))
    ct16 = e.encrypt_message(periodic_message(np.ones(16), e.num_slots))
    monkeypatch.setattr(e, "rotate_hoisted_batch", lambda *args, **kw: calls.append(args))
    with pytest.raises(StateMismatchError, match=f"no rotation key for step {2 * b}"):
        matrix_vector_bsgs(ct16, engine=e, diagonals=bsgs, rotation_keys=e.rotation_keys(range(1, b + 1)))
    assert calls == []


def test_hoisted_and_independent_rotation_schedules_are_bit_identical():
    e = make_engine("test-n4096-scale40")
    rng = np.random.default_rng(7)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    keys = e.rotation_keys(required_rotation_steps(8))
    diagonals = encode_diagonals(e, a, modulus_basis="Q")
    hoisted = matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=keys)
    independent = matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=keys, hoisted=False)
    assert np.array_equal(hoisted.data, independent.data)
    # QP diagonals: hoisted=False uses their Q limbs (the same schedule, bit for bit)
    qp = encode_diagonals(e, a)
    assert qp.modulus_basis == "QP" and qp.data.shape[-2] == diagonals.data.shape[-2] + len(e.context.p_ids)
    assert np.array_equal(
        matrix_vector(ct, engine=e, diagonals=qp, rotation_keys=keys, hoisted=False).data, independent.data
    )


def test_independent_rotations_are_written_into_the_batch_bit_for_bit():
    """The independent schedule's batch is the stack of rotate_with_key's results (each with
    its own ModUp), without the stacking copies."""
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(np.random.default_rng(8).uniform(-1, 1, e.num_slots))
    keys = list(e.rotation_keys([1, 3]).values())
    want = Ciphertext.stack_batch([e.coefficient_domain_to_ntt_domain(ct)]
                                  + [e.rotate_with_key(ct, k, output_domain="ntt") for k in keys])
    got = e._rotations_batch(ct, keys, "matrix_vector")
    assert got.batch_shape == (3,) and got.polynomial_domain == "ntt"
    assert np.array_equal(got.data, want.data)


def test_double_hoisting_decrypts_at_least_as_well_and_is_the_plain_product_without_rotations():
    """linear_transform (one ModDown) differs from the single-hoisted sum only by rounding:
    both decrypt to A x, and with all rotation weights zero it is exactly the plain product."""
    e = make_engine("test-n4096-scale40")
    rng = np.random.default_rng(8)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    keys = e.rotation_keys(required_rotation_steps(8))
    want = periodic_message(a @ x, e.num_slots)
    errors = {}
    for basis in ("Q", "QP"):
        y = matrix_vector(ct, engine=e, diagonals=encode_diagonals(e, a, modulus_basis=basis), rotation_keys=keys)
        assert y.level == 1 and y.scale == ct.scale
        errors[basis] = np.max(np.abs(e.decrypt_message(y, real=True) - want))
    assert errors["QP"] < TOLERANCE["test-n4096-scale40"]
    assert errors["QP"] <= 2 * errors["Q"], errors
    diag_only = np.zeros((8, 8))
    diag_only[np.arange(8), np.arange(8)] = rng.uniform(-1, 1, 8)  # only diagonal 0 is non-zero
    weights = encode_diagonals(e, diag_only)
    ordered = [keys[k] for k in required_rotation_steps(8)]
    double = e.linear_transform(ct, ordered, weights)
    q_only = weights._with_data(weights.data[:, : len(ct.prime_ids)].copy(), prime_ids=ct.prime_ids,
                                modulus_basis="Q")
    plain = e.multiply_plaintext(e.coefficient_domain_to_ntt_domain(ct), q_only._with_data(q_only.data[0]))
    assert np.array_equal(double.data, plain.data)


def test_linear_transform_with_rescale_is_the_double_hoisted_matrix_vector_and_without_keys_the_two_steps():
    """matrix_vector of QP diagonals (hoisted) is linear_transform(rescale=True) bit for bit.
    With no rotation there is no ModDown: rescale=True is exactly rescale_to_next_level of the
    coefficient-domain plain product, in the same state. (Its single rounding against the two
    steps with keys: tests/ckks/test_engine.py.)"""
    e = make_engine("test-n4096-scale40")
    mv = matvec_8x8(e)
    ct = mv.ct
    fused = e.linear_transform(ct, mv.ordered, mv.diagonals, rescale=True)
    assert np.array_equal(matrix_vector(ct, engine=e, diagonals=mv.diagonals, rotation_keys=mv.keys).data,
                          fused.data)
    one = encode_diagonals(e, mv.matrix[:1, :1])
    plain = e.rescale_to_next_level(e.ntt_domain_to_coefficient_domain(e.linear_transform(ct, [], one)))
    alone = e.linear_transform(ct, [], one, rescale=True)
    assert np.array_equal(alone.data, plain.data)
    assert (alone.level, alone.prime_ids, alone.scale, alone.polynomial_domain) == (
        plain.level, plain.prime_ids, plain.scale, plain.polynomial_domain)


def test_linear_transform_validates_before_any_work():
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(periodic_message(np.ones(4), e.num_slots))
    keys = [e.rotation_key(k) for k in (1, 2, 3)]
    qp = encode_diagonals(e, np.eye(4))
    with pytest.raises(StateMismatchError, match="QP"):
        e.linear_transform(ct, keys, encode_diagonals(e, np.eye(4), modulus_basis="Q"))
    with pytest.raises(StateMismatchError, match="batch shape"):
        e.linear_transform(ct, keys[:2], qp)
    with pytest.raises(StateMismatchError, match="level"):
        e.linear_transform(ct, keys, encode_diagonals(e, np.eye(4), level=1))
    with pytest.raises(StateMismatchError, match="coefficient"):
        e.linear_transform(e.coefficient_domain_to_ntt_domain(ct), keys, qp)
    top = e.encrypt_message(periodic_message(np.ones(4), e.num_slots), level=e.context.max_level)
    with pytest.raises(StateMismatchError, match="last level"):
        e.linear_transform(top, keys, encode_diagonals(e, np.eye(4), level=e.context.max_level), rescale=True)
    with pytest.raises(TypeError, match="rescale"):
        e.linear_transform(ct, keys, qp, rescale="yes")
    with pytest.raises(StateMismatchError, match="Q"):  # single-basis consumers refuse QP weights
        e.multiply_plaintext_and_sum(e.rotate_hoisted_batch(ct, keys, output_domain="ntt"), qp)
    with pytest.raises(ValueError, match="modulus_basis"):
        e.encode(np.ones(4), modulus_basis="P")
    q_part = e.drop_special_primes(qp)  # the Q limbs, same state otherwise
    q_only = encode_diagonals(e, np.eye(4), modulus_basis="Q")
    assert q_part.modulus_basis == "Q" and q_part.prime_ids == q_only.prime_ids
    assert np.array_equal(q_part.data, q_only.data) and q_part.data.flags.c_contiguous
    with pytest.raises(StateMismatchError, match="QP"):
        e.drop_special_primes(q_only)


def test_output_domain_ntt_is_exactly_the_ntt_of_the_coefficient_result():
    """Every matrix-vector schedule and linear_transform return in either domain the exact
    transform of the other (computed without it), at the same level and scale; an unknown
    domain is refused before any work."""
    e = make_engine("test-n4096-scale40")
    rng = np.random.default_rng(12)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    keys = e.rotation_keys(required_rotation_steps(8))
    runs = {
        "double-hoisted": lambda **kw: matrix_vector(ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys=keys,
                                                     **kw),
        "single-hoisted": lambda **kw: matrix_vector(ct, engine=e, diagonals=encode_diagonals(e, a, modulus_basis="Q"),
                                                     rotation_keys=keys, **kw),
        "independent": lambda **kw: matrix_vector(ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys=keys,
                                                  hoisted=False, **kw),
        "bsgs": lambda **kw: matrix_vector_bsgs(ct, engine=e, diagonals=encode_bsgs_diagonals(e, a),
                                                rotation_keys=e.rotation_keys(required_rotation_steps_bsgs(8)), **kw),
    }
    for name, run in runs.items():
        coefficient, ntt = run(), run(output_domain="ntt")
        assert (coefficient.polynomial_domain, ntt.polynomial_domain) == ("coefficient", "ntt"), name
        assert (ntt.level, ntt.prime_ids, ntt.scale) == (coefficient.level, coefficient.prime_ids, coefficient.scale)
        assert np.array_equal(ntt.data, e.coefficient_domain_to_ntt_domain(coefficient).data), name
        with pytest.raises(ValueError, match="output_domain"):
            run(output_domain="NTT")
    ordered = [keys[k] for k in required_rotation_steps(8)]
    weights = encode_diagonals(e, a)
    one = encode_diagonals(e, a[:1, :1])
    for k, w in ((ordered, weights), ([], one)):
        ntt_default = e.linear_transform(ct, k, w)
        assert ntt_default.polynomial_domain == "ntt"
        back = e.linear_transform(ct, k, w, output_domain="coefficient")
        assert np.array_equal(back.data, e.ntt_domain_to_coefficient_domain(ntt_default).data)
        rescaled = e.linear_transform(ct, k, w, rescale=True)
        assert rescaled.polynomial_domain == "coefficient"
        rescaled_ntt = e.linear_transform(ct, k, w, rescale=True, output_domain="ntt")
        assert np.array_equal(rescaled_ntt.data, e.coefficient_domain_to_ntt_domain(rescaled).data)
        assert (rescaled_ntt.level, rescaled_ntt.scale) == (rescaled.level, rescaled.scale)
    with pytest.raises(ValueError, match="output_domain"):
        e.linear_transform(ct, ordered, weights, output_domain="spectral")
