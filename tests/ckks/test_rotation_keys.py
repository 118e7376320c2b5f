"""``CkksEngine.rotation_keys``: checks before generation, one key per distinct step, progress."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from fhelium_cupy import _progress
from fhelium_cupy.ckks import CkksEngine
from fhelium_cupy.ckks import engine as engine_module
from tests.helpers.ckks_engines import random_message


@pytest.fixture
def engine():
    eng = CkksEngine("test-n4096-scale30", insecure=True)
    eng.generate_keys()
    return eng


@pytest.fixture
def bars(monkeypatch):
    """Every progress bar the engine opens: [total, description, enabled, advanced]."""
    opened: list[list] = []

    @contextlib.contextmanager
    def recording_bar(total, description, *, enabled=True):
        entry = [total, description, enabled, 0]
        opened.append(entry)

        def advance(n=1):
            entry[3] += n

        yield advance

    monkeypatch.setattr(engine_module, "progress_bar", recording_bar)
    return opened


def test_rotation_keys_generate_each_distinct_step_once_and_rotate_correctly(engine, bars):
    slots = engine.num_slots
    first = engine.rotation_key(3)
    keys = engine.rotation_keys([1, 3, 1 + slots, -2, np.int64(5)], progress=True)
    assert list(keys) == [1, 3, 1 + slots, -2, 5]
    assert keys[3] is first  # cached before: not regenerated
    assert keys[1] is keys[1 + slots]  # equal modulo the slot count: one key
    assert bars == [[3, "rotation keys (N=4096)", True, 3]]  # 1, -2 and 5 were missing
    m = random_message(engine, 0)
    ct = engine.encrypt_message(m)
    for step, key in keys.items():
        got = engine.decrypt_message(engine.rotate_with_key(ct, key))
        np.testing.assert_allclose(got, np.roll(m, step), atol=1e-3)


def test_rotation_keys_check_every_argument_before_generating_any(engine, bars):
    chain = engine.keys
    with pytest.raises(TypeError, match="rotation step must be an int"):
        engine.rotation_keys([1, 2, 1.5])
    with pytest.raises(TypeError, match="progress must be a bool or None"):
        engine.rotation_keys([1, 2], progress="yes")
    assert chain.missing_rotation_steps([1, 2]) == [1, 2]  # nothing was generated
    assert bars == []


def test_rotation_keys_show_progress_by_default_only_on_a_terminal(engine, bars, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(_progress.sys, "stderr", io.StringIO())
    engine.rotation_keys([1, 2])
    monkeypatch.setattr(_progress.sys, "stderr", Terminal())
    engine.rotation_keys([3, 4])
    engine.rotation_keys([5])  # a single missing key: no bar
    engine.rotation_keys([1, 2, 6], progress=False)
    assert [entry[2] for entry in bars] == [False, True, False, False]
    assert [entry[0] for entry in bars] == [2, 2, 1, 1]
