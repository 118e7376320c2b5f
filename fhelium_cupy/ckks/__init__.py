"""CKKS over RNS with hybrid key switching: parameters, values, keys, engine, linalg.

The public names of the CKKS layer. Nothing here imports CuPy: ``CkksEngine(...,
device="cuda")`` imports the CuPy backend lazily.
"""

from __future__ import annotations

from .context import CkksContext
from .engine import CkksEngine
from .flooding import NoiseFlooding
from .keygen import KeyChain, KeyGenerator, galois_element_for_step, normalize_rotation_step
from .keys import ConjugationKey, KeySwitchKey, PublicKey, RelinearizationKey, RotationKey, SecretKey
from .linalg import (
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
from .params import PRESETS, SECURITY_BOUNDS_128, Parameters, ParametersLiteral, preset_names
from .serialization import load_value, save_value
from .values import Ciphertext, Plaintext

__all__ = [
    "PRESETS",
    "SECURITY_BOUNDS_128",
    "Ciphertext",
    "CkksContext",
    "CkksEngine",
    "ConjugationKey",
    "KeyChain",
    "KeyGenerator",
    "KeySwitchKey",
    "NoiseFlooding",
    "Parameters",
    "ParametersLiteral",
    "Plaintext",
    "PublicKey",
    "RelinearizationKey",
    "RotationKey",
    "SecretKey",
    "bsgs_split",
    "encode_bsgs_diagonals",
    "encode_diagonals",
    "galois_element_for_step",
    "load_value",
    "matrix_diagonals",
    "matrix_vector",
    "matrix_vector_bsgs",
    "normalize_rotation_step",
    "periodic_message",
    "preset_names",
    "required_rotation_steps",
    "required_rotation_steps_bsgs",
    "save_value",
]
