"""Saving and loading CKKS values (safetensors when installed, else ``.npz``) with their metadata.

A file holds one tensor ``data`` (uint64, host copy) and a JSON header: type name,
schema version and the value's metadata. ``load_value`` validates the header against
the value registry and, when given an engine or context, refuses values made under
another parameter set (``ForeignContextError``) or, with an engine holding keys, under
another secret (``ForeignKeyError``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ForeignContextError, ForeignKeyError, SerializationError
from ..values import value_type_info
from .values import to_device

__all__ = ["load_value", "save_value"]

_FORMAT = "fhelium_cupy.ckks.value"


def _safetensors():
    try:
        import safetensors.numpy as st  # noqa: PLC0415 - optional dependency
    except ImportError:
        return None
    return st


def save_value(value: Any, path: str | os.PathLike) -> Path:
    """Write ``value`` (any registered CKKS value, on any device) to ``path``.

    The file format follows the suffix: ``.npz`` is always NumPy; otherwise safetensors
    if installed, else ``.npz`` is appended. Returns the path written. A ``SecretKey`` is
    written readable by its owner only (mode 0600), whatever the umask.
    """
    entry = value_type_info(value)
    header = {
        "format": _FORMAT,
        "type_name": entry.type_name,
        "schema_version": entry.schema_version,
        "metadata": dict(value.value_metadata()),
    }
    data = np.ascontiguousarray(to_device(value.data, "cpu"))
    path = Path(path)
    st = _safetensors()
    secret = entry.type_name == "ckks.SecretKey"
    if path.suffix != ".npz" and st is not None:
        st.save_file({"data": data}, str(path), metadata={"header": json.dumps(header)})
        if secret:
            os.chmod(path, 0o600)
        return path
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o666)
    if secret:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "wb") as handle:
        np.savez(handle, data=data, header=np.array(json.dumps(header)))
    return path


def _read(path: Path) -> tuple[dict, np.ndarray]:
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return json.loads(str(archive["header"])), archive["data"]
        st = _safetensors()
        if st is None:
            raise SerializationError(f"{path} is not .npz and safetensors is not installed (pip install safetensors)")
        from safetensors import safe_open  # noqa: PLC0415

        with safe_open(str(path), framework="numpy") as handle:
            header = json.loads((handle.metadata() or {})["header"])
            return header, handle.get_tensor("data")
    except SerializationError:
        raise
    except Exception as error:  # corrupt file, missing keys, bad JSON
        raise SerializationError(f"cannot read a CKKS value from {path}: {error}") from error


def load_value(path: str | os.PathLike, *, engine: Any = None, context: Any = None, device: str | None = None) -> Any:
    """Read a value written by ``save_value`` and rebuild it (validated).

    Args:
        path: the file.
        engine: if given, its context identity (and, once it holds keys, its key identity)
            must match; data goes to the engine's device.
        context: a ``CkksContext`` to check the identity against (without an engine).
        device: target device (default: the engine's, else ``"cpu"``).

    Raises:
        SerializationError: bad header, unknown type, schema version or malformed data (with
            an engine or context: also limbs of another ring degree, or residues at or above
            their primes).
        ForeignContextError: the value was made under another parameter set.
        ForeignKeyError: the value is under another secret key than the engine's.
    """
    header, data = _read(Path(path))
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise SerializationError(f"{path} is not a saved fhelium_cupy CKKS value")
    try:
        entry = value_type_info(str(header["type_name"]))
    except TypeError as error:
        raise SerializationError(f"{path}: {error}") from error
    if header.get("schema_version") != entry.schema_version:
        raise SerializationError(
            f"{path}: {entry.type_name} schema version {header.get('schema_version')} is not supported "
            f"(this build reads version {entry.schema_version})"
        )
    meta = dict(header.get("metadata") or {})
    if engine is not None:
        context = engine.context
    if context is not None and meta.get("context_id") != context.context_id:
        raise ForeignContextError(
            f"{path}: value belongs to context {meta.get('context_id')}, expected {context.context_id} "
            f"({context.parameters.name})"
        )
    if engine is not None and engine._keys is not None and meta.get("key_id") not in (None, engine.keys.key_id):
        raise ForeignKeyError(
            f"{path}: value is under secret key {meta.get('key_id')}, the engine holds {engine.keys.key_id}"
        )
    if data.dtype != np.uint64:
        raise SerializationError(f"{path}: data must be uint64, got {data.dtype}")
    target = device or (engine.device if engine is not None else "cpu")
    kwargs = {k: v for k, v in meta.items() if k not in _DERIVED.get(entry.type_name, _DERIVED["*"])}
    if "prime_ids" in kwargs:
        kwargs["prime_ids"] = tuple(kwargs["prime_ids"])
    if context is not None:
        _check_residues(path, data, kwargs.get("prime_ids"), context)
    try:
        return entry.cls(to_device(np.ascontiguousarray(data), target), **kwargs)
    except (TypeError, ValueError) as error:
        raise SerializationError(f"{path}: invalid {entry.type_name}: {error}") from error


def _check_residues(path: Any, data: np.ndarray, prime_ids: Any, context: Any) -> None:
    """The ring degree and every residue below its prime (the kernels' precondition: a larger
    word would silently corrupt results)."""
    if data.ndim < 2 or data.shape[-1] != context.ring_degree:
        raise SerializationError(
            f"{path}: data of shape {data.shape} does not hold limbs of the context's {context.ring_degree} coefficients"
        )
    if prime_ids is None or len(prime_ids) != data.shape[-2]:
        return  # the value's constructor names the mismatch
    try:
        moduli = np.array([context.moduli[int(i)] for i in prime_ids], dtype=np.uint64)
    except (IndexError, TypeError, ValueError) as error:
        raise SerializationError(f"{path}: prime_ids {prime_ids} do not name the context's primes ({error})") from error
    if np.any(data >= moduli[:, None]):
        raise SerializationError(f"{path}: residues must lie below their primes; the data is corrupt or not from this context")


_KEY_DERIVED = ("level", "scale", "polynomial_domain", "modulus_basis", "residue_representation")
_DERIVED = {
    "*": _KEY_DERIVED,
    "ckks.Ciphertext": (),
    "ckks.Plaintext": ("key_id",),
}
