"""What decryption tests cannot see: the secret is ternary, keys carry small non-zero errors,
ciphertexts are randomized and look uniform, and a wrong secret decrypts to noise.

Every other CKKS test would still pass with a zero secret or noise-free encryption (the
message would sit in c0 in the clear), so these properties are checked on their own,
against integers recovered from the residues (exact NumPy backend).
"""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks import Ciphertext, CkksEngine
from tests.helpers.ckks_engines import make_engine, random_message

PRESET = "test-n4096-scale40"


def _centered(engine, ntt_standard, rows) -> np.ndarray:
    """Integer coefficients (centered mod each prime) of NTT-domain, standard-form rows."""
    be = engine.backend
    coeffs = np.asarray(be.ntt_inverse(np.ascontiguousarray(ntt_standard), rows))
    q = np.array([engine.context.moduli[r] for r in rows], dtype=np.int64)[:, None]
    c = coeffs.astype(np.int64)
    return np.where(c > q // 2, c - q, c)


def _same_small_poly(engine, ntt_standard, rows) -> np.ndarray:
    """The one small integer polynomial that every row holds (asserted), as int64."""
    c = _centered(engine, ntt_standard, rows)
    assert (c == c[0]).all(), "the rows are not one small polynomial reduced mod each prime"
    return c[0]


def test_the_secret_key_is_ternary_and_balanced():
    e = make_engine(PRESET)
    rows = e.context.qp_ids
    s = _same_small_poly(e, e.key_generator.secret_standard(e.keys.secret_key), rows)
    n = e.context.ring_degree
    values, counts = np.unique(s, return_counts=True)
    assert set(values.tolist()) == {-1, 0, 1}
    assert np.all(np.abs(counts - n / 3) < 6 * np.sqrt(n * 2 / 9))  # 6 sigma of a multinomial count


def _assert_gaussian_error(err: np.ndarray, sigma: float) -> None:
    assert np.any(err != 0), "a key without error: the secret follows from it by linear algebra"
    assert np.max(np.abs(err)) <= 10 * sigma
    assert 0.8 * sigma < float(np.std(err)) < 1.2 * sigma


def test_the_public_key_hides_the_secret_behind_a_small_nonzero_error():
    e = make_engine(PRESET)
    be, rows, sigma = e.backend, e.context.qp_ids, e.context.parameters.sigma
    s = e.key_generator.secret_standard(e.keys.secret_key)
    pk = e.key_generator.public_key(e.keys.secret_key)
    b, a = be.from_montgomery(np.ascontiguousarray(pk.data), rows)  # b + a*s = e
    _assert_gaussian_error(_same_small_poly(e, be.add(b, be.mul(a, s, rows), rows), rows), sigma)
    assert len(np.unique(np.asarray(a)[0])) > 0.99 * e.context.ring_degree  # a is uniform


def test_relinearization_key_digits_carry_small_nonzero_errors():
    e = make_engine(PRESET)
    be, ctx = e.backend, e.context
    rows, sigma = ctx.qp_ids, ctx.parameters.sigma
    s = e.key_generator.secret_standard(e.keys.secret_key)
    s2 = be.mul(s, s, rows)
    P = 1
    for r in ctx.p_ids:
        P *= ctx.moduli[r]
    data = be.from_montgomery(np.ascontiguousarray(e.keys.relinearization_key().data), rows)
    for d, digit in enumerate(ctx.digits):
        b, a = data[d, 0], data[d, 1]
        err = be.add(b, be.mul(a, s, rows), rows)  # e_d + P * g_d * s^2 on the digit's rows
        lo, hi = digit[0], digit[-1] + 1
        gadget = be.mul_scalar(np.ascontiguousarray(s2[lo:hi]), [P] * (hi - lo), tuple(digit))
        err[lo:hi] = be.sub(np.ascontiguousarray(err[lo:hi]), gadget, tuple(digit))
        _assert_gaussian_error(_same_small_poly(e, err, rows), sigma)


def test_encryption_is_randomized_and_its_mask_looks_uniform():
    e = make_engine(PRESET)
    m = random_message(e, 1)
    first, second = e.encrypt_message(m), e.encrypt_message(m)
    for component in (0, 1):
        assert not np.array_equal(first.data[component], second.data[component])
    rows = first.prime_ids
    n = e.context.ring_degree
    for i, r in enumerate(rows):
        c1 = np.asarray(first.data[1, i])
        assert len(np.unique(c1)) > 0.99 * n  # the message is not sitting in c0 with c1 = 0
        assert int(c1.max()) > e.context.moduli[r] // 2


def test_another_secret_decrypts_to_noise():
    e = make_engine(PRESET)
    stranger = CkksEngine(PRESET, insecure=True)
    stranger.generate_keys()
    m = random_message(e, 2)
    ct = e.encrypt_message(m)
    meta = dict(ct.value_metadata())
    meta["key_id"] = stranger.keys.key_id  # relabelled so the stranger agrees to decrypt it
    forged = Ciphertext(ct.data, **meta)
    assert np.max(np.abs(e.decrypt_message(ct) - m)) < 1e-6
    assert np.max(np.abs(stranger.decrypt_message(forged) - m)) > 1e3


def test_adopting_a_saved_secret_key_decrypts_the_owner_s_ciphertexts(tmp_path):
    """generate_keys(secret_key=...) keeps the given secret (also through a file)."""
    from fhelium_cupy.ckks import load_value, save_value

    owner = make_engine(PRESET)
    m = random_message(owner, 3)
    ct = owner.encrypt_message(m)
    heir = CkksEngine(PRESET, insecure=True)
    secret = load_value(save_value(owner.keys.secret_key, tmp_path / "sk.npz"), engine=heir)
    chain = heir.generate_keys(secret_key=secret)
    assert chain.key_id == owner.keys.key_id
    assert np.max(np.abs(heir.decrypt_message(ct) - m)) < 1e-6
    rotated = heir.rotate_with_key(heir.encrypt_message(m), heir.rotation_key(1))  # its own keys work too
    assert np.max(np.abs(owner.decrypt_message(rotated) - np.roll(m, 1))) < 1e-6



def _secret_from_coefficients(engine, coefficients):
    """A SecretKey holding ``coefficients`` (one int64 array, or one per QP row)."""
    from fhelium_cupy.ckks import SecretKey

    kg, be, qp = engine.key_generator, engine.backend, engine.context.qp_ids
    coefficients = np.asarray(coefficients, dtype=np.int64)
    if coefficients.ndim == 1:
        ntt = kg._small_ntt(coefficients, qp)
    else:  # row r from coefficients[r]
        ntt = np.stack([kg._small_ntt(coefficients[i], (r,))[0] for i, r in enumerate(qp)])
    return SecretKey(be.to_montgomery(ntt, qp), prime_ids=qp, context_id=engine.context.context_id,
                     key_id="adopted0123456789")


def test_an_adopted_secret_must_be_one_dense_ternary_polynomial():
    """generate_keys(secret) adopted any SecretKey: an all-zero one left every ciphertext's
    c0 its message (security audit, session 25). Now the secret must be ternary, the same
    polynomial in every QP row, with at least N/4 non-zero coefficients; a refused secret
    leaves the engine's keys as they were."""
    from fhelium_cupy.errors import StateMismatchError

    e = make_engine(PRESET)
    before = e.keys.key_id
    n, rows = e.context.ring_degree, len(e.context.qp_ids)
    ternary = np.array([(-1, 0, 1)[i % 3] for i in range(n)])
    uneven = np.tile(ternary, (rows, 1))
    uneven[-1, 7] = (uneven[-1, 7] + 2) % 3 - 1  # one row differs in one coefficient
    sparse = np.zeros(n, np.int64)
    sparse[: n // 4 - 1] = 1
    for coefficients, reason in ((np.zeros(n), "ternary|non-zero"), (np.full(n, 12345), "ternary"),
                                 (2 * ternary, "ternary"), (uneven, "ternary"), (sparse, "N/4")):
        with pytest.raises(StateMismatchError, match=reason):
            e.generate_keys(_secret_from_coefficients(e, coefficients))
        assert e.keys.key_id == before
    sparse[n // 4 - 1] = -1  # exactly N/4 non-zero: adopted
    adopted = e.generate_keys(_secret_from_coefficients(e, sparse))
    assert adopted.key_id == "adopted0123456789"
    m = random_message(e, 1)
    np.testing.assert_allclose(e.decrypt_message(e.encrypt_message(m)), m, atol=1e-6)


def test_an_adopted_secret_must_hold_residues_below_its_primes():
    """sk.data + k q passed the ternary check (the inverse NTT reduced it) and then decrypted
    to garbage (off by 3e22 at k = 1000), while load_value refused the same key (audit,
    session 32)."""
    from fhelium_cupy.ckks.keys import SecretKey
    from fhelium_cupy.errors import StateMismatchError

    e = make_engine(PRESET)
    sk = e.keys.secret_key
    before = e.keys.key_id
    moduli = np.array([e.context.moduli[r] for r in sk.prime_ids], dtype=np.uint64)[:, None]
    for k in (1, 1000):
        shifted = SecretKey(sk.data + np.uint64(k) * moduli, prime_ids=sk.prime_ids, context_id=sk.context_id,
                            key_id="shifted0123456789")
        with pytest.raises(StateMismatchError, match="residues below their primes"):
            e.generate_keys(shifted)
        assert e.keys.key_id == before


def test_parameters_changed_after_validation_are_checked_again():
    """A frozen Parameters object edited with object.__setattr__, or unpickled (no
    __post_init__), could claim insecure=False for an insecure set; the context checks again."""
    import pickle

    from fhelium_cupy.ckks import CkksContext, Parameters
    from fhelium_cupy.errors import InsecureParametersError

    weak = Parameters.preset(PRESET, insecure=True)
    tampered = pickle.loads(pickle.dumps(weak))
    object.__setattr__(tampered, "insecure", False)
    for make in (lambda: CkksContext(tampered), lambda: CkksEngine(tampered)):
        with pytest.raises(InsecureParametersError, match="marked secure"):
            make()
    CkksContext(weak)  # flagged insecure: the caller's opt-in stands


def test_randomness_is_never_drawn_inside_a_graph_capture(monkeypatch):
    """A captured encryption would replay one recorded mask and error for every ciphertext
    (security audit, session 25): encryption and key generation refuse to run while the
    backend's stream captures (the GPU test captures one for real)."""
    from fhelium_cupy.errors import ExecutionError

    e = make_engine(PRESET)
    m = random_message(e, 1)
    e.encrypt_message(m)
    monkeypatch.setattr(e.backend, "is_capturing", lambda: True)
    pt = e.encode(m, polynomial_domain="coefficient")
    secret = e.keys.secret_key
    for call in (lambda: e.encrypt_message(m), lambda: e.encrypt(pt), lambda: e.rotation_key(5), lambda: e.generate_keys(),
                 lambda: e.generate_keys(secret),
                 lambda: e.key_generator.public_key(e.keys.secret_key)):
        with pytest.raises(ExecutionError, match="cannot run inside a CUDA Graph capture"):
            call()
