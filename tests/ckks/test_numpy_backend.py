"""The NumPy backend against Python-int implementations of the base.py formulas."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fhelium_cupy.ckks.backends.base import CkksBackend, RingContext
from fhelium_cupy.ckks.backends.numpy_backend import NumpyBackend
from fhelium_cupy.ckks.context import CkksContext
from fhelium_cupy.ckks.params import Parameters, ParametersLiteral
from tests.helpers.ckks_oracles import (
    oracle_moddown,
    oracle_modup_digit,
    oracle_rescale,
    random_residues,
    to_int_rows,
)

N = 16


def _backend(q_bits, p_bits, dnum=None) -> NumpyBackend:
    literal = ParametersLiteral(log_n=4, q_bits=q_bits, p_bits=p_bits, scale=2.0**30, dnum=dnum)
    return NumpyBackend(CkksContext(Parameters.from_literal(literal, insecure=True)))


@pytest.fixture(params=["single-prime-digits", "two-prime-digits-two-p"])
def be(request) -> NumpyBackend:
    if request.param == "single-prime-digits":
        return _backend((40, 40, 50), (60,))
    return _backend((40, 41, 40, 50, 45), (60, 58), dnum=2)


def _mod(be, rows):
    return [be.context.moduli[r] for r in rows]


def test_context_and_backend_satisfy_the_protocols(be):
    assert isinstance(be.context, RingContext)
    for name in CkksBackend.__dict__:
        if not name.startswith("_") and callable(getattr(CkksBackend, name)):
            assert callable(getattr(be, name)), name
    assert be.name == "numpy" and be.xp is np


def test_elementwise_ops_and_scalar_and_montgomery_conversions_are_exact(be):
    rows = tuple(range(1, be.context.q_count)) + be.p_rows
    moduli = _mod(be, rows)
    rng = random.Random(3)
    a = random_residues(rng, moduli, N, (2,))
    b = random_residues(rng, moduli, N, (2,))
    A, B = a.astype(object), b.astype(object)
    q = np.array(moduli, dtype=object)[:, None]
    R = 2**64
    assert (be.add(a, b, rows).astype(object) == (A + B) % q).all()
    assert (be.sub(a, b, rows).astype(object) == (A - B) % q).all()
    assert (be.neg(a, rows).astype(object) == (-A) % q).all()
    assert (be.mul(a, b, rows).astype(object) == (A * B) % q).all()
    rinv = np.array([pow(R, -1, m) for m in moduli], dtype=object)[:, None]
    assert (be.mul_montgomery(a, b, rows).astype(object) == (A * B * rinv) % q).all()
    assert (be.to_montgomery(a, rows).astype(object) == (A * R) % q).all()
    np.testing.assert_array_equal(be.from_montgomery(be.to_montgomery(a, rows), rows), a)
    scal = [rng.randrange(2**70) for _ in rows]
    sc = np.array(scal, dtype=object)[:, None]
    assert (be.mul_scalar(a, scal, rows).astype(object) == (A * sc) % q).all()
    out = np.empty_like(a)
    assert be.add(a, b, rows, out=out) is out
    be.mul(a, b, rows, out=a)  # aliasing an input
    assert (a.astype(object) == (A * B) % q).all()


def test_sum_batch_and_tensor_product_are_exact(be):
    rows = tuple(range(be.context.q_count))
    moduli = _mod(be, rows)
    rng = random.Random(4)
    a = random_residues(rng, moduli, N, (2, 5))
    b = random_residues(rng, moduli, N, (2, 5))
    q = np.array(moduli, dtype=object)[:, None]
    s = be.sum_batch(a, 1, rows)
    assert s.shape == (2, len(rows), N)
    assert (s.astype(object) == a.astype(object).sum(axis=1) % q).all()
    t = be.tensor_product(a, b, rows).astype(object)
    A, B = a.astype(object), b.astype(object)
    assert (t[0] == A[0] * B[0] % q).all()
    assert (t[1] == (A[0] * B[1] + A[1] * B[0]) % q).all()
    assert (t[2] == A[1] * B[1] % q).all()


@pytest.mark.parametrize("level", [0, 1, 2])
def test_modup_matches_the_contract_formula(be, level):
    rows = tuple(range(level, be.context.q_count))
    targets = rows + be.p_rows
    moduli = be.context.moduli
    c = random_residues(random.Random(level), [moduli[r] for r in rows], N, (2,))
    got = be.ntt_inverse(be.modup(c, rows), targets)  # modup returns NTT-domain digits
    digits = [tuple(r for r in d if r in rows) for d in be.context.digits]
    digits = [d for d in digits if d]
    assert got.shape == (len(digits), 2, len(targets), N)
    for d, digit in enumerate(digits):
        for b in range(2):
            for k in range(N):
                column = {r: int(c[b, i, k]) for i, r in enumerate(rows)}
                want = oracle_modup_digit(column, digit, [moduli[t] for t in targets], moduli)
                assert [int(v) for v in got[d, b, :, k]] == want


@pytest.mark.parametrize("level", [0, 1])
def test_rescale_matches_centered_rounding_in_both_domains(be, level):
    rows = tuple(range(level, be.context.q_count))
    moduli = _mod(be, rows)
    c = random_residues(random.Random(9 + level), moduli, N, (2,))
    got = be.rescale(c, rows, domain="coefficient")
    assert got.shape == (2, len(rows) - 1, N)
    for b in range(2):
        for k in range(N):
            assert [int(v) for v in got[b, :, k]] == oracle_rescale([int(v) for v in c[b, :, k]], moduli)
    via_ntt = be.rescale(be.ntt_forward(c, rows), rows, domain="ntt")
    np.testing.assert_array_equal(via_ntt, be.ntt_forward(got, rows[1:]))


def test_keyswitch_from_digits_equals_inner_product_then_rounding_moddown(be):
    level = 1
    rows = tuple(range(level, be.context.q_count))
    targets = rows + be.p_rows
    moduli = be.context.moduli
    qp = be.context.q_count + be.context.p_count
    rng = random.Random(11)
    c = random_residues(rng, [moduli[r] for r in rows], N)
    digits = be.modup(c, rows)
    key = np.stack(
        [np.stack([random_residues(rng, list(moduli), N) for _ in range(2)]) for _ in be.context.digits]
    )  # [dnum, 2, QP, N] (any residues; Montgomery semantics via mul_montgomery)
    assert key.shape == (len(be.context.digits), 2, qp, N)
    active = [i for i, d in enumerate(be.context.digits) if any(r in rows for r in d)]
    for g in (None, 5):
        got = be.keyswitch_from_digits(digits, key, rows, galois_element=g)
        assert got.shape == (2, len(rows), N)
        dig = digits if g is None else be.automorphism(digits, g, targets, domain="ntt")
        for k in range(2):
            acc = None
            for d, index in enumerate(active):
                term = be.mul_montgomery(dig[d], np.ascontiguousarray(key[index, k][list(targets)]), targets)
                acc = term if acc is None else be.add(acc, term, targets)
            x = to_int_rows(be.ntt_inverse(acc, targets))
            L = len(rows)
            for j in range(N):
                want = oracle_moddown(
                    [x[i][j] for i in range(L)],
                    [x[i][j] for i in range(L, len(targets))],
                    [moduli[r] for r in rows],
                    [moduli[r] for r in be.p_rows],
                )
                assert [int(v) for v in got[k, :, j]] == want


def test_keyswitch_from_digits_many_stacks_single_keyswitches(be):
    rows = tuple(range(1, be.context.q_count))
    moduli = be.context.moduli
    rng = random.Random(12)
    digits = be.modup(random_residues(rng, [moduli[r] for r in rows], N), rows)

    def key():
        return np.stack([np.stack([random_residues(rng, list(moduli), N) for _ in range(2)]) for _ in be.context.digits])

    keys, gs = [key(), key(), key()], [5, None, 25]
    got = be.keyswitch_from_digits_many(digits, keys, rows, gs)
    assert got.shape == (3, 2, len(rows), N)
    for i, (k, g) in enumerate(zip(keys, gs)):
        np.testing.assert_array_equal(got[i], be.keyswitch_from_digits(digits, k, rows, galois_element=g))
    c0 = random_residues(rng, [moduli[r] for r in rows], N)
    with_c0 = be.keyswitch_from_digits_many(digits, keys, rows, gs, c0=c0)
    for i, g in enumerate(gs):
        rotated = c0 if g is None else be.automorphism(c0, g, rows, domain="coefficient")
        np.testing.assert_array_equal(with_c0[i, 0], be.add(rotated, got[i, 0], rows))
        np.testing.assert_array_equal(with_c0[i, 1], got[i, 1])
    with pytest.raises(ValueError):
        be.keyswitch_from_digits_many(digits, keys, rows, gs[:2])
