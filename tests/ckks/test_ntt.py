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
