"""Shared CKKS test engines (insecure N=2^12 presets) and tolerances."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from fhelium_cupy.ckks import CkksEngine, encode_diagonals, periodic_message, required_rotation_steps
from fhelium_cupy.ckks.params import ParametersLiteral

__all__ = ["TOLERANCE", "Matvec8", "centered_difference", "make_engine", "matvec_8x8", "random_message",
           "forge_npz", "rewrite_saved_value", "three_special_primes"]

TOLERANCE = {"test-n4096-scale30": 1e-4, "test-n4096-scale40": 1e-6}
_CACHE: dict[str, CkksEngine] = {}


def make_engine(preset: str) -> CkksEngine:
    """One engine (with keys) per preset and test session."""
    if preset not in _CACHE:
        engine = CkksEngine(preset, insecure=True)
        engine.generate_keys()
        _CACHE[preset] = engine
    return _CACHE[preset]


def three_special_primes() -> CkksEngine:
    """An insecure N=2^12 engine with K = 3 special primes (the presets have K = 1), one per
    test session."""
    if "k3" not in _CACHE:
        literal = ParametersLiteral(log_n=12, q_bits=(40, 40, 40, 49), p_bits=(50, 50, 50), scale=2.0**40,
                                    dnum=2, name="test-n4096-k3")
        engine = CkksEngine(literal, insecure=True)
        engine.generate_keys()
        _CACHE["k3"] = engine
    return _CACHE["k3"]


def centered_difference(engine: CkksEngine, a, b) -> np.ndarray:
    """``a - b`` per residue, centered mod each prime of ``a`` (two values over the same primes)."""
    moduli = np.array([engine.context.moduli[r] for r in a.prime_ids], dtype=object)[:, None]
    diff = (a.data.astype(object) - b.data.astype(object)) % moduli
    return np.where(diff > moduli // 2, diff - moduli, diff)


def random_message(
    engine: CkksEngine, seed: int, *, complex_values: bool = True, length: int | None = None
) -> np.ndarray:
    rng = np.random.default_rng(seed)  # test data only, never key material
    k = engine.num_slots if length is None else length
    m = rng.uniform(-1, 1, k)
    if complex_values:
        m = m + 1j * rng.uniform(-1, 1, k)
    return m


def forge_npz(target, header, data, *, compressed=False):
    """Write ``header`` and ``data`` as a ``.npz`` value file at ``target`` with the integrity
    digest recomputed (what a forger does: the digest is public; an authentication tag stays as
    it was); a header that is not a mapping is written as it is. Returns ``target``."""
    from fhelium_cupy.ckks.serialization import _digest

    if isinstance(header, dict) and isinstance(header.get("digest"), dict):
        header = {**header, "digest": {**header["digest"], "value": _digest(header, np.asarray(data))}}
    (np.savez_compressed if compressed else np.savez)(target, data=data, header=np.array(json.dumps(header)))
    return target


def rewrite_saved_value(source, target, *, meta=None, data=None, compressed=False):
    """A ``save_value`` file ``source`` re-saved as ``target`` with edited metadata or data (what a
    forger does, the integrity digest recomputed: ``forge_npz``); returns ``target``."""
    with np.load(source) as archive:
        header, array = json.loads(str(archive["header"])), archive["data"]
    header["metadata"].update(meta or {})
    array = array if data is None else data(array)
    return forge_npz(target, header, array, compressed=compressed)


@dataclass(frozen=True)
class Matvec8:
    """An encrypted 8x8 matrix-vector product's inputs: the cleartext ``matrix`` and ``x``, the
    encrypted periodic ``x`` (``ct``), its rotation keys by step (``keys``) and in
    ``required_rotation_steps`` order (``ordered``), and the QP ``diagonals`` of ``matrix``."""

    matrix: np.ndarray
    x: np.ndarray
    ct: object
    keys: dict
    ordered: list
    diagonals: object


def matvec_8x8(engine: CkksEngine, seed: int = 9) -> Matvec8:
    """``Matvec8`` of a random uniform(-1, 1) matrix and vector from ``seed``."""
    rng = np.random.default_rng(seed)
    matrix, x = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, 8)
    keys = engine.rotation_keys(required_rotation_steps(8))
    return Matvec8(matrix, x, engine.encrypt_message(periodic_message(x, engine.num_slots)), keys,
                   [keys[k] for k in required_rotation_steps(8)], encode_diagonals(engine, matrix))
