"""The NumPy backend against Python-int implementations of the base.py formulas."""

from __future__ import annotations

import math
import random
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fhelium_cupy.ckks.backends.base import CkksBackend, RingContext
from fhelium_cupy.ckks.backends.numpy_backend import NumpyBackend
from fhelium_cupy.ckks.context import CkksContext
from fhelium_cupy.ckks.params import Parameters, ParametersLiteral
from tests.helpers.ckks_oracles import (
    oracle_moddown,
    oracle_moddown_rescale,
    oracle_modup_digit,
    oracle_rescale,
    random_residues,
    to_int_rows,
)

N = 16


# (q_bits, p_bits, dnum): digits of 2, 2 and 1 primes where dnum is 3 (P must be at least half
# the largest digit's product: Parameters refuses less). "small-*": every modulus < 2**50, so the float-assisted products run
# everywhere; the others mix < 2**50 Q primes with 60-bit P primes (exact 32-bit-split path
# wherever a P prime is involved, float path elsewhere).
SPECS = {
    "single-prime-digits": ((40, 40, 50), (60,), None),
    "two-prime-digits-two-p": ((40, 41, 40, 50, 45), (60, 58), 3),
    "small-single-prime-digits": ((30, 40, 45, 50), (50,), None),
    "small-two-prime-digits-two-p": ((30, 41, 40, 50, 45), (50, 48), 3),
}


@cache
def _pair(name: str) -> tuple[NumpyBackend, NumpyBackend]:
    """(default backend, backend forced onto the exact 32-bit-split products), same context."""
    q_bits, p_bits, dnum = SPECS[name]
    literal = ParametersLiteral(log_n=4, q_bits=q_bits, p_bits=p_bits, scale=2.0**30, dnum=dnum)
    context = CkksContext(Parameters.from_literal(literal, insecure=True))
    return NumpyBackend(context), NumpyBackend(context, float_products=False)


@pytest.fixture(params=list(SPECS))
def be(request) -> NumpyBackend:
    return _pair(request.param)[0]


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
    empty = be.sum_batch(a[:, :0], 1, rows)  # the empty sum is zero, as on the CuPy backend (it raised)
    assert empty.shape == (2, len(rows), N) and empty.dtype == np.uint64 and not empty.any()
    assert not be.mul_montgomery_sum(a[:, :0], b[0, :0], rows).any()
    t = be.tensor_product(a, b, rows).astype(object)
    A, B = a.astype(object), b.astype(object)
    assert (t[0] == A[0] * B[0] % q).all()
    assert (t[1] == (A[0] * B[1] + A[1] * B[0]) % q).all()
    assert (t[2] == A[1] * B[1] % q).all()


def test_mul_montgomery_sum_is_the_montgomery_weighted_batch_sum(be):
    rows = tuple(range(be.context.q_count))
    moduli = _mod(be, rows)
    rng = random.Random(5)
    a = random_residues(rng, moduli, N, (2, 5))
    b = random_residues(rng, moduli, N, (5,))
    q = np.array(moduli, dtype=object)[:, None]
    r_inv = np.array([pow(1 << 64, -1, m) for m in moduli], dtype=object)[:, None]
    got = be.mul_montgomery_sum(a, b, rows)
    assert got.shape == (2, len(rows), N)
    want = (a.astype(object) * b.astype(object)[None] % q * r_inv % q).sum(axis=1) % q
    assert (got.astype(object) == want).all()
    with pytest.raises(ValueError, match="mul_montgomery_sum"):
        be.mul_montgomery_sum(a, b[:4], rows)


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


def _inner_product_coefficients(be, digits, key, rows, galois_element=None) -> list[list[list[int]]]:
    """Per component, the coefficient-domain key inner product over ``rows + p_rows`` as
    Python integers, from the contract's steps (automorphism, Montgomery products, sum)."""
    targets = rows + be.p_rows
    active = [i for i, d in enumerate(be.context.digits) if any(r in rows for r in d)]
    dig = digits if galois_element is None else be.automorphism(digits, galois_element, targets, domain="ntt")
    out = []
    for k in range(2):
        acc = None
        for d, index in enumerate(active):
            term = be.mul_montgomery(dig[d], np.ascontiguousarray(key[index, k][list(targets)]), targets)
            acc = term if acc is None else be.add(acc, term, targets)
        out.append(to_int_rows(be.ntt_inverse(acc, targets)))
    return out


def _random_key(be, rng) -> np.ndarray:
    """``[dnum, 2, QP, N]`` (any residues; Montgomery semantics via mul_montgomery)."""
    moduli = be.context.moduli
    return np.stack([np.stack([random_residues(rng, list(moduli), N) for _ in range(2)]) for _ in be.context.digits])


def test_key_switches_refuse_an_even_galois_element(be):
    """An even element is not an automorphism of the slots (its NTT index map repeats indices):
    the key switch returned garbage where automorphism() and the CuPy backend refuse it."""
    rows = tuple(range(be.context.q_count))
    rng = random.Random(12)
    digits = be.modup(random_residues(rng, [be.context.moduli[r] for r in rows], N), rows)
    key = _random_key(be, rng)
    for g in (4, 2 * N, -2):
        with pytest.raises(ValueError, match="must be odd"):
            be.keyswitch_from_digits(digits, key, rows, galois_element=g)
        with pytest.raises(ValueError, match="must be odd"):
            be.keyswitch_from_digits_many(digits, [key], rows, [g])


def test_primitives_refuse_arrays_of_the_wrong_limb_count(be):
    """The oracle refuses what the CuPy backend's ``_check`` refuses: a ModDown handed one limb
    too many divided by the wrong P silently, and a one-limb operand broadcast over every row."""
    rows = tuple(range(be.context.q_count))
    qp = rows + be.p_rows
    rng = random.Random(7)
    a = random_residues(rng, _mod(be, rows), N)
    one = a[:1]
    extra = random_residues(rng, _mod(be, qp) + [be.context.moduli[0]], N)
    calls = [
        lambda: be.moddown(extra, rows),
        lambda: be.add(a, one, rows),
        lambda: be.sub(one, a, rows),
        lambda: be.mul(a, one, rows),
        lambda: be.mul_montgomery(one, a, rows),
        lambda: be.neg(one, rows),
        lambda: be.mul_scalar(one, [3] * len(rows), rows),
        lambda: be.ntt_forward(one, rows),
        lambda: be.ntt_inverse(a[:, : N // 2], rows),
        lambda: be.automorphism(one, 3, rows, domain="ntt"),
        lambda: be.rescale(one, rows, domain="coefficient"),
        lambda: be.modup(extra, rows),
        lambda: be.keyswitch_from_digits(be.modup(a, rows)[..., :-1, :], _random_key(be, rng), rows),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="expected"):
            call()
    assert be.moddown(extra[:-1], rows).shape == (len(rows), N)  # the right shape still works


def test_keyswitch_from_digits_equals_inner_product_then_rounding_moddown(be):
    level = 1
    rows = tuple(range(level, be.context.q_count))
    moduli = be.context.moduli
    qp = be.context.q_count + be.context.p_count
    rng = random.Random(11)
    c = random_residues(rng, [moduli[r] for r in rows], N)
    digits = be.modup(c, rows)
    key = _random_key(be, rng)
    assert key.shape == (len(be.context.digits), 2, qp, N)
    L = len(rows)
    for g in (None, 5):
        got = be.keyswitch_from_digits(digits, key, rows, galois_element=g)
        assert got.shape == (2, L, N)
        for k, x in enumerate(_inner_product_coefficients(be, digits, key, rows, g)):
            for j in range(N):
                want = oracle_moddown(
                    [x[i][j] for i in range(L)],
                    [x[i][j] for i in range(L, len(x))],
                    [moduli[r] for r in rows],
                    [moduli[r] for r in be.p_rows],
                )
                assert [int(v) for v in got[k, :, j]] == want


@pytest.mark.parametrize("level", [0, 1])
def test_keyswitch_add_rescale_is_the_rounding_division_of_inner_product_plus_p_c(be, level):
    """keyswitch_add_rescale against Python integers: the coefficient-domain inner product plus
    P c on the Q rows, divided by P q_0 with rounding (oracle_moddown over q_0 and the P
    primes); its NTT output is the NTT of that."""
    rows = tuple(range(level, be.context.q_count))
    moduli = be.context.moduli
    rng = random.Random(13 + level)
    c = be.ntt_forward(random_residues(rng, [moduli[r] for r in rows], N, (3,)), rows)  # a CT3, NTT domain
    digits = be.modup(be.ntt_inverse(c[2], rows), rows)
    key = _random_key(be, rng)
    got = {d: be.keyswitch_add_rescale(digits, key, rows, np.ascontiguousarray(c[:2]), domain=d)
           for d in ("coefficient", "ntt")}
    big_p = math.prod(moduli[r] for r in be.p_rows)
    L = len(rows)
    for k, x in enumerate(_inner_product_coefficients(be, digits, key, rows)):
        ck = to_int_rows(be.ntt_inverse(c[k], rows))
        for j in range(N):
            q_part = [(x[i][j] + big_p * ck[i][j]) % moduli[rows[i]] for i in range(L)]
            want = oracle_moddown_rescale(q_part + [x[i][j] for i in range(L, len(x))],
                                          [moduli[r] for r in rows + be.p_rows], L)
            assert [int(v) for v in got["coefficient"][k, :, j]] == want
    np.testing.assert_array_equal(got["ntt"], be.ntt_forward(got["coefficient"], rows[1:]))


def test_keyswitch_from_digits_many_stacks_single_keyswitches(be):
    rows = tuple(range(1, be.context.q_count))
    moduli = be.context.moduli
    rng = random.Random(12)
    digits = be.modup(random_residues(rng, [moduli[r] for r in rows], N), rows)

    keys, gs = [_random_key(be, rng) for _ in range(3)], [5, None, 25]
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


def test_keyswitch_ntt_domain_output_is_the_ntt_of_the_coefficient_output(be):
    """domain="ntt" (inverse NTT of the P rows only) == ntt_forward(domain="coefficient")."""
    moduli = be.context.moduli
    rng = random.Random(13)
    for level in (0, 1):
        rows = tuple(range(level, be.context.q_count))
        digits = be.modup(random_residues(rng, [moduli[r] for r in rows], N), rows)
        keys = [_random_key(be, rng) for _ in range(2)]
        for g in (None, 5):
            coef = be.keyswitch_from_digits(digits, keys[0], rows, galois_element=g)
            ntt = be.keyswitch_from_digits(digits, keys[0], rows, galois_element=g, domain="ntt")
            np.testing.assert_array_equal(ntt, be.ntt_forward(coef, rows))
        c0 = random_residues(rng, [moduli[r] for r in rows], N)
        gs = [25, None]
        coef = be.keyswitch_from_digits_many(digits, keys, rows, gs, c0=c0)
        ntt = be.keyswitch_from_digits_many(digits, keys, rows, gs, c0=be.ntt_forward(c0, rows), domain="ntt")
        np.testing.assert_array_equal(ntt, be.ntt_forward(coef, rows))
    with pytest.raises(ValueError, match="domain"):
        be.keyswitch_from_digits(digits, keys[0], rows, domain="slots")
    with pytest.raises(ValueError, match="domain"):
        be.keyswitch_from_digits_many(digits, keys, rows, gs, domain="NTT")


# --- float-assisted paths (every modulus < 2**50) vs the exact 32-bit-split path -------------------


def _edge_residues(rng: np.random.Generator, moduli, lead, edge: float) -> np.ndarray:
    """Canonical residues ``[*lead, L, N]``; a fraction ``edge`` replaced by 0, 1, half, half + 1, q - 2, q - 1."""
    q = np.array(moduli, dtype=np.uint64)[:, None]
    x = (rng.random(tuple(lead) + (len(moduli), N)) * q.astype(np.float64)).astype(np.uint64)
    x = np.minimum(x, q - np.uint64(1))
    half = (q - np.uint64(1)) // np.uint64(2)
    choices = np.stack(np.broadcast_arrays(0 * q, 0 * q + 1, half, half + 1, q - 2, q - 1))  # [6, L, 1]
    pick = rng.integers(0, 6, x.shape)
    mask = rng.random(x.shape) < edge
    values = np.choose(pick, [np.broadcast_to(c, x.shape) for c in choices])
    return np.where(mask, values, x).astype(np.uint64)


def _all_float(be: NumpyBackend, src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Every product of the ``src -> dst`` base conversion takes the float-assisted path, read
    from what ``_BasisConversion.__call__`` passes to ``_Const.mul``: float products on, every
    source prime below 2**50 (the terms' ``fast``) and every constant's moduli below 2**50."""
    conv = be._conv(src, dst)
    constants = [conv.inv, conv.s_mod_dst, *conv.terms]
    return conv.float_products and all(conv.narrow_src) and all(c.small for c in constants)


def test_float_products_are_selected_only_when_every_modulus_is_below_2_to_50():
    fast, exact = _pair("small-two-prime-digits-two-p")
    rows = tuple(range(fast.context.q_count))
    targets = rows + fast.p_rows
    assert fast.tables(targets).small and not exact.tables(targets).small
    assert _all_float(fast, (0, 1, 2), targets) and not _all_float(exact, (0, 1, 2), targets)
    assert _all_float(fast, fast.p_rows, rows)
    mixed, _ = _pair("two-prime-digits-two-p")
    rows = tuple(range(mixed.context.q_count))
    targets = rows + mixed.p_rows
    assert not mixed.tables(targets).small  # 60-bit P primes: exact key-switch products
    assert not _all_float(mixed, (0, 1, 2), targets) and not _all_float(mixed, mixed.p_rows, rows)
    assert mixed.tables(rows).small and _all_float(mixed, (0,), rows[1:])  # Q only: float (rescale)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(list(SPECS)),
    level=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
    edge=st.sampled_from([0.0, 0.3, 1.0]),
    lead=st.sampled_from([(), (2,), (2, 3)]),
    g=st.sampled_from([None, 3, 5, 25, 31]),
)
def test_backend_paths_are_bit_identical_to_the_exact_32_bit_split_path(name, level, seed, edge, lead, g):
    fast, exact = _pair(name)
    ctx = fast.context
    rng = np.random.default_rng(seed)
    rows = tuple(range(min(level, ctx.q_count - 2), ctx.q_count))  # rescale needs two limbs
    targets = rows + fast.p_rows
    moduli = [ctx.moduli[r] for r in rows]
    c = _edge_residues(rng, moduli, lead, edge)

    def same(f):
        a, b = f(fast), f(exact)
        assert a.dtype == np.uint64 and a.flags.c_contiguous
        np.testing.assert_array_equal(a, b)
        return a

    for domain in ("coefficient", "ntt"):
        same(lambda be, domain=domain: be.rescale(c, rows, domain=domain))
        if g is not None:
            same(lambda be, domain=domain: be.automorphism(c, g, rows, domain=domain))
    same(lambda be: be._centered_lift(c[..., :1, :], rows[0], rows[1:]))
    scal = [int(v) for v in rng.integers(0, 2**62, len(rows))]
    same(lambda be: be.mul_scalar(c, scal, rows))
    digits = same(lambda be: be.modup(c, rows))
    x = _edge_residues(rng, [ctx.moduli[r] for r in targets], lead, edge)
    same(lambda be: be.moddown(x, rows))
    key = np.stack([_edge_residues(rng, list(ctx.moduli), (2,), edge) for _ in ctx.digits])  # [dnum, 2, QP, N]
    same(lambda be: be.keyswitch_from_digits(digits, key, rows, galois_element=g))


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from([n for n in SPECS if n.startswith("small")]),
    seed=st.integers(0, 2**32 - 1),
    edge=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_float_paths_match_python_int_formulas(name, seed, edge):
    """Basis conversion, moddown, rescale and the key-switch inner product on the float path
    against the contract formulas in Python integers (edge residues included)."""
    be = _pair(name)[0]
    ctx = be.context
    rng = np.random.default_rng(seed)
    rows = tuple(range(ctx.q_count))
    targets = rows + be.p_rows
    moduli = ctx.moduli
    c = _edge_residues(rng, [moduli[r] for r in rows], (), edge)
    got = be.ntt_inverse(be.modup(c, rows), targets)
    for d, digit in enumerate(ctx.digits):
        for k in range(N):
            column = {r: int(c[i, k]) for i, r in enumerate(rows)}
            want = oracle_modup_digit(column, digit, [moduli[t] for t in targets], moduli)
            assert [int(v) for v in got[d, :, k]] == want
    r = be.rescale(c, rows, domain="coefficient")
    for k in range(N):
        assert [int(v) for v in r[:, k]] == oracle_rescale([int(v) for v in c[:, k]], [moduli[i] for i in rows])
    x = _edge_residues(rng, [moduli[t] for t in targets], (), edge)
    m = be.moddown(x, rows)
    L = len(rows)
    for k in range(N):
        want = oracle_moddown(
            [int(v) for v in x[:L, k]], [int(v) for v in x[L:, k]], list(moduli[:L]), [moduli[t] for t in be.p_rows]
        )
        assert [int(v) for v in m[:, k]] == want
    digits = be.modup(c, rows)
    key = np.stack([_edge_residues(rng, list(moduli), (2,), edge) for _ in ctx.digits])
    # inner product alone: keyswitch = moddown(INTT(acc)) and moddown / INTT are checked above
    R_inv = [pow(2**64, -1, moduli[t]) for t in targets]
    acc = np.empty((2, len(targets), N), dtype=object)
    for k in range(2):
        for i, t in enumerate(targets):
            for j in range(N):
                s = sum(int(digits[d, i, j]) * int(key[d, k, t, j]) for d in range(len(ctx.digits)))
                acc[k, i, j] = s * R_inv[i] % moduli[t]
    want = be.moddown(be.ntt_inverse(acc.astype(np.uint64), targets), rows)
    np.testing.assert_array_equal(be.keyswitch_from_digits(digits, key, rows), want)


def test_backend_restores_the_callers_ufunc_buffer_size():
    be = _pair("small-single-prime-digits")[0]
    rows = tuple(range(be.context.q_count))
    c = _edge_residues(np.random.default_rng(1), [be.context.moduli[r] for r in rows], (2,), 0.2)
    before = np.getbufsize()
    be.automorphism(c, 5, rows, domain="coefficient")
    be.rescale(c, rows, domain="ntt")
    be.modup(c, rows)
    assert np.getbufsize() == before


def test_keyswitch_linear_transform_is_the_weighted_inner_product_sum_then_one_moddown(be):
    """Double hoisting against the contract's formula: the weighted inner products plus the
    P-scaled c terms summed over rows + p_rows (Python ints for the P multiples), then the
    Python-int rounding ModDown; and a P multiple alone passes the ModDown exactly."""
    rows = tuple(range(1, be.context.q_count))
    targets = rows + be.p_rows
    L, moduli = len(rows), be.context.moduli
    rng = random.Random(14)
    c = np.stack([be.ntt_forward(random_residues(rng, [moduli[r] for r in rows], N), rows) for _ in range(2)])
    digits = be.modup(be.ntt_inverse(c[1], rows), rows)
    keys = [_random_key(be, rng) for _ in range(2)]
    gs = [5, 25]
    weights = np.stack([random_residues(rng, [moduli[r] for r in targets], N) for _ in range(3)])
    got = be.keyswitch_linear_transform(digits, keys, rows, gs, weights, c)
    assert got.shape == (2, L, N)
    rescaled = be.keyswitch_linear_transform(digits, keys, rows, gs, weights, c, rescale=True)
    assert rescaled.shape == (2, L - 1, N)
    big_p = 1
    for j in be.p_rows:
        big_p *= moduli[j]
    active = [i for i, d in enumerate(be.context.digits) if any(r in rows for r in d)]
    for k in range(2):
        acc = np.zeros((len(targets), N), dtype=np.uint64)
        for key, g, w in zip(keys, gs, weights[1:]):
            dig = be.automorphism(digits, g, targets, domain="ntt")
            for d, index in enumerate(active):
                ip = be.mul_montgomery(dig[d], np.ascontiguousarray(key[index, k][list(targets)]), targets)
                acc = be.add(acc, be.mul_montgomery(ip, w, targets), targets)
        direct = be.mul_montgomery(c[k], weights[0, :L], rows)
        if k == 0:
            for g, w in zip(gs, weights[1:]):
                rotated = be.automorphism(c[0], g, rows, domain="ntt")
                direct = be.add(direct, be.mul_montgomery(rotated, w[:L], rows), rows)
        for i, r in enumerate(rows):  # + P * direct on the Q rows, in Python ints
            q = moduli[r]
            acc[i] = [(int(a) + big_p % q * int(t)) % q for a, t in zip(acc[i], direct[i])]
        x = to_int_rows(be.ntt_inverse(acc, targets))
        want = np.array(
            [
                oracle_moddown(
                    [x[i][j] for i in range(L)],
                    [x[i][j] for i in range(L, len(targets))],
                    [moduli[r] for r in rows],
                    [moduli[r] for r in be.p_rows],
                )
                for j in range(N)
            ],
            dtype=np.uint64,
        ).T
        np.testing.assert_array_equal(got[k], be.ntt_forward(np.ascontiguousarray(want), rows))
        # rescale=True: the same x divided by P q_0 (q_0 = rows[0]) in one rounding, coefficient domain
        want_rescaled = np.array(
            [oracle_moddown_rescale([x[i][j] for i in range(len(targets))], [moduli[r] for r in targets], L)
             for j in range(N)],
            dtype=np.uint64,
        ).T
        np.testing.assert_array_equal(rescaled[k], want_rescaled)
    only_direct = weights.copy()
    only_direct[1:] = 0
    exact = be.keyswitch_linear_transform(digits, keys, rows, gs, only_direct, c)
    np.testing.assert_array_equal(exact, be.mul_montgomery(c, weights[0, None, :L], rows))
    for bad in ([4, 25], [5]):
        with pytest.raises(ValueError):
            be.keyswitch_linear_transform(digits, keys, rows, bad, weights, c)
    with pytest.raises(ValueError, match="weights"):
        be.keyswitch_linear_transform(digits, keys, rows, gs, weights[:2], c)
    with pytest.raises(TypeError, match="rescale"):
        be.keyswitch_linear_transform(digits, keys, rows, gs, weights, c, rescale=1)
    one = rows[-1:]
    with pytest.raises(ValueError, match="two rows"):
        be.keyswitch_linear_transform(be.modup(be.ntt_inverse(c[1, -1:], one), one), keys, one, gs,
                                      weights[:, -1 - len(be.p_rows):], c[:, -1:], rescale=True)


@pytest.mark.parametrize("name", ["single-prime-digits", "two-prime-digits-two-p"])
def test_rows_of_mixed_widths_in_any_order_give_the_exact_products(name):
    """The default backend splits a row tuple into its primes below 2**50 (float-assisted) and
    the wider ones (exact): in any order, interleaved too, every product and transform equals
    the backend forced onto the exact products, and out= may alias the input."""
    fast, exact = _pair(name)
    q_rows, p_rows = tuple(range(fast.context.q_count)), fast.p_rows
    for rows in (q_rows + p_rows, (p_rows[0],) + q_rows[:2], (q_rows[0], p_rows[-1], q_rows[-1])):
        assert len(fast._width_groups(rows)) == 2
        rng = random.Random(len(rows))
        a = random_residues(rng, _mod(fast, rows), N, (3,))
        b = random_residues(rng, _mod(fast, rows), N, (3,))
        scalars = [rng.randrange(-(2**70), 2**70) for _ in rows]
        for op in ("mul", "mul_montgomery"):
            np.testing.assert_array_equal(getattr(fast, op)(a, b, rows), getattr(exact, op)(a, b, rows))
            np.testing.assert_array_equal(getattr(fast, op)(a, b[0], rows), getattr(exact, op)(a, b[0], rows))
        for op in ("to_montgomery", "from_montgomery", "ntt_forward", "ntt_inverse"):
            want = getattr(exact, op)(a, rows)
            np.testing.assert_array_equal(getattr(fast, op)(a, rows), want)
            alias = a.copy()
            assert getattr(fast, op)(alias, rows, out=alias) is alias
            np.testing.assert_array_equal(alias, want)
        np.testing.assert_array_equal(fast.mul_scalar(a, scalars, rows), exact.mul_scalar(a, scalars, rows))
        with pytest.raises(ValueError, match="scalars"):
            fast.mul_scalar(a, scalars[1:], rows)
    # base conversions from narrow Q primes into Q and P targets split by target width too
    rng = random.Random(9)
    digit = fast.context.digits[0]
    assert fast._conv(digit, q_rows + p_rows).terms[0]._parts  # the narrow targets take the float path
    c = random_residues(rng, _mod(fast, q_rows), N, (2,))
    np.testing.assert_array_equal(fast.modup(c, q_rows), exact.modup(c, q_rows))
    x = random_residues(rng, _mod(fast, q_rows + p_rows), N, (2,))
    np.testing.assert_array_equal(fast.moddown(x, q_rows), exact.moddown(x, q_rows))


@pytest.mark.parametrize("components", [(0, 1), (1, 0), (0,), (1,)])
def test_ntt_and_modup_by_calls_picks_components_by_slicing(components):
    """The two-call form of ntt_forward_and_modup hands ntt_forward a view of the ciphertext
    (basic slicing: an index list would be uploaded from the host, which a CUDA Graph capture
    refuses) holding the chosen components in order, and c1's NTT as the ModUp's hint."""
    from fhelium_cupy.ckks.backends.base import ntt_forward_and_modup_by_calls

    c = np.arange(2 * 3 * 3 * 4, dtype=np.uint64).reshape(2, 3, 3, 4)
    seen: dict[str, object] = {}

    class Recorder:
        xp = np

        def ntt_forward(self, a, rows):
            seen["ntt_input"] = a
            return a + np.uint64(1)

        def modup(self, c1, rows, *, c_ntt=None):
            seen["hint"] = c_ntt
            return c1

    ntt, _ = ntt_forward_and_modup_by_calls(Recorder(), c, (0, 1, 2), components)
    picked = seen["ntt_input"]
    assert np.shares_memory(picked, c) and np.array_equal(picked, np.stack([c[k] for k in components]))
    if 1 in components:
        assert np.array_equal(seen["hint"], c[1] + np.uint64(1))
    else:
        assert seen["hint"] is None
