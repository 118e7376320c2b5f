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


def _swap_keys_after_each_check(monkeypatch, engine):
    """Make ``engine._check_own_secret`` install another engine's secret right after each
    check, where another thread's ``generate_keys`` would land; returns the real check."""
    other = CkksEngine("test-n4096-scale30", insecure=True).generate_keys().secret_key
    checked = engine._check_own_secret

    def check_then_swap(value, op):
        chain = checked(value, op)
        engine.generate_keys(other)  # "another thread"
        return chain

    monkeypatch.setattr(engine, "_check_own_secret", check_then_swap)
    return checked


def test_decrypt_uses_the_secret_it_checked_when_another_thread_replaces_the_keys(monkeypatch):
    """The window a thread race opened (audit, session 30): decrypt checked the ciphertext
    against one key chain and then read ``engine.keys`` again, so a ``generate_keys`` of another
    thread in between made it decrypt with the other secret: garbage, silently, and a flooded
    decryption counted against one secret while another was used. The swap is made here right
    after the check, where the other thread's would land."""
    from fhelium_cupy.ckks import NoiseFlooding

    engine = CkksEngine("test-n4096-scale30", insecure=True)
    first = engine.generate_keys()
    ct = engine.encrypt_message(np.full(4, 0.5))
    _swap_keys_after_each_check(monkeypatch, engine)
    np.testing.assert_allclose(engine.decrypt_message(ct, real=True)[:4], 0.5, atol=1e-3)
    engine.generate_keys(first.secret_key)
    before = engine.flooded_decryptions
    flooded = engine.decrypt_message(ct, real=True, flooding=NoiseFlooding(error_bits=10.0, queries=4))
    assert np.max(np.abs(flooded[:4] - 0.5)) < 1e3  # the flooding noise (~10 at this scale), not ~1e30
    engine.generate_keys(first.secret_key)
    assert engine.flooded_decryptions == before + 1  # counted against the secret that was used
    assert engine.measure_error_bits(ct, np.full(4, 0.5)) < 20  # (garbage measures ~2^60)


def test_conjugate_uses_the_chain_it_checked_when_another_thread_replaces_the_keys(monkeypatch):
    """conjugate with its own key read ``engine.keys`` again after the check (audit, session
    32): a swap in between made it fail with a ForeignKeyError after generating a conjugation
    key for the other chain."""
    engine = CkksEngine("test-n4096-scale30", insecure=True)
    first = engine.generate_keys()
    ct = engine.encrypt_message(np.array([0.5 + 0.25j, -0.5j]))
    checked = _swap_keys_after_each_check(monkeypatch, engine)
    conj = engine.conjugate(ct)
    monkeypatch.setattr(engine, "_check_own_secret", checked)
    engine.generate_keys(first.secret_key)
    np.testing.assert_allclose(engine.decrypt_message(conj)[:2], [0.5 - 0.25j, 0.5j], atol=1e-3)


def test_racing_registrations_of_one_name_leave_one_owner():
    from fhelium_cupy import values

    def make(i):
        return type(f"Raced{i}", (), {"value_metadata": lambda s: {}, "value_tensors": lambda s: {},
                                      "with_value_tensors": lambda s, t: s})

    for run in range(200):
        name = f"tests.raced{run}"
        classes = [make(i) for i in range(4)]

        def register(i, name=name, classes=classes):
            try:
                values.register_value_type(classes[i], type_name=name)
                return True
            except ValueError:
                return False

        won = run_together(register, 4)  # (a barrier and a 1 us switch interval)
        assert sum(won) == 1, run  # exactly one class took the name
        owner = values._BY_NAME[name].cls
        assert [c for c in classes if c in values._REGISTRY] == [owner]


def test_keys_are_complete_on_the_device_before_they_are_handed_out():
    """A key chain's public key and each evaluation key are cached for workers of other threads,
    which read them on their own CUDA streams: the backend's current stream has finished
    generating one before it is cached (``complete_for_other_streams``; the CuPy backend
    synchronizes its stream, outside a capture), and a cache hit waits for nothing."""
    from types import SimpleNamespace

    from fhelium_cupy.ckks.keygen import KeyChain

    events: list[str] = []

    class Generator:
        context = SimpleNamespace(ring_degree=16)
        backend = SimpleNamespace(complete_for_other_streams=lambda: events.append("complete"))

        def secret_key(self):
            events.append("secret")
            return SimpleNamespace(key_id="k")

        def public_key(self, sk):
            events.append("public")
            return "pk"

        def relinearization_key(self, sk):
            events.append("relin")
            return object()

        def conjugation_key(self, sk):
            events.append("conj")
            return object()

        def rotation_key(self, sk, step):
            events.append(f"rot{step}")
            return object()

    chain = KeyChain(Generator())
    assert events == ["secret", "public", "complete"]
    for make, name in ((chain.relinearization_key, "relin"), (chain.conjugation_key, "conj"),
                       (lambda: chain.rotation_key(3), "rot3")):
        del events[:]
        key = make()
        assert events == [name, "complete"]
        assert make() is key and events == [name, "complete"]  # the hit: nothing generated or awaited
