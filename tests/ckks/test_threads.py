"""Workers on several host threads sharing one engine (api-reference: concurrent workers use
separate pools; the engine, its keys and backend may be shared): one key chain, one key per
kind and step, whatever the interleaving."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fhelium_cupy.ckks import CkksEngine
from tests.helpers.threads import run_together


def _race(worker: Callable[[], Any], threads: int = 8) -> list[Any]:
    results = run_together(lambda _: worker(), threads)
    assert len(results) == threads
    return results


def test_racing_workers_share_one_key_chain():
    engine = CkksEngine("test-n4096-scale30", insecure=True)
    cts = _race(lambda: engine.encrypt_message(np.full(4, 0.5)))
    assert len({ct.key_id for ct in cts}) == 1
    for ct in cts:  # every ciphertext decrypts under the one chain the engine kept
        np.testing.assert_allclose(engine.decrypt_message(ct, real=True)[:4], 0.5, atol=1e-3)


def test_racing_workers_get_one_key_per_kind_and_step():
    engine = CkksEngine("test-n4096-scale30", insecure=True)
    engine.generate_keys()
    for make in (engine.relinearization_key, engine.keys.conjugation_key, lambda: engine.rotation_key(3)):
        keys = _race(make)
        assert all(key is keys[0] for key in keys)
    assert engine.rotation_key(3 + engine.num_slots) is engine.rotation_key(3)
