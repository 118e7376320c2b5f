"""Save/load of values: round trips, header validation, foreign identities."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fhelium_cupy.ckks import CkksEngine, load_value, save_value
from fhelium_cupy.errors import ForeignContextError, ForeignKeyError, SerializationError
from tests.helpers.ckks_engines import make_engine, random_message


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
    for change in ({"schema_version": 99}, {"type_name": "nope"}, {"format": "x"}):
        bad = tmp_path / "bad.npz"
        np.savez(bad, data=data, header=np.array(json.dumps({**header, **change})))
        with pytest.raises(SerializationError):
            load_value(bad)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a file")
    with pytest.raises(SerializationError):
        load_value(garbage)
