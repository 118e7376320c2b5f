"""Saving and loading CKKS values (safetensors when installed, else ``.npz``) with their metadata.

A file holds one tensor ``data`` (uint64, host copy) and a JSON header: type name,
schema version and the value's metadata. ``load_value`` checks a file against the engine or
context it will be used with before it builds anything: the header against the value
registry, the parameter set (``ForeignContextError``), with an engine holding keys the key
label (``key_id``) against the engine's (``ForeignKeyError``), then the residues and the
claimed state (``SerializationError``).

Every file carries a SHA-256 digest of its header and data (header field ``digest``), which
``load_value`` checks before it acts on anything (with ``authentication_key`` the tag, which
covers the same bytes, is checked instead): a corrupted file (a flipped bit in the scale, the
residues) is refused, not loaded as another value. The digest is not a secret and
does not authenticate: anyone can recompute it for a forged file.

Authentication is opt-in: ``save_value(..., authentication_key=k)`` adds an HMAC-SHA256 tag
over the header and the data, and ``load_value(..., authentication_key=k)`` refuses a file
whose tag is missing or does not match before it checks anything else (parties that share
``k``, say a client and its server, detect files changed or forged by anyone without it).
Without the key a tag is ignored. A key's ``key_id`` is a random label, not an
authentication: it catches keys mixed up by mistake, not a key file forged with the right
label. Key material is deliberately *not* tested against the engine's secret: whether
``b + a*s`` is small for a file of the caller's choosing is a decryption oracle (a forged key
``(H X^j, 1)`` yields ``H + s_j``; one file per coefficient recovers the secret). Keep key
files where only their owner can write them.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ForeignContextError, ForeignKeyError, SerializationError
from ..values import value_type_info
from ._checks import check_ciphertext_form, check_key_layout, check_level_rows
from .keys import _Key
from .values import Ciphertext, Plaintext, to_device

__all__ = ["load_value", "save_value"]

_FORMAT = "fhelium_cupy.ckks.value"
_AUTH = "authentication"  # header field of the tag
_DIGEST = "digest"  # header field of the integrity digest
_DIGEST_ALGORITHM = "SHA-256"
_DIGEST_DOMAIN = b"fhelium_cupy.ckks.value/sha256/v1\0"
_AUTH_ALGORITHM = "HMAC-SHA256"
_AUTH_DOMAIN = b"fhelium_cupy.ckks.value/hmac-sha256/v1\0"
_MIN_AUTH_KEY_BYTES = 16


def _safetensors():
    try:
        import safetensors.numpy as st  # noqa: PLC0415 - optional dependency
    except ImportError:
        return None
    return st


def _auth_key(key: object) -> bytes | None:
    """``key`` as bytes (None stays None), validated before any file is touched."""
    if key is None:
        return None
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"authentication_key must be bytes, got {type(key).__name__}")
    key = bytes(key)
    if len(key) < _MIN_AUTH_KEY_BYTES:
        raise ValueError(f"authentication_key must hold at least {_MIN_AUTH_KEY_BYTES} bytes (128 bits), got {len(key)}")
    return key


def _hash_value(hasher: Any, header: dict, data: np.ndarray, without: tuple[str, ...]) -> str:
    """``hasher`` fed the header less the ``without`` fields (canonical JSON), the data's dtype
    and shape, and its bytes in C order, each part length-prefixed; its hex digest."""
    body = {k: v for k, v in header.items() if k not in without}
    for part in (json.dumps(body, sort_keys=True, separators=(",", ":")).encode(),
                 json.dumps([str(data.dtype), list(data.shape)]).encode()):
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    raw = np.ascontiguousarray(data)
    hasher.update(raw.nbytes.to_bytes(8, "little"))
    hasher.update(raw.data)  # C-contiguous: its bytes as stored
    return hasher.hexdigest()


def _auth_tag(key: bytes, header: dict, data: np.ndarray) -> str:
    """HMAC-SHA256 of the header (without its tag; its digest included) and the data."""
    return _hash_value(hmac.new(key, _AUTH_DOMAIN, hashlib.sha256), header, data, (_AUTH,))


def _digest(header: dict, data: np.ndarray) -> str:
    """SHA-256 of the header (without its digest and tag) and the data: the integrity check."""
    return _hash_value(hashlib.sha256(_DIGEST_DOMAIN), header, data, (_AUTH, _DIGEST))


def save_value(value: Any, path: str | os.PathLike, *, authentication_key: bytes | None = None) -> Path:
    """Write ``value`` (any registered CKKS value, on any device) to ``path``.

    The file format follows the suffix: ``.npz`` is always NumPy; otherwise safetensors
    if installed, else ``.npz`` is appended. Returns the path written. The bytes go to a new
    file next to ``path`` (never through a symlink), flushed to the disk, which then replaces
    ``path``: a failed save leaves whatever was at ``path`` as it was. A ``SecretKey``'s file
    is readable by its owner only (mode 0600), whatever the umask or the safetensors version.
    With ``authentication_key`` (bytes, at least 16) the header carries an HMAC-SHA256 tag of
    the header and the data (module docstring). Every file carries a SHA-256 digest of both
    (integrity, not authentication).

    Raises:
        TypeError, ValueError: ``authentication_key`` is not bytes of at least 16 (before
            anything is written).
    """
    key = _auth_key(authentication_key)
    entry = value_type_info(value)
    header = {
        "format": _FORMAT,
        "type_name": entry.type_name,
        "schema_version": entry.schema_version,
        "metadata": dict(value.value_metadata()),
    }
    data = np.ascontiguousarray(to_device(value.data, "cpu"))
    header[_DIGEST] = {"algorithm": _DIGEST_ALGORITHM, "value": _digest(header, data)}
    if key is not None:
        header[_AUTH] = {"algorithm": _AUTH_ALGORITHM, "tag": _auth_tag(key, header, data)}
    path = Path(path)
    st = _safetensors()
    if path.suffix != ".npz" and st is not None:
        payload = st.save({"data": data}, metadata={"header": json.dumps(header)})
    else:
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        buffer = io.BytesIO()
        np.savez(buffer, data=data, header=np.array(json.dumps(header)))  # stored, not compressed
        payload = buffer.getvalue()
    _write(path, payload, secret=entry.type_name == "ckks.SecretKey")
    return path


def _write(path: Path, payload: bytes, *, secret: bool) -> None:
    """Write ``payload`` to a new file next to ``path`` (never through a symlink; mode 0600 for
    a secret, else 0666 less the umask), flush it to the disk and move it over ``path``: a failed
    write (a full disk, a signal) leaves the file that was there as it was."""
    name = path.name  # a name near the 255-byte limit gets a short stand-in (18 bytes are added)
    if len(os.fsencode(name)) > 200:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    tmp = path.with_name(f".{name}.{os.urandom(6).hex()}.tmp")
    mode = 0o600 if secret else 0o666
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)  # a symlink at ``path`` is replaced, not followed
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read(path: Path) -> tuple[dict, Callable[[], np.ndarray]]:
    """The header and a reader of the data (called only once the header is validated)."""
    if not path.is_file():  # a missing path is the OS's error, not a corrupt value
        raise FileNotFoundError(f"no saved value at {path}")
    try:
        if path.suffix == ".npz":
            if not zipfile.is_zipfile(path):  # np.load would read a bare .npy, allocating its shape first
                raise SerializationError(f"{path} is not a saved fhelium_cupy CKKS value (not a .npz archive)")

            def data() -> np.ndarray:
                with np.load(path, allow_pickle=False) as archive:
                    return archive["data"]

            with np.load(path, allow_pickle=False) as archive:
                members = {info.filename: info for info in archive.zip.infolist()}
                if set(members) != {"data.npy", "header.npy"}:
                    raise SerializationError(f"{path} is not a saved fhelium_cupy CKKS value")
                if any(info.compress_type != zipfile.ZIP_STORED for info in members.values()):
                    # members inflate in memory before anything is checked: refuse compression
                    raise SerializationError(f"{path}: compressed members are not accepted (save_value never compresses)")
                for name, info in members.items():
                    with archive.zip.open(name) as member:
                        _check_npy_size(path, member, info.file_size, name == "header.npy")
                return json.loads(str(archive["header"])), data
        st = _safetensors()
        if st is None:
            raise SerializationError(f"{path} is not .npz and safetensors is not installed (pip install safetensors)")
        from safetensors import safe_open  # noqa: PLC0415

        def tensor() -> np.ndarray:
            with safe_open(str(path), framework="numpy") as handle:
                return handle.get_tensor("data")

        with safe_open(str(path), framework="numpy") as handle:
            return json.loads((handle.metadata() or {})["header"]), tensor
    except SerializationError:
        raise
    except Exception as error:  # corrupt file, missing keys, bad JSON
        raise SerializationError(f"cannot read a CKKS value from {path}: {error}") from error


def _check_npy_size(path: Path, member: Any, size: int, header: bool) -> None:
    """A member's ``.npy`` header names what ``save_value`` writes (the header: one unicode
    string; the data: uint64 in C order) and exactly the bytes the member holds: NumPy
    allocates an array from the header's shape before it reads it, so a forged shape must not
    get that far (a few bytes of file could ask for any amount of memory)."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise SerializationError(f"{path}: unsupported .npy version {version}")
    if header:
        if dtype.kind != "U" or shape != ():
            raise SerializationError(f"{path}: the header must be one string, got {dtype} of shape {shape}")
    elif dtype != np.dtype("<u8") or fortran:
        raise SerializationError(f"{path}: data must be little-endian uint64 in C order, got {dtype}")
    if size != member.tell() + dtype.itemsize * int(np.prod(shape, dtype=object)):
        raise SerializationError(f"{path}: a member's header (shape {shape}) does not match its {size} bytes")


def _read_data(path: Any, read_data: Callable[[], np.ndarray]) -> np.ndarray:
    """``read_data()``, its failures (a truncated or corrupt member) as SerializationError."""
    try:
        return read_data()
    except Exception as error:
        raise SerializationError(f"cannot read the data of {path}: {error}") from error


def _header_fields(path: Any, header: dict) -> tuple[str, dict]:
    """The header's type name and metadata, of the types ``save_value`` writes, else
    SerializationError (nothing of them is used before this)."""
    type_name, meta = header.get("type_name"), header.get("metadata", {})
    if not isinstance(type_name, str):
        raise SerializationError(f"{path}: the header names no value type")
    if not isinstance(meta, dict):
        raise SerializationError(f"{path}: the header's metadata must be a mapping, got {type(meta).__name__}")
    if "prime_ids" in meta:
        prime_ids = meta["prime_ids"]
        if not isinstance(prime_ids, list) or not all(type(i) is int for i in prime_ids):
            raise SerializationError(f"{path}: prime_ids must be a list of integers, got {prime_ids!r}")
    for name, value in meta.items():
        types = _FIELD_TYPES.get(name)
        if types is not None and type(value) not in types:
            raise SerializationError(
                f"{path}: metadata {name} must be {' or '.join(t.__name__ for t in types)}, got {value!r}"
            )
    return type_name, meta


# the exact JSON types save_value writes for each metadata field (bool is not an int here)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "level": (int,), "scale": (float, type(None)), "polynomial_domain": (str,), "modulus_basis": (str,),
    "residue_representation": (str,), "context_id": (str,), "key_id": (str, type(None)),
    "galois_element": (int,), "rotation_step": (int,),
}


def load_value(path: str | os.PathLike, *, engine: Any = None, context: Any = None, device: str | int | None = None,
               authentication_key: bytes | None = None) -> Any:
    """Read a value written by ``save_value``, check it against its parameters and rebuild it.

    Args:
        path: the file.
        engine: the engine it will be used with: its context identity (and, once it holds
            keys, its key identity) must match; data goes to the engine's device.
        context: a ``CkksContext`` to check against instead of an engine's.
        device: target device (default: the engine's, else ``"cpu"``).
        authentication_key: the key the file was saved with: its HMAC-SHA256 tag must be
            present and match, checked first (module docstring). Without it a tag is ignored.

    One of ``engine`` and ``context`` is required: a value is only checked against the
    parameters it will be used with. Checked before anything is built: the header, the
    context and key identity, the ring degree, every residue below its prime, and the
    state (a ciphertext's or plaintext's prime ids for its level and basis; a key's QP
    primes, digit count and Galois element for its rotation step).

    Raises:
        TypeError: neither ``engine`` nor ``context`` given, both given with a ``context``
            that is not ``engine.context``, or ``authentication_key`` is not bytes
            (ValueError: fewer than 16).
        FileNotFoundError: nothing (or not a file) at ``path``.
        SerializationError: bad header, unknown type, schema version, malformed or corrupt
            data, or a state that contradicts the context; with ``authentication_key``, a tag
            that is missing or does not match.
        ForeignContextError: the value was made under another parameter set.
        ForeignKeyError: the value is labelled with another secret key than the engine's.
            The label is not authenticated and key material is never tested against the
            secret (that test would be a decryption oracle; see the module docstring).
    """
    if engine is None and context is None:
        raise TypeError("load_value needs engine= or context=: a value is checked against the parameters it is used with")
    if engine is not None and context is not None and context is not engine.context:
        raise TypeError("load_value takes engine= or context=, not both (this context is not the engine's)")
    key = _auth_key(authentication_key)
    header, read_data = _read(Path(path))
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise SerializationError(f"{path} is not a saved fhelium_cupy CKKS value")
    # the tag covers the header and the data, so where it is checked it is the integrity check
    # too (one hash of the data, not two)
    read_data = _authenticated(path, key, header, read_data) if key is not None else _intact(path, header, read_data)
    type_name, meta = _header_fields(path, header)
    try:
        entry = value_type_info(type_name)
    except TypeError as error:
        raise SerializationError(f"{path}: {error}") from error
    version = header.get("schema_version")
    if type(version) is not int or version != entry.schema_version:  # (exactly an int: not True, not 1.0)
        raise SerializationError(
            f"{path}: {entry.type_name} schema version {header.get('schema_version')} is not supported "
            f"(this build reads version {entry.schema_version})"
        )
    if engine is not None:
        context = engine.context
    if meta.get("context_id") != context.context_id:
        raise ForeignContextError(
            f"{path}: value belongs to context {meta.get('context_id')}, expected {context.context_id} "
            f"({context.parameters.name})"
        )
    if engine is not None and engine._keys is not None and meta.get("key_id") not in (None, engine.keys.key_id):
        raise ForeignKeyError(
            f"{path}: value is under secret key {meta.get('key_id')}, the engine holds {engine.keys.key_id}"
        )
    derived = set(_DERIVED.get(entry.type_name, _DERIVED["*"]))  # recorded, recomputed on load
    allowed = set(getattr(entry.cls, "_FIELDS", ())) - derived
    unknown = sorted(set(meta) - allowed - derived)
    if unknown:
        raise SerializationError(f"{path}: unknown {entry.type_name} metadata {unknown}")
    data = _read_data(path, read_data)
    if data.dtype != np.uint64:
        raise SerializationError(f"{path}: data must be uint64, got {data.dtype}")
    target = device if device is not None else (engine.device if engine is not None else "cpu")
    kwargs = {k: v for k, v in meta.items() if k in allowed}
    if "prime_ids" in kwargs:
        kwargs["prime_ids"] = tuple(kwargs["prime_ids"])  # a list of ints (_header_fields)
    _check_residues(path, data, kwargs.get("prime_ids"), context)
    try:
        value = entry.cls(np.ascontiguousarray(data), **kwargs)
        _check_state(value, context)
    except (TypeError, ValueError, OverflowError) as error:
        raise SerializationError(f"{path}: invalid {entry.type_name}: {error}") from error
    return value.to(target)  # itself on the CPU


def _authenticated(path: Any, key: bytes, header: dict, read_data: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """The data reader of a file whose tag matches (the data is read once, here), else
    SerializationError: nothing of the header is acted on before this."""
    auth = header.get(_AUTH)
    if not isinstance(auth, dict) or auth.get("algorithm") != _AUTH_ALGORITHM or not isinstance(auth.get("tag"), str):
        raise SerializationError(f"{path}: not authenticated (saved without an authentication key)")
    tag = auth["tag"]
    if len(tag) != 64 or any(ch not in "0123456789abcdef" for ch in tag):
        raise SerializationError(f"{path}: authentication failed: the tag is not 64 lowercase hex digits")
    return _verified(path, read_data, tag, lambda data: _auth_tag(key, header, data),
                     "authentication failed: the file was changed, or saved with another key")


def _intact(path: Any, header: dict, read_data: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """The data reader of a file whose digest matches its header and data (the data is read
    once, here), else SerializationError: a corrupted file is refused before anything of its
    header is acted on."""
    digest = header.get(_DIGEST)
    if not isinstance(digest, dict) or digest.get("algorithm") != _DIGEST_ALGORITHM \
            or not isinstance(digest.get("value"), str):
        raise SerializationError(
            f"{path}: no integrity digest (corrupt, or saved by a fhelium_cupy before 0.1.0's digests: save it again)"
        )
    return _verified(path, read_data, digest["value"], lambda data: _digest(header, data),
                     "the file is corrupt (its SHA-256 digest does not match its header and data)")


def _verified(path: Any, read_data: Callable[[], np.ndarray], claimed: str, compute: Callable[[np.ndarray], str],
              mismatch: str) -> Callable[[], np.ndarray]:
    """The data, read once, as a reader, when ``compute(data)`` equals the ``claimed`` hex
    string (compared in constant time), else SerializationError(``mismatch``): the one check
    of ``_authenticated`` and ``_intact`` once each has read its header field."""
    data = _read_data(path, read_data)
    if not hmac.compare_digest(claimed.encode("ascii", "replace"), compute(data).encode("ascii")):
        raise SerializationError(f"{path}: {mismatch}")
    return lambda: data


def _check_state(value: Any, context: Any) -> None:
    """The state a value's metadata claims is one the context can hold: the operations'
    own checks (StateMismatchError)."""
    if isinstance(value, _Key):
        check_key_layout(context, value, "load_value")
        return
    if isinstance(value, Ciphertext):
        check_ciphertext_form(value, "load_value")
    if isinstance(value, (Ciphertext, Plaintext)):
        check_level_rows(context, value, "load_value")


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
