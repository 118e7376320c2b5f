"""Save/load of values: round trips, header validation, foreign identities."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fhelium_cupy.ckks import CkksEngine, load_value, save_value
from fhelium_cupy.errors import ForeignContextError, ForeignKeyError, SerializationError, StateMismatchError
from tests.helpers.ckks_engines import forge_npz, make_engine, random_message, rewrite_saved_value


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_saved_and_reloaded_ciphertext_decrypts_to_the_same_message(tmp_path, suffix):
    e = make_engine("test-n4096-scale40")
    m = random_message(e, 1)
    ct = e.rescale_to_next_level(
        e.multiply_plaintext(e.coefficient_domain_to_ntt_domain(e.encrypt_message(m)), e.encode(np.ones(4)))
    )
    path = save_value(ct, tmp_path / f"ct{suffix}")
    back = load_value(path, engine=e)
    assert type(back) is type(ct) and back.value_metadata() == ct.value_metadata()
    np.testing.assert_array_equal(back.data, ct.data)
    np.testing.assert_array_equal(e.decrypt_message(back), e.decrypt_message(ct))


def test_keys_and_plaintexts_round_trip(tmp_path):
    e = make_engine("test-n4096-scale40")
    for value in (
        e.rotation_key(3),
        e.relinearization_key(),
        e.conjugation_key(),
        e.keys.public_key,
        e.encode(np.ones(3)),
    ):
        back = load_value(save_value(value, tmp_path / "v.safetensors"), engine=e)
        assert type(back) is type(value) and back.value_metadata() == value.value_metadata()
        np.testing.assert_array_equal(back.data, value.data)
    rk = load_value(save_value(e.rotation_key(3), tmp_path / "r.npz"), context=e.context)
    m = random_message(e, 2)
    assert np.max(np.abs(e.decrypt_message(e.rotate_with_key(e.encrypt_message(m), rk)) - np.roll(m, 3))) < 1e-6


def test_loading_refuses_foreign_context_foreign_key_and_bad_headers(tmp_path):
    e = make_engine("test-n4096-scale40")
    other = make_engine("test-n4096-scale30")
    path = save_value(e.encrypt_message(random_message(e, 3)), tmp_path / "ct.npz")
    with pytest.raises(ForeignContextError):
        load_value(path, engine=other)
    stranger = CkksEngine("test-n4096-scale40", insecure=True)
    stranger.generate_keys()
    with pytest.raises(ForeignKeyError):
        load_value(path, engine=stranger)
    with np.load(path) as archive:
        header, data = json.loads(str(archive["header"])), archive["data"]
    for change in ({"schema_version": 99}, {"schema_version": True}, {"schema_version": 1.0},
                   {"type_name": "nope"}, {"format": "x"}):
        bad = tmp_path / "bad.npz"
        forge_npz(bad, {**header, **change}, data)
        with pytest.raises(SerializationError):
            load_value(bad, context=e.context)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a file")
    with pytest.raises(SerializationError):
        load_value(garbage, context=e.context)


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_secret_keys_are_written_for_their_owner_only(tmp_path, suffix):
    import os
    import stat

    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    e = make_engine("test-n4096-scale40")
    old = os.umask(0o022)
    try:
        target = tmp_path / f"sk{suffix}"
        target.write_bytes(b"")
        os.chmod(target, 0o644)  # an existing, world-readable file keeps no such mode
        path = save_value(e.keys.secret_key, target)
        ct_path = save_value(e.encrypt_message(random_message(e, 1)), tmp_path / f"ct{suffix}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    if suffix == ".npz":  # other values follow the umask (safetensors itself writes 0600)
        assert stat.S_IMODE(os.stat(ct_path).st_mode) == 0o644
    np.testing.assert_array_equal(load_value(path, engine=e).data, e.keys.secret_key.data)


def test_loading_checks_residues_and_ring_degree_against_the_context(tmp_path):
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 1))
    good = save_value(ct, tmp_path / "ct.npz")
    with np.load(good) as archive:
        header, data = str(archive["header"]), archive["data"]
    big = data.copy()
    big[..., 0, 5] = e.context.moduli[ct.prime_ids[0]]  # one word equal to its prime
    forge_npz(tmp_path / "big.npz", json.loads(header), big)
    with pytest.raises(SerializationError, match="below their primes"):
        load_value(tmp_path / "big.npz", engine=e)
    half = np.ascontiguousarray(data[..., : data.shape[-1] // 2])
    forge_npz(tmp_path / "half.npz", json.loads(header), half)
    with pytest.raises(SerializationError, match="coefficients"):
        load_value(tmp_path / "half.npz", context=e.context)
    loaded = load_value(good, engine=e)
    np.testing.assert_array_equal(loaded.data, ct.data)
    # a value of the wrong ring degree made by hand is refused by every operation, not crashed on
    forged = ct._with_data(np.ascontiguousarray(ct.data[..., : ct.data.shape[-1] // 2]))
    for call in (lambda: e.decrypt(forged), lambda: e.add(forged, forged), lambda: e.coefficient_domain_to_ntt_domain(forged)):
        with pytest.raises(StateMismatchError, match="coefficients per limb"):
            call()


def test_loading_needs_the_parameters_it_checks_against(tmp_path):
    e = make_engine("test-n4096-scale40")
    path = save_value(e.encrypt_message(random_message(e, 1)), tmp_path / "ct.npz")
    with pytest.raises(TypeError, match="engine= or context="):
        load_value(path)


def test_loading_refuses_states_that_contradict_the_context(tmp_path):
    e = make_engine("test-n4096-scale40")
    ct_path = save_value(e.encrypt_message(random_message(e, 1)), tmp_path / "ct.npz")
    rk_path = save_value(e.rotation_key(2), tmp_path / "rk.npz")
    conj_path = save_value(e.conjugation_key(), tmp_path / "conj.npz")
    pk_path = save_value(e.keys.generator.public_key(e.keys.secret_key), tmp_path / "pk.npz")
    n = e.context.ring_degree
    forged = {
        "ciphertext level": rewrite_saved_value(ct_path, tmp_path / "a.npz", meta={"level": 1}),
        "ciphertext basis": rewrite_saved_value(ct_path, tmp_path / "b.npz", meta={"modulus_basis": "QP"}),
        "ciphertext form": rewrite_saved_value(ct_path, tmp_path / "c.npz", meta={"residue_representation": "montgomery"}),
        "unknown metadata": rewrite_saved_value(ct_path, tmp_path / "d.npz", meta={"foo": 1}),
        "compressed": rewrite_saved_value(ct_path, tmp_path / "e.npz", compressed=True),
        "relabelled rotation": rewrite_saved_value(rk_path, tmp_path / "f.npz", meta={"rotation_step": 1}),
        "rotation galois": rewrite_saved_value(rk_path, tmp_path / "g.npz", meta={"galois_element": 3}),
        "conjugation galois": rewrite_saved_value(conj_path, tmp_path / "h.npz", meta={"galois_element": 5}),
        "key digits": rewrite_saved_value(rk_path, tmp_path / "i.npz", data=lambda d: np.concatenate([d, d[:1]])),
        "public key primes": rewrite_saved_value(
            pk_path, tmp_path / "j.npz", meta={"prime_ids": list(e.context.qp_ids[:-1])},
            data=lambda d: np.ascontiguousarray(d[:, :-1])),
    }
    assert e.conjugation_key().galois_element == 2 * n - 1
    for what, path in forged.items():
        with pytest.raises(SerializationError):
            load_value(path, engine=e)
            pytest.fail(f"{what}: accepted")
    for good in (ct_path, rk_path, conj_path, pk_path):  # the originals load
        load_value(good, engine=e)


def test_operations_refuse_keys_of_another_shape():
    from fhelium_cupy.ckks import RotationKey
    e = make_engine("test-n4096-scale40")
    rk = e.rotation_key(1)
    short = RotationKey(np.ascontiguousarray(rk.data[:-1]), prime_ids=rk.prime_ids, context_id=rk.context_id,
                        key_id=rk.key_id, galois_element=rk.galois_element, rotation_step=1)
    with pytest.raises(StateMismatchError, match="digits"):
        e.rotate_with_key(e.encrypt_message(random_message(e, 1)), short)
    with pytest.raises(StateMismatchError, match="galois_element"):
        RotationKey(rk.data, prime_ids=rk.prime_ids, context_id=rk.context_id, key_id=rk.key_id,
                    galois_element=rk.galois_element, rotation_step=2)


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_a_secret_key_never_goes_through_a_symlink(tmp_path, suffix):
    import os
    import stat

    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    e = make_engine("test-n4096-scale40")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"untouched")
    link = tmp_path / f"sk{suffix}"
    link.symlink_to(elsewhere)
    path = save_value(e.keys.secret_key, link)
    assert elsewhere.read_bytes() == b"untouched"
    assert not path.is_symlink() and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    np.testing.assert_array_equal(load_value(path, engine=e).data, e.keys.secret_key.data)


def test_loading_a_key_asks_nothing_of_the_secret(tmp_path):
    """The decryption oracle load_value was (security audit, session 25): with the engine's
    secret at hand it tested whether b + a*s of a loaded key was small, and a forged public
    key (H X^j, 1) under the engine's label made that H + s_j, so accept / reject at H on
    both sides of the bound (or the error's number) gave s_j. Both forgeries now load alike,
    unchanged, with the engine as with the context alone."""
    from fhelium_cupy.ckks import PublicKey

    e = make_engine("test-n4096-scale40")
    kg, be, qp, n = e.key_generator, e.backend, e.context.qp_ids, e.context.ring_degree
    assert e.keys.key_id  # the engine holds its secret
    unit = np.zeros(n, np.int64)
    unit[0] = 1
    a = kg._small_ntt(unit, qp)
    for h in (1 << 20, (1 << 20) + 1):  # the old bound and one past it
        b = np.zeros(n, np.int64)
        b[5] = h
        data = be.to_montgomery(be.xp.stack([kg._small_ntt(b, qp), a]), qp)
        forged = PublicKey(data, prime_ids=qp, context_id=e.context.context_id, key_id=e.keys.key_id)
        path = save_value(forged, tmp_path / f"pk{h}.npz")
        for kwargs in ({"engine": e}, {"context": e.context}):
            np.testing.assert_array_equal(load_value(path, **kwargs).data, forged.data)


def test_a_key_labelled_for_another_secret_is_refused_and_a_relabelled_one_is_only_a_label(tmp_path):
    e = make_engine("test-n4096-scale40")
    stranger = CkksEngine("test-n4096-scale40", insecure=True)
    stranger.generate_keys()
    for name, key in (("relin", stranger.relinearization_key()), ("rot", stranger.rotation_key(3)),
                      ("conj", stranger.conjugation_key()), ("pk", stranger.keys.public_key)):
        path = save_value(key, tmp_path / f"{name}.npz")
        with pytest.raises(ForeignKeyError, match="secret key"):
            load_value(path, engine=e)  # the label names another secret: a mix-up, caught
        forged = rewrite_saved_value(path, tmp_path / f"{name}-forged.npz", meta={"key_id": e.keys.key_id})
        np.testing.assert_array_equal(load_value(forged, engine=e).data, key.data)  # labels are not authentication
    for key in (e.relinearization_key(), e.rotation_key(3), e.conjugation_key()):  # own keys load
        load_value(save_value(key, tmp_path / "own.npz"), engine=e)
    worst = e.key_generator._key_error_magnitude(e.keys.secret_key, e.relinearization_key())
    assert 0 < worst <= 10 * e.context.parameters.sigma


def test_a_missing_file_is_file_not_found(tmp_path):
    e = make_engine("test-n4096-scale40")
    for path in (tmp_path / "absent.npz", tmp_path / "absent.safetensors", tmp_path):
        with pytest.raises(FileNotFoundError, match="no saved value"):
            load_value(path, engine=e)


# -- authentication (HMAC-SHA256, opt-in) ---------------------------------------------------

_AUTH_KEY = bytes(range(32))  # a test key; real ones come from os.urandom or a key exchange


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_an_authenticated_file_loads_only_with_its_key_and_unchanged(tmp_path, suffix):
    e = make_engine("test-n4096-scale40")
    m = random_message(e, 5)
    ct = e.encrypt_message(m)
    path = save_value(ct, tmp_path / f"ct{suffix}", authentication_key=_AUTH_KEY)
    back = load_value(path, engine=e, authentication_key=bytearray(_AUTH_KEY))
    np.testing.assert_array_equal(back.data, ct.data)
    np.testing.assert_allclose(e.decrypt_message(back), m, atol=1e-6)
    with pytest.raises(SerializationError, match="authentication failed"):
        load_value(path, engine=e, authentication_key=bytes(32))
    np.testing.assert_array_equal(load_value(path, engine=e).data, ct.data)  # without a key the tag is ignored


def test_a_changed_residue_or_field_fails_authentication(tmp_path):
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 6))
    path = save_value(ct, tmp_path / "ct.npz", authentication_key=_AUTH_KEY)

    def one_residue_moved(a):
        a = a.copy()
        a[0, 0, 0] = (int(a[0, 0, 0]) + 1) % e.context.moduli[0]  # still a valid residue
        return a

    forged_data = rewrite_saved_value(path, tmp_path / "data.npz", data=one_residue_moved)
    forged_scale = rewrite_saved_value(path, tmp_path / "scale.npz", meta={"scale": ct.scale * 2})
    for forged in (forged_data, forged_scale):
        load_value(forged, engine=e)  # a valid value for anyone who does not check the tag
        with pytest.raises(SerializationError, match="authentication failed"):
            load_value(forged, engine=e, authentication_key=_AUTH_KEY)
    unsigned = save_value(ct, tmp_path / "plain.npz")
    with pytest.raises(SerializationError, match="not authenticated"):
        load_value(unsigned, engine=e, authentication_key=_AUTH_KEY)


def test_a_bad_authentication_key_is_refused_before_any_file_is_touched(tmp_path):
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 7))
    for bad, error in (("a password", TypeError), (b"short", ValueError), (12345, TypeError)):
        with pytest.raises(error, match="authentication_key"):
            save_value(ct, tmp_path / "never.npz", authentication_key=bad)
        with pytest.raises(error, match="authentication_key"):
            load_value(tmp_path / "missing.npz", engine=e, authentication_key=bad)  # not FileNotFoundError
    assert not (tmp_path / "never.npz").exists()


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_any_single_bit_flip_of_an_authenticated_file_s_content_is_refused(data):
    """Every bit of the data and of the header's fields is covered by the tag."""
    import tempfile
    from pathlib import Path

    e = make_engine("test-n4096-scale40")
    ct = _AUTH_CT.setdefault("ct", e.encrypt_message(random_message(e, 8)))
    where = data.draw(st.sampled_from(["data", "scale", "level", "key_id"]))
    with tempfile.TemporaryDirectory() as folder:
        path = save_value(ct, Path(folder) / "ct.npz", authentication_key=_AUTH_KEY)
        if where == "data":
            index = tuple(data.draw(st.integers(0, s - 1)) for s in ct.data.shape)
            bit = data.draw(st.integers(0, 63))

            def flipped(a):
                a = a.copy()
                a[index] ^= np.uint64(1 << bit)
                return a

            forged = rewrite_saved_value(path, Path(folder) / "f.npz", data=flipped)
        else:
            value = {"scale": ct.scale * (1 + 2.0**-40), "level": ct.level + 1, "key_id": ct.key_id + "0"}[where]
            forged = rewrite_saved_value(path, Path(folder) / "f.npz", meta={where: value})
        with pytest.raises(SerializationError, match="authentication failed"):
            load_value(forged, engine=e, authentication_key=_AUTH_KEY)


_AUTH_CT: dict = {}


# -- files written whole, headers checked before they are acted on (audit, session 30) --------


def _stored_npz(target, members):
    """A ``.npz`` of the given raw ``.npy`` member bytes, stored (what a forger writes)."""
    import zipfile

    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
        for name, raw in members.items():
            archive.writestr(name, raw)
    return target


def _npy(header, body=b""):
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + body


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_a_failed_save_leaves_the_file_that_was_there(tmp_path, suffix, monkeypatch):
    """Every value goes to a new file that replaces the old one only once it is on the disk: a
    write that fails (a full disk) leaves the old file loadable and no temporary behind."""
    import os

    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    e = make_engine("test-n4096-scale40")
    for value in (e.keys.public_key, e.encrypt_message(random_message(e, 9))):
        path = save_value(value, tmp_path / f"v{suffix}")
        before = path.read_bytes()

        def full_disk(_fd):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", full_disk)
        with pytest.raises(OSError, match="No space"):
            save_value(e.encrypt_message(random_message(e, 10)), path)
        monkeypatch.undo()
        assert path.read_bytes() == before
        np.testing.assert_array_equal(load_value(path, engine=e).data, value.data)
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_no_value_is_written_through_a_symlink(tmp_path):
    e = make_engine("test-n4096-scale40")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"untouched")
    link = tmp_path / "ct.npz"
    link.symlink_to(elsewhere)
    ct = e.encrypt_message(random_message(e, 11))
    path = save_value(ct, link)
    assert elsewhere.read_bytes() == b"untouched" and not path.is_symlink()
    np.testing.assert_array_equal(load_value(path, engine=e).data, ct.data)


@pytest.mark.parametrize("key", [None, _AUTH_KEY], ids=["no key", "with key"])
def test_a_forged_member_shape_is_refused_before_anything_is_allocated(tmp_path, key):
    """NumPy allocates an array from its ``.npy`` header's shape before it reads the bytes: a
    2 KB file claiming 2^37 words (1 TiB) must be refused from the header and the member's size,
    with or without an authentication key (the tag is checked on the data, so after reading it)."""
    e = make_engine("test-n4096-scale40")
    path = save_value(e.encrypt_message(random_message(e, 12)), tmp_path / "ct.npz", authentication_key=_AUTH_KEY)
    with np.load(path) as archive:
        header = json.loads(str(archive["header"]))
    header_npy = _npy({"descr": np.array(json.dumps(header)).dtype.str, "fortran_order": False, "shape": ()},
                      np.array(json.dumps(header)).tobytes())
    huge_data = _npy({"descr": "<u8", "fortran_order": False, "shape": (1 << 37,)}, bytes(64))
    huge_header = _npy({"descr": "<U1", "fortran_order": False, "shape": (1 << 37,)}, bytes(64))
    wrong_type = _npy({"descr": ">u8", "fortran_order": False, "shape": (2, 1)}, bytes(16))
    with np.load(path) as archive:
        good_data = archive.zip.read("data.npy")
    cases = {"data": {"header.npy": header_npy, "data.npy": huge_data},
             "header": {"header.npy": huge_header, "data.npy": good_data},
             "byte order": {"header.npy": header_npy, "data.npy": wrong_type},
             "truncated": {"header.npy": header_npy, "data.npy": good_data[:5000]}}
    for name, members in cases.items():
        forged = _stored_npz(tmp_path / f"{name}.npz", members)
        with pytest.raises(SerializationError, match="does not match|uint64|one string"):
            load_value(forged, engine=e, authentication_key=key)


def test_a_truncated_or_malformed_file_is_a_serialization_error(tmp_path):
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 13))
    path = save_value(ct, tmp_path / "ct.npz", authentication_key=_AUTH_KEY)
    with np.load(path) as archive:
        header, data = json.loads(str(archive["header"])), archive["data"]

    def saved(name, h):
        target = tmp_path / f"{name}.npz"
        return forge_npz(target, h, data)

    no_type = saved("no_type", {k: v for k, v in header.items() if k != "type_name"})
    meta_str = saved("meta_str", {**header, "metadata": "ab"})
    ids_int = saved("ids_int", {**header, "metadata": {**header["metadata"], "prime_ids": 5}})
    ids_str = saved("ids_str", {**header, "metadata": {**header["metadata"], "prime_ids": ["0", "1"]}})
    for forged, match in ((no_type, "no value type"), (meta_str, "mapping"), (ids_int, "prime_ids"),
                          (ids_str, "prime_ids")):
        with pytest.raises(SerializationError, match=match):
            load_value(forged, engine=e)
    for tag in ("\u00e9" * 64, "AB" * 32, "00" * 31, "00" * 33):
        forged = saved("tag", {**header, "authentication": {"algorithm": "HMAC-SHA256", "tag": tag}})
        with pytest.raises(SerializationError, match="authentication failed"):
            load_value(forged, engine=e, authentication_key=_AUTH_KEY)
    import importlib.util

    if importlib.util.find_spec("safetensors") is not None:
        st_path = save_value(ct, tmp_path / "ct.safetensors")
        raw = st_path.read_bytes()
        st_path.write_bytes(raw[: len(raw) - 4096])
        with pytest.raises(SerializationError):
            load_value(st_path, engine=e)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_a_corrupted_file_is_refused_by_its_digest(tmp_path, suffix):
    """Without an authentication key a flipped bit used to load as another value in the
    safetensors format (a scale digit: 2^40 -> 3.1e12, decrypting 0.9 away; a residue bit:
    errors of 1e28). Every file now carries a SHA-256 digest of its header and data."""
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 21))
    path = save_value(ct, tmp_path / f"ct{suffix}")
    blob = path.read_bytes()
    text = json.dumps(ct.scale)  # the header: UTF-8 JSON in safetensors, a UTF-32 NumPy string in .npz
    scale_at = blob.index(text.encode() if suffix == ".safetensors" else text.encode("utf-32-le"))
    for where in (scale_at, len(blob) - 1000):  # a header digit; a residue byte
        flipped = bytearray(blob)
        flipped[where] ^= 0x02
        bad = tmp_path / f"bad{suffix}"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(SerializationError, match="corrupt|cannot read"):
            load_value(bad, engine=e)
    np.testing.assert_array_equal(load_value(path, engine=e).data, ct.data)
    with np.load(save_value(ct, tmp_path / "ct.npz")) as archive:
        header, data = json.loads(str(archive["header"])), archive["data"]
    undigested = tmp_path / "undigested.npz"
    np.savez(undigested, data=data, header=np.array(json.dumps({k: v for k, v in header.items() if k != "digest"})))
    with pytest.raises(SerializationError, match="no integrity digest"):
        load_value(undigested, engine=e)


def test_a_bare_npy_named_npz_is_refused_before_numpy_allocates(tmp_path):
    e = make_engine("test-n4096-scale40")
    fake = tmp_path / "x.npz"  # 128 bytes claiming 2^37 words: np.load would ask for 1 TiB
    fake.write_bytes(_npy({"descr": "<u8", "fortran_order": False, "shape": (1 << 37,)}, b""))
    with pytest.raises(SerializationError, match="not a .npz archive"):
        load_value(fake, engine=e)


def test_header_fields_of_other_types_or_out_of_range_values_are_serialization_errors(tmp_path):
    """save_value writes an int level, Galois element and step, a float scale (None for keys)
    and strings: anything else is a malformed header, never coerced (True was a scale of 1.0,
    "6357" a Galois element) nor a raw OverflowError / TypeError."""
    e = make_engine("test-n4096-scale40")
    ct_path = save_value(e.encrypt_message(random_message(e, 22)), tmp_path / "ct.npz")
    rk_path = save_value(e.rotation_key(3), tmp_path / "rk.npz")
    cases = [(ct_path, {"scale": 10**400}), (ct_path, {"scale": True}), (ct_path, {"scale": "1099511627776.0"}),
             (ct_path, {"prime_ids": None}), (ct_path, {"level": 0.0}), (ct_path, {"key_id": 7}),
             (rk_path, {"galois_element": float("inf")}), (rk_path, {"galois_element": "6357"}),
             (rk_path, {"rotation_step": 3.9}), (rk_path, {"rotation_step": True})]
    for i, (source, meta) in enumerate(cases):
        forged = rewrite_saved_value(source, tmp_path / f"f{i}.npz", meta=meta)
        with pytest.raises(SerializationError):
            load_value(forged, engine=e)
    assert load_value(rewrite_saved_value(ct_path, tmp_path / "same.npz"), engine=e).scale == 2.0**40


def test_a_name_near_the_file_system_limit_saves_and_loads(tmp_path):
    e = make_engine("test-n4096-scale40")
    ct = e.encrypt_message(random_message(e, 23))
    path = save_value(ct, tmp_path / ("a" * 250 + ".npz"))  # 254 bytes: its temporary file gets a short name
    np.testing.assert_array_equal(load_value(path, engine=e).data, ct.data)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_engine_and_another_context_together_are_refused(tmp_path):
    e = make_engine("test-n4096-scale40")
    path = save_value(e.encrypt_message(random_message(e, 24)), tmp_path / "ct.npz")
    with pytest.raises(TypeError, match="not both"):
        load_value(path, engine=e, context=make_engine("test-n4096-scale30").context)
    assert load_value(path, engine=e, context=e.context).level == 0  # the engine's own context is fine


def test_load_value_takes_device_0_as_cuda_0(tmp_path):
    """device=0 names cuda:0 as everywhere else; it was falsy and fell back to the engine's
    device (here the CPU)."""
    from fhelium_cupy.errors import CudaUnavailableError
    from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

    e = make_engine("test-n4096-scale40")
    path = save_value(e.encrypt_message(random_message(e, 3)), tmp_path / "ct.npz")
    if cuda_unavailable_reason() is None:
        assert str(load_value(path, engine=e, device=0).device) == "cuda:0"
    else:
        with pytest.raises(CudaUnavailableError):
            load_value(path, engine=e, device=0)
