"""Encrypted matrix-vector products (cyclic diagonals and BSGS) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks import (
    bsgs_split,
    encode_bsgs_diagonals,
    encode_diagonals,
    matrix_diagonals,
    matrix_vector,
    matrix_vector_bsgs,
    periodic_message,
    required_rotation_steps,
    required_rotation_steps_bsgs,
)
from fhelium_cupy.errors import StateMismatchError
from tests.helpers.ckks_engines import TOLERANCE, make_engine


def test_diagonal_identity_holds_in_cleartext():
    rng = np.random.default_rng(0)
    n, slots = 8, 64
    a, x = rng.normal(size=(n, n)), rng.normal(size=n)
    d = matrix_diagonals(a, slots)
    xp = periodic_message(x, slots)
    y = sum(d[k] * np.roll(xp, k) for k in range(n))
    np.testing.assert_allclose(y, periodic_message(a @ x, slots))
    assert bsgs_split(16) == (4, 4) and bsgs_split(8) == (3, 3)
    assert required_rotation_steps(4) == (1, 2, 3)
    assert required_rotation_steps_bsgs(16) == (1, 2, 3, 4, 8, 12)


@pytest.mark.parametrize("preset", list(TOLERANCE))
@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("method", ["cyclic", "cyclic-hoisted", "bsgs"])
def test_matrix_vector_matches_numpy(preset, n, method):
    e = make_engine(preset)
    rng = np.random.default_rng(n)
    a, x = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, n)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    if method.startswith("cyclic"):
        keys = e.rotation_keys(required_rotation_steps(n))
        y = matrix_vector(
            ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys=keys, hoisted=method.endswith("hoisted")
        )
    else:
        keys = e.rotation_keys(required_rotation_steps_bsgs(n))
        y = matrix_vector_bsgs(ct, engine=e, diagonals=encode_bsgs_diagonals(e, a), rotation_keys=keys)
    assert y.level == 1 and y.scale == ct.scale and y.polynomial_domain == "coefficient"
    got = e.decrypt_message(y, real=True)
    assert np.max(np.abs(got - periodic_message(a @ x, e.num_slots))) < TOLERANCE[preset]


def test_matrix_vector_rejects_missing_keys_and_wrong_diagonals():
    e = make_engine("test-n4096-scale40")
    a = np.eye(4)
    ct = e.encrypt_message(periodic_message(np.ones(4), e.num_slots))
    with pytest.raises(StateMismatchError, match="no rotation key for step 3"):
        matrix_vector(
            ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys={1: e.rotation_key(1), 2: e.rotation_key(2)}
        )
    with pytest.raises(StateMismatchError, match="level"):
        matrix_vector(ct, engine=e, diagonals=encode_diagonals(e, a, level=1), rotation_keys=e.rotation_keys((1, 2, 3)))
    with pytest.raises(StateMismatchError):
        matrix_vector_bsgs(ct, engine=e, diagonals=encode_diagonals(e, a), rotation_keys={})


def test_hoisted_and_independent_rotation_schedules_are_bit_identical():
    e = make_engine("test-n4096-scale40")
    rng = np.random.default_rng(7)
    a, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    ct = e.encrypt_message(periodic_message(x, e.num_slots))
    keys = e.rotation_keys(required_rotation_steps(8))
    diagonals = encode_diagonals(e, a)
    hoisted = matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=keys)
    independent = matrix_vector(ct, engine=e, diagonals=diagonals, rotation_keys=keys, hoisted=False)
    assert np.array_equal(hoisted.data, independent.data)
