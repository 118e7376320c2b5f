"""Exactness of the uint64 modular arithmetic against Python integers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fhelium_cupy.ckks.modarith import (
    add_mod,
    montgomery_inverse,
    mul_montgomery,
    mul_shoup,
    mulhi,
    neg_mod,
    shoup_companion,
    sub_mod,
)
from fhelium_cupy.ckks.primes import generate_ntt_primes

PRIMES = [
    *generate_ntt_primes(30, 2, 4096),
    *generate_ntt_primes(40, 2, 4096),
    *generate_ntt_primes(50, 1, 4096),
    *generate_ntt_primes(60, 2, 4096, balanced=False),
    *generate_ntt_primes(61, 1, 4096, balanced=False),
]
prime = st.sampled_from(PRIMES)


def _pairs(q: int, data, size: int = 16):
    xs = data.draw(st.lists(st.integers(0, q - 1), min_size=size, max_size=size))
    ys = data.draw(st.lists(st.integers(0, q - 1), min_size=size, max_size=size))
    edge = [0, 1, q - 1, q - 2, (q - 1) // 2, (q + 1) // 2]
    return xs + edge + edge[::-1], ys + edge + edge


def _u(values):
    return np.array(values, dtype=np.uint64)


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=32), b=st.integers(0, 2**64 - 1))
def test_mulhi_is_the_exact_high_word_of_the_128_bit_product(a, b):
    got = mulhi(_u(a), _u([b]))
    assert [int(v) for v in got] == [(x * b) >> 64 for x in a]


@settings(max_examples=60, deadline=None)
@given(q=prime, data=st.data())
def test_add_sub_neg_mod_are_exact_and_canonical(q, data):
    xs, ys = _pairs(q, data)
    qa = _u([q])
    assert [int(v) for v in add_mod(_u(xs), _u(ys), qa)] == [(x + y) % q for x, y in zip(xs, ys)]
    assert [int(v) for v in sub_mod(_u(xs), _u(ys), qa)] == [(x - y) % q for x, y in zip(xs, ys)]
    assert [int(v) for v in neg_mod(_u(xs), qa)] == [(-x) % q for x in xs]


@settings(max_examples=60, deadline=None)
@given(q=prime, data=st.data())
def test_montgomery_product_equals_a_b_r_inverse_mod_q(q, data):
    xs, ys = _pairs(q, data)
    got = mul_montgomery(_u(xs), _u(ys), _u([q]), _u([montgomery_inverse(q)]))
    r_inv = pow(2**64, -1, q)
    assert [int(v) for v in got] == [x * y * r_inv % q for x, y in zip(xs, ys)]


@settings(max_examples=60, deadline=None)
@given(q=prime, data=st.data(), x_any=st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4))
def test_shoup_product_is_exact_for_any_64_bit_input(q, data, x_any):
    xs, _ = _pairs(q, data)
    xs = xs + x_any
    w = data.draw(st.integers(0, q - 1))
    got = mul_shoup(_u(xs), _u([w]), _u([shoup_companion(w, q)]), _u([q]))
    assert [int(v) for v in got] == [x * w % q for x in xs]


SMALL = [q for q in PRIMES if q < 2**50]


@settings(max_examples=60, deadline=None)
@given(q=st.sampled_from(SMALL), data=st.data())
def test_float_assisted_products_are_exact_below_2_to_50(q, data):
    from fhelium_cupy.ckks.modarith import mul_mod_float, mul_shoup_float

    xs, ys = _pairs(q, data)
    qa = _u([q])
    qf = qa.astype(np.float64)
    assert [int(v) for v in mul_mod_float(_u(xs), _u(ys), qa, qf)] == [x * y % q for x, y in zip(xs, ys)]
    w = data.draw(st.integers(0, q - 1))
    got = mul_shoup_float(_u(xs), _u([w]), np.array([w / q]), qa)
    assert [int(v) for v in got] == [x * w % q for x in xs]


# --- in-place temporaries: broadcasting shapes, aliasing ``out``, scoped ufunc buffer ---------


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(1, 70), lead=st.sampled_from([(), (2,), (3, 1)]))
def test_products_broadcast_rows_against_limb_constants_exactly(data, n, lead):
    """``x [..., 1, N]`` against per-limb ``[T, 1]`` constants (as in the basis conversion)."""
    moduli = data.draw(st.lists(prime, min_size=1, max_size=3, unique=True))
    T = len(moduli)
    xs = np.array(data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), dtype=np.uint64)
    x = np.broadcast_to(xs, lead + (1, n)).copy()
    ws = [data.draw(st.integers(0, q - 1)) for q in moduli]
    w = _u(ws).reshape(T, 1)
    ws_ = _u([shoup_companion(v, q) for v, q in zip(ws, moduli)]).reshape(T, 1)
    qa = _u(moduli).reshape(T, 1)
    got = mul_shoup(x, w, ws_, qa)
    assert got.shape == lead + (T, n)
    hi = mulhi(x, w)
    for i, (q, v) in enumerate(zip(moduli, ws)):
        row = got.reshape(-1, T, n)[:, i, :]
        assert all([int(c) for c in r] == [int(e) * v % q for e in xs] for r in row)
        assert [int(c) for c in hi.reshape(-1, T, n)[0, i]] == [(int(e) * v) >> 64 for e in xs]
    ys = np.array(
        [[e % q for e in data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n))] for q in moduli],
        dtype=np.uint64,
    )
    xr = np.array([[int(e) % q for e in xs] for q in moduli], dtype=np.uint64)
    mont = mul_montgomery(xr, ys, qa, _u([montgomery_inverse(q) for q in moduli]).reshape(T, 1))
    for i, q in enumerate(moduli):
        r_inv = pow(2**64, -1, q)
        assert [int(c) for c in mont[i]] == [int(a) * int(b) * r_inv % q for a, b in zip(xr[i], ys[i])]


@settings(max_examples=30, deadline=None)
@given(q=prime, data=st.data())
def test_shoup_product_may_write_into_its_input(q, data):
    xs, _ = _pairs(q, data)
    w = data.draw(st.integers(0, q - 1))
    x = _u(xs)
    got = mul_shoup(x, _u([w]), _u([shoup_companion(w, q)]), _u([q]), out=x)
    assert got is x
    assert [int(v) for v in x] == [a * w % q for a in xs]


def test_modarith_restores_the_callers_ufunc_buffer_size():
    q = PRIMES[0]
    before = np.getbufsize()
    mul_shoup(_u([1, 2, 3]), _u([5]), _u([shoup_companion(5, q)]), _u([q]))
    mul_montgomery(_u([1, 2]), _u([3, 4]), _u([q]), _u([montgomery_inverse(q)]))
    add_mod(_u([1]), _u([2]), _u([q]))
    assert np.getbufsize() == before
