"""Differential property tests: random programs of CKKS engine operations against cleartext NumPy.

Hypothesis draws short programs over two encrypted registers (x, y): add / subtract (with y
or a fresh encryption in x's state), negate, plaintext add and multiply, ciphertext multiply +
relinearize + rescale (fused or not, from and to either domain), rotations (``numpy.roll``),
conjugation, NTT <-> coefficient changes and register swaps. Each program runs on ciphertexts
and on the cleartext slot vectors: every intermediate x must decrypt to its cleartext within
``TOL``, and every output's state (level, prime ids, scale, domain, components) must follow the
documented rules (a rescale: level + 1, scale divided by the dropped prime).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers.ckks_engines import make_engine, random_message

PRESET = "test-n4096-scale40"  # q_bits (40, 40, 49): levels 0..2, so at most two products
STEPS = (1, -1, 2, -7, 100, 1023, -2048)
TOL = 1e-5  # observed: at most ~5e-8 over 1500 random programs (fresh values ~1e-9)
BOUND = 8.0  # an op whose cleartext result leaves |slot| <= BOUND is skipped (keeps the modulus headroom)

SEEDS = st.integers(0, 2**32 - 1)
DOMAINS = st.sampled_from(["coefficient", "ntt"])
OPS = st.one_of(  # one branch per op, so each is drawn about as often
    *(st.tuples(st.just(name), SEEDS, st.booleans()) for name in ("add", "subtract")),  # bool: partner y if it fits
    *(st.tuples(st.just(name)) for name in ("negate", "to_ntt", "to_coefficient", "swap")),
    st.tuples(st.just("add_plaintext"), SEEDS),
    st.tuples(st.just("multiply_plaintext"), SEEDS, st.booleans()),  # bool: plaintext scale = dropped prime
    st.tuples(st.just("multiply"), SEEDS, st.booleans(), DOMAINS, DOMAINS, st.booleans()),
    st.tuples(st.just("rotate"), st.sampled_from(STEPS), DOMAINS),
    st.tuples(st.just("conjugate"), DOMAINS),
)
START = st.tuples(SEEDS, st.booleans(), SEEDS, st.booleans())  # (seed, complex?) per register
PROGRAM = st.lists(OPS, min_size=1, max_size=10)
DEEP = [("multiply", 1, True, "coefficient", "ntt", True), ("rotate", -7, "ntt"), ("add", 2, False),
        ("multiply_plaintext", 3, True), ("conjugate", "coefficient"), ("multiply", 4, False, "ntt", "ntt", False)]
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _to(e, value, domain):
    if value.polynomial_domain == domain:
        return value
    convert = e.coefficient_domain_to_ntt_domain if domain == "ntt" else e.ntt_domain_to_coefficient_domain
    return convert(value)


def _state(ct):
    return ct.level, ct.scale, ct.polynomial_domain


def _same_state(a, b):
    return a.level == b.level and a.polynomial_domain == b.polynomial_domain and math.isclose(a.scale, b.scale,
                                                                                               rel_tol=1e-9)


def _partner(e, x, y, seed, use_y, *, any_scale=False):
    """y when asked for and in x's state (any scale for a product), else a fresh encryption in it."""
    if use_y and y[0].level == x[0].level and (any_scale or _same_state(x[0], y[0])):
        return _to(e, y[0], x[0].polynomial_domain), y[1]
    m = random_message(e, seed)
    return _to(e, e.encrypt_message(m, level=x[0].level, scale=x[0].scale), x[0].polynomial_domain), m


def _step(e, op, x, y):
    """One op on register x (pairs ``(ciphertext, cleartext)``): ``(x, y, expected state)`` or
    None when the op does not apply (no level left for a product, or the result leaves BOUND)."""
    name, ct = op[0], x[0]
    level, scale, domain = _state(ct)
    q = e.context.moduli[ct.prime_ids[0]]  # what a rescale divides by
    if name == "swap":
        return y, x, _state(y[0])
    if name in ("add", "subtract"):
        p = _partner(e, x, y, op[1], op[2])
        fn, clear = (e.add, np.add) if name == "add" else (e.subtract, np.subtract)
        out, want = (fn(ct, p[0]), clear(x[1], p[1])), (level, scale, domain)
    elif name == "negate":
        out, want = (e.negate(ct), -x[1]), (level, scale, domain)
    elif name in ("to_ntt", "to_coefficient"):
        target = name[3:]
        out, want = (_to(e, ct, target), x[1]), (level, scale, target)
    elif name == "add_plaintext":
        c = random_message(e, op[1])
        pt = _to(e, e.encode(c, level=level, scale=scale, polynomial_domain="coefficient"), domain)
        out, want = (e.add_plaintext(ct, pt), x[1] + c), (level, scale, domain)
    elif name == "rotate":
        out, want = (e.rotate_with_key(ct, e.rotation_key(op[1]), output_domain=op[2]), np.roll(x[1], op[1])), (
            level, scale, op[2])
    elif name == "conjugate":
        out, want = (e.conjugate(ct, output_domain=op[1]), np.conj(x[1])), (level, scale, op[1])
    elif level >= e.context.max_level:  # a product needs a prime left to rescale into
        return None
    elif name == "multiply_plaintext":
        c = random_message(e, op[1])
        pt = e.encode(c, level=level, scale=float(q) if op[2] else e.scale)
        product = e.multiply_plaintext(_to(e, ct, "ntt"), pt)
        assert _state(product) == (level, scale * pt.scale, "ntt")
        out, want = (e.rescale_to_next_level(product), x[1] * c), (level + 1, scale * pt.scale / q, "ntt")
    else:  # multiply: (seed, use y, domain of the CT3, relinearize's output domain, fused rescale)
        _, seed, use_y, c3_domain, out_domain, fused = op
        p = _partner(e, x, y, seed, use_y, any_scale=True)
        c3 = e.multiply(_to(e, ct, "ntt"), _to(e, p[0], "ntt"))
        assert (c3.component_count, *_state(c3)) == (3, level, scale * p[0].scale, "ntt")
        c3 = _to(e, c3, c3_domain)
        c2 = e.relinearize(c3, output_domain=out_domain, rescale=fused)
        if not fused:
            assert (c2.component_count, *_state(c2)) == (2, level, c3.scale, out_domain)
            c2 = e.rescale_to_next_level(c2)
        out, want = (c2, x[1] * p[1]), (level + 1, scale * p[0].scale / q, out_domain)
    if np.max(np.abs(out[1])) > BOUND:
        return None
    return out, y, want


def _run(e, start, program):
    """Yields ``(op, x, expected state of x)`` after each applied op of ``program``."""
    regs = []
    for seed, complex_values in (start[:2], start[2:]):
        m = random_message(e, seed, complex_values=complex_values)
        regs.append((e.encrypt_message(m), m))
    x, y = regs
    for op in program:
        result = _step(e, op, x, y)
        if result is not None:
            x, y, want = result
            yield op, x, want


def _error(e, reg):
    return float(np.max(np.abs(e.decrypt_message(reg[0]) - reg[1])))


@SETTINGS
@given(start=START, program=PROGRAM)
@example(start=(5, True, 6, False), program=DEEP)  # always reaches the last level
def test_random_programs_decrypt_to_their_cleartext_results(start, program):
    e = make_engine(PRESET)
    for op, x, _ in _run(e, start, program):
        assert _error(e, x) < TOL, f"after {op}: error {_error(e, x):.3g}"


@SETTINGS
@given(start=START, program=PROGRAM)
@example(start=(5, True, 6, False), program=DEEP)  # always reaches the last level
def test_every_output_state_follows_the_documented_rules(start, program):
    e = make_engine(PRESET)
    for op, x, (level, scale, domain) in _run(e, start, program):
        ct = x[0]
        assert (ct.level, ct.prime_ids, ct.polynomial_domain, ct.component_count) == (
            level, e.context.prime_ids(level), domain, 2), op
        assert math.isclose(ct.scale, scale, rel_tol=1e-12), (op, ct.scale, scale)
        assert ct.modulus_basis == "Q" and ct.residue_representation == "standard", op
        assert x[1].shape == (e.num_slots,)
