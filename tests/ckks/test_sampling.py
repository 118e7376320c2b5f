"""Sampling: ranges and rough moments (draws come from os.urandom; the tests have fixed slack)."""

from __future__ import annotations

import numpy as np

from fhelium_cupy.ckks.sampling import sample_gaussian, sample_ternary, sample_uniform_mod


def test_ternary_values_and_balance():
    t = sample_ternary((60000,))
    counts = np.bincount(t + 1, minlength=3)
    assert set(np.unique(t)) <= {-1, 0, 1}
    assert np.all(np.abs(counts - 20000) < 1000)  # > 8 standard deviations of slack


def test_gaussian_moments_and_tail():
    g = sample_gaussian((200000,), 3.2)
    assert abs(g.mean()) < 0.05 and abs(g.std() - 3.2) < 0.05
    assert np.abs(g).max() <= 32


def test_uniform_residues_are_canonical_and_cover_the_range():
    moduli = [97, (1 << 60) - 93]
    u = sample_uniform_mod(moduli, (4, 5000))
    assert u.shape == (4, 2, 5000) and u.dtype == np.uint64
    assert u[:, 0].max() < 97 and len(np.unique(u[:, 0])) == 97
    assert u[:, 1].max() < moduli[1] and u[:, 1].max() > moduli[1] // 2
