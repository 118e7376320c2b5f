"""The value protocol: how the runtime sees an FHE value without knowing its scheme.

A *value* (ciphertext, plaintext, key, or any user type) is, for the runtime, four
things: a registered type name, a schema version, frozen metadata (level, scale,
context identity, key identity, ...) and an ordered set of named array leaves. The
runtime validates, copies and rebuilds values only through this module, so it never
imports the CKKS package (dependencies flow downward).

A value class takes part by implementing three methods and registering itself::

    class MyValue:
        def value_metadata(self) -> Mapping[str, object]: ...
        def value_tensors(self) -> Mapping[str, Array]: ...   # ordered by name
        def with_value_tensors(self, tensors: Mapping[str, Array]) -> "MyValue": ...

    register_value_type(MyValue, type_name="MyValue", schema_version=1)

``with_value_tensors`` must return a new object of the same type and metadata whose
leaves are exactly the given arrays (no copy, no validation beyond cheap checks): the
runtime uses it to rebuild values around fixed-address storage. A type registered with
``immutable=True`` promises that its instances never change after construction; the
runtime then builds a borrowed graph output wrapper once and returns that same object
on every replay instead of a fresh one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "MAPPING_TAG",
    "RegisteredValueType",
    "SerializableValue",
    "ValueEnvelope",
    "freeze_metadata",
    "is_registered_value",
    "register_value_type",
    "registered_type_of",
    "registered_value_types",
    "value_envelope",
    "value_type_info",
]


@runtime_checkable
class SerializableValue(Protocol):
    """Structural protocol of a value the runtime can stage, validate and rebuild."""

    def value_metadata(self) -> Mapping[str, object]: ...

    def value_tensors(self) -> Mapping[str, Any]: ...

    def with_value_tensors(self, tensors: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class RegisteredValueType:
    """Registry entry: the class, its serialized type name and schema version.

    ``immutable``: instances never change after construction (attribute assignment
    raises), so one wrapper around fixed storage may be handed out many times.
    """

    cls: type
    type_name: str
    schema_version: int
    immutable: bool = False


@dataclass(frozen=True)
class ValueEnvelope:
    """A value taken apart: type, schema, frozen metadata and named tensors (sorted by name).

    ``metadata`` is a tuple of ``(key, frozen value)`` pairs sorted by key; ``tensors`` a
    tuple of ``(name, array)`` pairs sorted by name. The arrays are the value's own leaves
    (no copies).
    """

    type_name: str
    schema_version: int
    metadata: tuple[tuple[str, object], ...]
    tensors: tuple[tuple[str, Any], ...]


_REGISTRY: dict[type, RegisteredValueType] = {}
_BY_NAME: dict[str, RegisteredValueType] = {}


def register_value_type(cls: type, *, type_name: str | None = None, schema_version: int = 1, immutable: bool = False) -> type:
    """Register ``cls`` as a value type the runtime accepts as a tree leaf.

    Matching is by exact class: a subclass must register itself. Registering the same
    class twice with the same name, version and flags is a no-op; registering it again
    with another version or flags replaces its entry; a different class under a taken
    name, or the same class under a second name, raises ``ValueError``. Pass
    ``immutable=True`` only when instances can never change after construction: graph
    replays then return one shared borrowed output object for the type instead of a fresh
    wrapper per replay.

    Returns ``cls`` so it can be used as a class decorator through ``functools.partial``.

    Raises:
        TypeError: ``cls`` is not a class or lacks the value protocol's methods, or
            ``immutable`` is not a bool.
        ValueError: a taken or empty ``type_name``, a second name for a registered class,
            or a ``schema_version`` that is not a positive int.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_value_type expects a class, got {type(cls).__name__}")
    for method in ("value_metadata", "value_tensors", "with_value_tensors"):
        if not callable(getattr(cls, method, None)):
            raise TypeError(f"{cls.__qualname__} cannot be registered: it has no {method}() method")
    if isinstance(schema_version, bool) or not isinstance(schema_version, int) or schema_version < 1:
        raise ValueError(f"schema_version must be a positive int, got {schema_version!r}")
    if not isinstance(immutable, bool):
        raise TypeError(f"immutable must be a bool, got {type(immutable).__name__}")
    name = type_name if type_name is not None else cls.__name__
    if not isinstance(name, str) or not name:
        raise ValueError("type_name must be a non-empty string")
    entry = RegisteredValueType(cls=cls, type_name=name, schema_version=schema_version, immutable=immutable)
    with _REGISTER_LOCK:  # check and write as one: two threads must not both take a name
        return _register(cls, name, entry)


_REGISTER_LOCK = threading.Lock()


def _register(cls: type, name: str, entry: RegisteredValueType) -> type:
    taken = _BY_NAME.get(name)
    if taken is not None and taken.cls is not cls:
        raise ValueError(
            f"value type name {name!r} is already registered for {taken.cls.__module__}.{taken.cls.__qualname__}"
        )
    previous = _REGISTRY.get(cls)
    if previous is not None and previous.type_name != name:
        raise ValueError(
            f"{cls.__qualname__} is already registered as {previous.type_name!r}; a class has one type name"
        )
    if previous == entry:
        return cls  # keep the entry object: compiled replay checks compare entries by identity
    _REGISTRY[cls] = entry
    _BY_NAME[name] = entry
    return cls


def registered_value_types() -> tuple[str, ...]:
    """Names of all registered value types, sorted."""
    return tuple(sorted(_BY_NAME))


def registered_type_of(obj: object) -> RegisteredValueType | None:
    """Registry entry of ``type(obj)`` itself, or ``None`` (never raises; one dict lookup)."""
    return _REGISTRY.get(type(obj))


def is_registered_value(obj: object) -> bool:
    """True when ``type(obj)`` itself (not a base class) is registered."""
    return type(obj) in _REGISTRY


def value_type_info(obj_or_name: object) -> RegisteredValueType:
    """Registry entry for a value, a value class or a type name; ``TypeError`` if unknown."""
    if isinstance(obj_or_name, str):
        entry = _BY_NAME.get(obj_or_name)
    elif isinstance(obj_or_name, type):
        entry = _REGISTRY.get(obj_or_name)
    else:
        entry = _REGISTRY.get(type(obj_or_name))
    if entry is None:
        label = obj_or_name if isinstance(obj_or_name, str) else getattr(obj_or_name, "__name__", type(obj_or_name).__name__)
        raise TypeError(
            f"{label} is not a registered value type; registered: {list(registered_value_types())}. "
            "Register it with fhelium_cupy.values.register_value_type."
        )
    return entry


class _MappingTag:
    """First item of a frozen nested mapping: ``{"a": 1}`` and ``[("a", 1)]`` freeze apart."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<mapping>"

    def __reduce__(self) -> str:
        return "MAPPING_TAG"  # the singleton, by its module-level name


MAPPING_TAG = _MappingTag()


def freeze_metadata(value: object, *, _path: str = "metadata", _nested: bool = False) -> object:
    """Turn metadata into a hashable, deterministic form.

    The top-level mapping becomes a tuple of ``(key, frozen)`` sorted by key; a mapping inside
    it becomes the same tuple after ``MAPPING_TAG``, so that it never equals a list of pairs;
    lists and tuples become tuples; ``None``, ``bool``, ``int``, ``float``, ``str`` and
    ``bytes`` pass through, and NumPy scalars become their Python kind (``np.int64(1)`` ->
    ``1``, ``np.str_`` -> ``str``). Anything else raises ``TypeError`` naming the path, and a
    NaN ``ValueError`` (it equals nothing, itself included: no value could ever match it).
    """
    if isinstance(value, np.generic):  # first: np.float64 and np.str_ subclass float and str
        return freeze_metadata(value.item(), _path=_path, _nested=_nested)
    if isinstance(value, float) and value != value:  # NaN: never equal to itself, so never matched
        raise ValueError(f"{_path} is NaN, which no value state can match; give a comparable value")
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, Mapping):
        items = []
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{_path} keys must be strings, got {type(key).__name__}")
            items.append((key, freeze_metadata(value[key], _path=f"{_path}.{key}", _nested=True)))
        pairs = tuple(sorted(items, key=lambda kv: kv[0]))
        return (MAPPING_TAG, *pairs) if _nested else pairs
    if isinstance(value, (list, tuple)):
        return tuple(freeze_metadata(v, _path=f"{_path}[{i}]", _nested=True) for i, v in enumerate(value))
    raise TypeError(f"Unsupported metadata in value signature at {_path}: {type(value).__name__}")


def value_envelope(value: object) -> ValueEnvelope:
    """Take a registered value apart (no copies). ``TypeError`` for unregistered objects."""
    entry = value_type_info(value)
    metadata = freeze_metadata(dict(value.value_metadata()))  # type: ignore[attr-defined]
    tensors = value.value_tensors()  # type: ignore[attr-defined]
    if not isinstance(tensors, Mapping):
        raise TypeError(f"{entry.type_name}.value_tensors() must return a mapping")
    ordered = tuple(sorted(tensors.items(), key=lambda kv: kv[0]))
    return ValueEnvelope(
        type_name=entry.type_name,
        schema_version=entry.schema_version,
        metadata=metadata,  # type: ignore[arg-type]
        tensors=ordered,
    )
