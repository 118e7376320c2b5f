"""NTT: naive negacyclic evaluation at bit-reversed points, round trips, automorphisms."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fhelium_cupy.ckks.backends.numpy_backend import NumpyBackend
from fhelium_cupy.ckks.context import CkksContext
from fhelium_cupy.ckks.params import Parameters, ParametersLiteral
from tests.helpers.ckks_oracles import (
    naive_negacyclic_ntt,
    oracle_coefficient_automorphism,
    oracle_ntt_automorphism,
    random_residues,
    to_int_rows,
)


def _backend(log_n: int, q_bits=(30, 40, 50), p_bits=(60, 61)) -> NumpyBackend:
    literal = ParametersLiteral(log_n=log_n, q_bits=q_bits, p_bits=p_bits, scale=2.0**30)
    return NumpyBackend(CkksContext(Parameters.from_literal(literal, insecure=True)))


@pytest.mark.parametrize("log_n", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("sizes", [((30, 40, 50), (60, 61)), ((30, 40, 49), (45, 49))], ids=["exact", "float-assisted"])
def test_forward_ntt_equals_naive_evaluation_at_bit_reversed_odd_powers(log_n, sizes):
    be = _backend(log_n, *sizes)
    rows = tuple(range(len(be.context.moduli)))
    a = random_residues(random.Random(log_n), [be.context.moduli[r] for r in rows], 1 << log_n)
    got = to_int_rows(be.ntt_forward(a, rows))
    for i, r in enumerate(rows):
        assert got[i] == naive_negacyclic_ntt(to_int_rows(a)[i], be.context.moduli[r], be.context.psi[r])


def test_psi_is_a_primitive_2n_th_root_chosen_by_the_documented_rule():
    be = _backend(5)
    n = be.context.ring_degree
    for q, psi in zip(be.context.moduli, be.context.psi):
        assert pow(psi, n, q) == q - 1
        c = 2
        while pow(pow(c, (q - 1) // (2 * n), q), n, q) != q - 1:
            c += 1
        assert psi == pow(c, (q - 1) // (2 * n), q)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    log_n=st.sampled_from([3, 7, 10, 12]),
    batch=st.sampled_from([(), (2,), (2, 3)]),
    rows=st.sampled_from([(1, 3, 4), (0, 1, 2)]),
)
def test_ntt_round_trip_is_exact_and_canonical(seed, log_n, batch, rows):
    be = _backend(log_n)
    moduli = [be.context.moduli[r] for r in rows]
    a = random_residues(random.Random(seed), moduli, 1 << log_n, batch)
    f = be.ntt_forward(a, rows)
    assert f.shape == a.shape and f.dtype == np.uint64
    assert all((f[..., i, :] < q).all() for i, q in enumerate(moduli))
    np.testing.assert_array_equal(be.ntt_inverse(f, rows), a)


def test_ntt_is_a_ring_homomorphism_for_negacyclic_products():
    be = _backend(4)
    rows = (0, 3)
    n = 16
    rng = random.Random(7)
    a = random_residues(rng, [be.context.moduli[r] for r in rows], n)
    b = random_residues(rng, [be.context.moduli[r] for r in rows], n)
    prod = be.ntt_inverse(be.mul(be.ntt_forward(a, rows), be.ntt_forward(b, rows), rows), rows)
    for i, r in enumerate(rows):
        q = be.context.moduli[r]
        want = [0] * n
        for j in range(n):
            for k in range(n):
                s = 1 if j + k < n else -1
                want[(j + k) % n] = (want[(j + k) % n] + s * int(a[i, j]) * int(b[i, k])) % q
        assert to_int_rows(prod)[i] == want


@pytest.mark.parametrize("g", [3, 5, 25, 31, 63])
def test_automorphisms_match_oracles_and_commute_with_the_ntt(g):
    be = _backend(5)
    rows = (0, 2, 4)
    moduli = [be.context.moduli[r] for r in rows]
    a = random_residues(random.Random(g), moduli, 32)
    coef = be.automorphism(a, g, rows, domain="coefficient")
    for i, q in enumerate(moduli):
        assert to_int_rows(coef)[i] == oracle_coefficient_automorphism(to_int_rows(a)[i], g, q)
    f = be.ntt_forward(a, rows)
    ntt = be.automorphism(f, g, rows, domain="ntt")
    for i in range(len(rows)):
        assert to_int_rows(ntt)[i] == oracle_ntt_automorphism(to_int_rows(f)[i], g)
    np.testing.assert_array_equal(ntt, be.ntt_forward(coef, rows))


# --- signed lazy-reduction path (every modulus < 2**50) vs the exact Shoup path ----------------


def _psi(q: int, n: int) -> int:
    c = 2
    while pow(pow(c, (q - 1) // (2 * n), q), n, q) != q - 1:
        c += 1
    return pow(c, (q - 1) // (2 * n), q)


def _stacks(log_n: int, moduli: tuple[int, ...]):
    from dataclasses import replace

    from fhelium_cupy.ckks import ntt

    n = 1 << log_n
    st = ntt.stack_ntt_tables(tuple(ntt.ntt_tables(q, _psi(q, n), n) for q in moduli))
    return st, replace(st, lazy=None)


def _largest_ntt_primes_below(bits: int, count: int, n: int) -> tuple[int, ...]:
    from fhelium_cupy.ckks.primes import is_prime

    out, k = [], ((1 << bits) - 1) // (2 * n)
    while len(out) < count:
        if is_prime(k * 2 * n + 1):
            out.append(k * 2 * n + 1)
        k -= 1
    return tuple(out)


def _adversarial(rng: random.Random, moduli, n: int, batch: tuple[int, ...], kind: str) -> np.ndarray:
    a = random_residues(rng, list(moduli), n, batch)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    if kind == "max":
        a[...] = q - np.uint64(1)
    elif kind == "alternating":
        a[...] = np.where(np.arange(n) % 2 == 0, q - np.uint64(1), np.uint64(0))
    elif kind == "high":
        a[...] = q - np.uint64(1) - (a % np.uint64(3))
    return a


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    log_n=st.sampled_from([1, 2, 3, 5, 8, 11, 12]),
    batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    bits=st.sampled_from([(30, 31), (40, 45), (49, 49), (50, 50), (50, 30)]),
    kind=st.sampled_from(["random", "max", "alternating", "high"]),
)
def test_lazy_float_ntt_is_bit_identical_to_the_exact_path_and_to_python_ints(seed, log_n, batch, bits, kind):
    n = 1 << log_n
    moduli = tuple(_largest_ntt_primes_below(b, 1, n)[0] for b in bits)
    moduli = tuple(dict.fromkeys(moduli))
    lazy, exact = _stacks(log_n, moduli)
    assert lazy.lazy is not None and exact.lazy is None
    from fhelium_cupy.ckks.ntt import ntt_forward_u64, ntt_inverse_u64

    a = _adversarial(random.Random(seed), moduli, n, batch, kind)
    f = ntt_forward_u64(a, lazy)
    np.testing.assert_array_equal(f, ntt_forward_u64(a, exact))
    np.testing.assert_array_equal(ntt_inverse_u64(a, lazy), ntt_inverse_u64(a, exact))
    np.testing.assert_array_equal(ntt_inverse_u64(f, lazy), a)
    if log_n <= 5:
        flat_a, flat_f = a.reshape(-1, len(moduli), n), f.reshape(-1, len(moduli), n)
        for i, q in enumerate(moduli):
            assert to_int_rows(flat_f[0])[i] == naive_negacyclic_ntt(to_int_rows(flat_a[0])[i], q, _psi(q, n))


@pytest.mark.parametrize("limit_bits,forward_reduces", [(56, True), (58, False)])
def test_lazy_plan_extra_reductions_stay_exact(monkeypatch, limit_bits, forward_reduces):
    """A lower intermediate limit forces the reduce-before / reduce-sum stages of the plan."""
    from fhelium_cupy.ckks import _ntt_lazy, ntt

    monkeypatch.setattr(_ntt_lazy, "_LIMIT", float(1 << limit_bits))
    log_n, n = 10, 1 << 10
    moduli = _largest_ntt_primes_below(50, 2, n) + _largest_ntt_primes_below(40, 1, n)
    lazy, exact = _stacks(log_n, moduli)
    assert lazy.lazy is not None
    assert any(s[3] for s in lazy.lazy.fwd) == forward_reduces and any(s[3] for s in lazy.lazy.inv)
    for kind in ("random", "max", "alternating", "high"):
        a = _adversarial(random.Random(limit_bits), moduli, n, (2,), kind)
        f = ntt.ntt_forward_u64(a, lazy)
        np.testing.assert_array_equal(f, ntt.ntt_forward_u64(a, exact))
        np.testing.assert_array_equal(ntt.ntt_inverse_u64(a, lazy), ntt.ntt_inverse_u64(a, exact))
        np.testing.assert_array_equal(ntt.ntt_inverse_u64(f, lazy), a)


def test_lazy_plan_bounds_hold_for_the_largest_supported_rings():
    """Planned bounds stay below 2**62 up to N = 2**17 with moduli just under 2**50."""
    from fhelium_cupy.ckks import ntt

    for log_n in (12, 16, 17):
        n = 1 << log_n
        moduli = _largest_ntt_primes_below(50, 1, n) + _largest_ntt_primes_below(30, 1, n)
        st_ = ntt.stack_ntt_tables(tuple(ntt.ntt_tables(q, _psi(q, n), n) for q in moduli))
        assert st_.lazy is not None


def test_transforms_restore_the_callers_ufunc_buffer_size():
    be = _backend(6, (30, 40, 49), (45, 49))
    rows = (0, 1)
    a = random_residues(random.Random(3), [be.context.moduli[r] for r in rows], 64, (2,))
    before = np.getbufsize()
    be.ntt_inverse(be.ntt_forward(a, rows), rows)
    assert np.getbufsize() == before
