"""Parameters: presets, prime generation, security bound and validation errors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fhelium_cupy.ckks import CkksContext, CkksEngine, Parameters, ParametersLiteral, preset_names
from fhelium_cupy.ckks.params import SECURITY_BOUNDS_128, balanced_digits
from fhelium_cupy.ckks.primes import generate_ntt_primes, is_prime
from fhelium_cupy.errors import ConfigurationError, InsecureParametersError


def test_generated_primes_are_ntt_friendly_distinct_and_deterministic():
    a = generate_ntt_primes(40, 6, 1 << 14)
    assert a == generate_ntt_primes(40, 6, 1 << 14)
    assert len(set(a)) == 6
    for q in a:
        assert is_prime(q) and q % (1 << 15) == 1 and q.bit_length() in (40, 41)
    assert all(q.bit_length() == 60 for q in generate_ntt_primes(60, 3, 1 << 16, balanced=False))


def test_is_prime_agrees_with_trial_division_on_small_numbers():
    def slow(n):
        return n > 1 and all(n % d for d in range(2, math.isqrt(n) + 1))

    assert all(is_prime(n) == slow(n) for n in range(2000))


@pytest.mark.parametrize(
    "name, n, q_count, p_count, dnum, insecure",
    [
        ("test-n4096-scale40", 4096, 3, 1, 3, True),
        ("test-n4096-scale30", 4096, 3, 1, 3, True),
        ("slots8192-scale40-depth7", 16384, 8, 1, 8, False),
        ("slots32768-scale40-depth34", 65536, 35, 4, 7, False),
    ],
)
def test_presets_have_the_documented_shape_and_respect_the_bound(name, n, q_count, p_count, dnum, insecure):
    p = Parameters.preset(name, insecure=True)
    assert (p.ring_degree, len(p.q_moduli), len(p.p_moduli), p.dnum, p.insecure) == (
        n,
        q_count,
        p_count,
        dnum,
        insecure,
    )
    assert all(m < 2**61 for m in p.moduli)
    if not insecure:
        assert p.log2_qp <= SECURITY_BOUNDS_128[n]
        assert Parameters.preset(name) == p
    if name.startswith("slots"):
        assert all(q.bit_length() in (40, 41) for q in p.q_moduli)
        assert all(m.bit_length() == 60 for m in p.p_moduli)
        assert p.scale == 2.0**40
    assert name in preset_names()


def test_insecure_sets_need_an_explicit_opt_in_and_the_error_names_the_bound():
    with pytest.raises(InsecureParametersError, match="106 bits"):
        Parameters.preset("test-n4096-scale40")
    with pytest.raises(InsecureParametersError, match="106 bits"):
        CkksEngine("test-n4096-scale30")
    with pytest.raises(InsecureParametersError, match="no 128-bit"):
        Parameters.from_literal(ParametersLiteral(log_n=10, q_bits=(30,), p_bits=(31,)))
    with pytest.raises(InsecureParametersError, match="430 bits"):
        Parameters.from_literal(ParametersLiteral(log_n=14, q_bits=(50,) * 8, p_bits=(60,)))
    insecure = Parameters.preset("test-n4096-scale40", insecure=True)
    with pytest.raises(InsecureParametersError):
        CkksEngine(insecure)


def test_non_ntt_friendly_duplicate_or_oversize_primes_are_rejected():
    good = generate_ntt_primes(30, 2, 4096)
    not_friendly = next(q for q in range(2**30 + 1, 2**31, 2) if is_prime(q) and q % 8192 != 1)
    with pytest.raises(ConfigurationError, match="not an NTT-friendly prime"):
        Parameters.from_literal(ParametersLiteral(log_n=12, q_moduli=(good[0], not_friendly), p_moduli=(good[1],)))
    with pytest.raises(ConfigurationError, match="not an NTT-friendly prime"):
        Parameters.from_literal(
            ParametersLiteral(log_n=12, q_moduli=(good[0] + 8192,), p_moduli=(good[1],)), insecure=True
        )
    with pytest.raises(ConfigurationError, match="distinct"):
        Parameters.from_literal(ParametersLiteral(log_n=12, q_moduli=(good[0], good[0]), p_moduli=(good[1],)))
    big = generate_ntt_primes(62, 1, 4096, balanced=False)[0] if False else (1 << 62) + 8193
    with pytest.raises(ConfigurationError, match="bits"):
        Parameters.from_literal(ParametersLiteral(log_n=12, q_moduli=(big,), p_moduli=(good[1],)), insecure=True)
    with pytest.raises(ConfigurationError, match="dnum"):
        Parameters.from_literal(ParametersLiteral(log_n=12, q_bits=(30, 30), p_bits=(40,), dnum=3), insecure=True)
    with pytest.raises(ConfigurationError, match="special prime"):
        Parameters.from_literal(ParametersLiteral(log_n=12, q_bits=(30,)), insecure=True)
    with pytest.raises(ConfigurationError, match="unknown CKKS preset"):
        Parameters.preset("nope")


def test_digits_are_contiguous_balanced_and_exposed_by_the_context():
    assert balanced_digits(35, 7) == tuple(tuple(range(5 * i, 5 * i + 5)) for i in range(7))
    assert balanced_digits(5, 2) == ((0, 1, 2), (3, 4))
    p = Parameters.from_literal(ParametersLiteral(log_n=12, q_bits=(30,) * 5, p_bits=(60, 60), dnum=2), insecure=True)
    ctx = CkksContext(p)
    assert ctx.digits == ((0, 1, 2), (3, 4))
    assert ctx.moduli == p.q_moduli + p.p_moduli and len(ctx.psi) == 7


def test_context_identity_is_stable_and_parameter_sensitive():
    a = CkksContext(Parameters.preset("test-n4096-scale40", insecure=True))
    b = CkksContext(Parameters.preset("test-n4096-scale40", insecure=True))
    c = CkksContext(Parameters.preset("test-n4096-scale30", insecure=True))
    assert a.context_id == b.context_id != c.context_id
    assert len(a.context_id) == 16 and int(a.context_id, 16) >= 0


def test_the_bounds_are_the_2024_guidelines_table_and_hold_at_their_edge():
    """Bossuat et al. 2024 (ternary secret, sigma 3.19), the stricter of the published tables:
    log2(QP) at the bound is secure, one bit above is not (primes given, so log2(QP) is exact)."""
    assert SECURITY_BOUNDS_128 == {4096: 106, 8192: 214, 16384: 430, 32768: 868, 65536: 1747}
    from fhelium_cupy.ckks.primes import generate_ntt_primes

    n = 1 << 14
    (p,) = generate_ntt_primes(60, 1, n, balanced=False)  # below 2**60
    under = generate_ntt_primes(37, 10, n, balanced=False, exclude={p})  # each below 2**37: under 430 bits
    edge = Parameters.from_literal(ParametersLiteral(log_n=14, q_moduli=under, p_moduli=(p,)))
    assert 429.99 < edge.log2_qp <= 430 and edge.security_issue() is None
    (extra,) = generate_ntt_primes(30, 1, n, exclude={p, *under})
    over = ParametersLiteral(log_n=14, q_moduli=(*under, extra), p_moduli=(p,))
    with pytest.raises(InsecureParametersError, match="430 bits"):
        Parameters.from_literal(over)


def test_sigma_below_the_standard_error_is_insecure():
    """The 128-bit bounds assume sigma >= 3.19 (FHElium's default; 8/sqrt(2 pi) = 3.1915
    rounded); a smaller error (e.g. 1e-6: every sample 0) would let the secret follow from
    the public key."""
    from fhelium_cupy.ckks.params import SIGMA_MIN_128

    assert SIGMA_MIN_128 == 3.19
    fhelium_default = ParametersLiteral(log_n=14, q_bits=(40,) * 3, p_bits=(50,), sigma=3.19)
    assert Parameters.from_literal(fhelium_default).security_issue() is None
    with pytest.raises(InsecureParametersError, match="sigma"):
        Parameters.from_literal(ParametersLiteral(log_n=14, q_bits=(40,) * 3, p_bits=(50,), sigma=3.18))
    literal = ParametersLiteral(log_n=14, q_bits=(40,) * 3, p_bits=(50,), sigma=1e-6)
    with pytest.raises(InsecureParametersError, match="sigma"):
        Parameters.from_literal(literal)
    weak = Parameters.from_literal(literal, insecure=True)
    assert weak.insecure and "sigma" in weak.security_issue()
    assert Parameters.from_literal(ParametersLiteral(log_n=14, q_bits=(40,) * 3, p_bits=(50,))).security_issue() is None
    with pytest.raises(InsecureParametersError, match="sigma"):
        CkksEngine(literal)


def test_replace_or_direct_construction_cannot_skip_the_bound():
    """Parameters validates itself however it is made: dataclasses.replace of a secure preset
    with more primes or a zero error, or direct construction, needs insecure=True too."""
    base = Parameters.preset("slots8192-scale40-depth7")
    extra = tuple(m for m in generate_ntt_primes(40, 20, base.ring_degree) if m not in base.moduli)[:3]
    assert len(extra) == 3 and base.log2_qp + 3 * 39 > SECURITY_BOUNDS_128[base.ring_degree]
    more = dict(q_moduli=base.q_moduli + extra, digits=balanced_digits(len(base.q_moduli) + len(extra),
                                                                        len(base.q_moduli) + len(extra)))
    with pytest.raises(InsecureParametersError, match="exceeds"):
        dataclasses.replace(base, **more)
    assert dataclasses.replace(base, **more, insecure=True).insecure
    with pytest.raises(ConfigurationError, match="sigma"):
        dataclasses.replace(base, sigma=0.0)
    for sigma in (1024.5, 1e9):  # the sampler's table is 10 sigma entries: 1e9 exhausted memory
        with pytest.raises(ConfigurationError, match="sigma must be a float in"):
            dataclasses.replace(base, sigma=sigma)
    assert dataclasses.replace(base, sigma=1024.0).sigma == 1024.0
    with pytest.raises(InsecureParametersError, match="sigma"):
        dataclasses.replace(base, sigma=1.0)
    with pytest.raises(InsecureParametersError, match="no 128-bit"):
        Parameters(name="x", ring_degree=4096 // 2, q_moduli=tuple(generate_ntt_primes(30, 2, 2048)),
                   p_moduli=tuple(generate_ntt_primes(31, 1, 2048)), scale=2.0**30, digits=((0,), (1,)))
    with pytest.raises(ConfigurationError, match="partition"):
        dataclasses.replace(base, digits=((0, 1),))
    with pytest.raises(ConfigurationError, match="NTT-friendly"):
        dataclasses.replace(base, p_moduli=(base.p_moduli[0] + 2,))
    with pytest.raises(ConfigurationError, match="scale"):
        dataclasses.replace(base, scale=40)
    # an engine built from such a set needs its own opt-in as before
    with pytest.raises(InsecureParametersError):
        CkksEngine(dataclasses.replace(base, **more, insecure=True))


@pytest.mark.parametrize("flag", ["false", "no", 1, 0, None, np.bool_(True)])
def test_the_insecure_opt_in_must_be_a_real_bool(flag):
    """A config-file string such as "false" is truthy: it must not unlock test parameters."""
    with pytest.raises(TypeError, match="insecure must be True or False"):
        Parameters.preset("test-n4096-scale40", insecure=flag)
    with pytest.raises(TypeError, match="insecure must be True or False"):
        CkksEngine("test-n4096-scale40", device="cpu", insecure=flag)
    with pytest.raises(TypeError, match="insecure must be True or False"):
        dataclasses.replace(Parameters.preset("slots8192-scale40-depth7"), insecure=flag)
    assert Parameters.preset("test-n4096-scale40", insecure=True).insecure is True


def test_special_primes_must_cover_half_the_largest_digit():
    """Hybrid key switching divides a digit's product by P; a 20-bit P under one 120-bit digit
    (a set the 128-bit bound accepts) decrypted rotations to ~1e25 (security audit, session 25).
    Refused, with what to change; P at least half the digit passes."""
    with pytest.raises(ConfigurationError, match="special primes' product P"):
        Parameters.from_literal(ParametersLiteral(log_n=13, q_bits=(40, 40, 40), p_bits=(20,), dnum=1))
    with pytest.raises(ConfigurationError, match="special primes' product P"):  # 2P ~ 2**39 < one 40-bit digit
        Parameters.from_literal(ParametersLiteral(log_n=13, q_bits=(40, 40, 40), p_bits=(38,), dnum=3))
    ok = Parameters.from_literal(ParametersLiteral(log_n=13, q_bits=(40, 40, 40), p_bits=(40,), dnum=3))
    assert not ok.insecure and 2 * ok.p_moduli[0] >= max(ok.q_moduli)


def test_explicit_moduli_must_be_integers_and_61_bit_chains_are_found():
    """A fractional modulus was truncated to another prime silently; two 61-bit Q primes
    failed with "not enough 61-bit NTT primes" (the balanced search stepped above 2^61)."""
    good = generate_ntt_primes(30, 1, 1024)[0]
    with pytest.raises(ConfigurationError, match="integers"):
        Parameters.from_literal(ParametersLiteral(log_n=10, q_moduli=(good + 0.9,), p_moduli=(good + 2048,)),
                                insecure=True)
    with pytest.raises(ConfigurationError, match="integers"):
        Parameters.from_literal(ParametersLiteral(log_n=10, q_moduli=(True,), p_bits=(40,)), insecure=True)
    primes = generate_ntt_primes(61, 3, 1024)
    assert len(set(primes)) == 3 and all(p.bit_length() == 61 and p % 2048 == 1 for p in primes)
    params = Parameters.from_literal(ParametersLiteral(log_n=10, q_bits=(61, 61), p_bits=(61,)), insecure=True)
    assert all(m.bit_length() == 61 for m in params.moduli)


def test_the_security_table_is_read_only():
    with pytest.raises(TypeError):
        SECURITY_BOUNDS_128[4096] = 10_000  # type: ignore[index]
