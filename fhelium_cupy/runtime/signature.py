"""Exact, device-independent signatures of arrays, values and nested value trees.

A signature says what a reusable buffer accepts: shape, strides (in elements), dtype,
layout and ``requires_grad`` for arrays; type, schema, frozen metadata (level, scale,
context and key identity, ...) and named array signatures for values; and the nesting
of lists, tuples and dicts. The device is deliberately absent: a pinned NumPy array,
a CPU torch tensor, a CuPy array and a CUDA torch tensor of the same topology all fit
one buffer, because the buffer, not the signature, owns residency.

Validation walks the whole candidate tree before any consumer copies a byte, so a
mismatch can never leave a buffer half updated. Dictionary keys must be exactly ``str`` or
``int`` (``True`` and ``1.0`` equal ``1`` and are refused) and are kept sorted, ints first
(so signature equality does not depend on insertion order); validation accepts any
insertion order.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import ExecutionInputError
from ..interop.arrays import element_strides, leaf_dtype, leaf_kind, leaf_requires_grad, numpy_dtype_of
from ..values import freeze_metadata, is_registered_value, value_envelope, value_type_info

__all__ = ["TensorSignature", "TreeKind", "ValueSignature", "ValueTreeSignature", "check_plain_container"]

TreeKind = Literal["tensor", "value", "list", "tuple", "dict"]

_UNSUPPORTED = (
    "Execution value trees must contain arrays (NumPy, CuPy, torch), registered FHE values, or nested "
    "list/tuple/dict containers; got {name} at {path}"
)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order element strides as torch gives them (a zero dimension counts as one)."""
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class TensorSignature:
    """Device-independent array topology accepted by one execution buffer.

    Attributes:
        shape: dimensions.
        stride: strides in elements (torch convention; NumPy byte strides are divided by
            the item size).
        dtype: the NumPy dtype (a torch or CuPy dtype given here maps to it; a torch dtype
            NumPy lacks, such as ``torch.bfloat16``, maps to its tag, a one-field structured
            dtype that equals no numeric dtype: see ``fhelium_cupy.interop.arrays``).
        layout: ``"strided"`` (``torch.strided`` given here maps to it): the only layout the
            bridges support; sparse and other layouts are refused as leaves.
        requires_grad: torch autograd flag of the payload (always False for NumPy/CuPy).

    All five are required, as in the spec. A shape with a zero dimension addresses no
    element, so its strides carry no meaning and differ between frameworks (NumPy reports
    ``(0, 0)`` for ``zeros((0, 3))``, torch ``(3, 1)``): such a signature stores the contiguous
    strides torch gives (``stride[i]`` = product of ``max(shape[j], 1)``, ``j > i``), and every
    empty array of that shape and dtype matches it, whatever strides it reports.

    Raises:
        TypeError: a dtype NumPy cannot represent, a shape or stride entry that is not an
            integer, or a ``requires_grad`` that is not a bool.
        ValueError: a layout other than strided, a negative dimension, or shape and stride of
            different lengths.
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: np.dtype
    layout: str
    requires_grad: bool
    _byte_strides: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _empty: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", numpy_dtype_of(self.dtype))
        if self.layout not in ("strided",) and str(self.layout) != "torch.strided":
            raise ValueError(f"only the strided layout is supported, got {self.layout!r}")
        object.__setattr__(self, "layout", "strided")
        if not isinstance(self.requires_grad, (bool, np.bool_)):  # "no" was True
            raise TypeError(f"requires_grad must be a bool, got {self.requires_grad!r}")
        object.__setattr__(self, "requires_grad", bool(self.requires_grad))
        object.__setattr__(self, "shape", tuple(operator.index(n) for n in self.shape))  # 2.7 was 2
        object.__setattr__(self, "stride", tuple(operator.index(s) for s in self.stride))
        if any(n < 0 for n in self.shape):
            raise ValueError(f"shape dimensions must be >= 0, got {self.shape}")
        if len(self.shape) != len(self.stride):
            raise ValueError("shape and stride must have the same length")
        object.__setattr__(self, "_empty", any(n == 0 for n in self.shape))
        if self._empty:
            object.__setattr__(self, "stride", _contiguous_strides(self.shape))
        object.__setattr__(self, "_byte_strides", tuple(s * self.dtype.itemsize for s in self.stride))

    @classmethod
    def from_tensor(cls, tensor: Any) -> TensorSignature:
        """Signature of a NumPy, CuPy or torch array (its device is not recorded).

        Raises:
            TypeError: ``tensor`` is not a supported array.
        """
        if leaf_kind(tensor) is None:
            raise TypeError(f"TensorSignature.from_tensor needs a NumPy, CuPy or torch array, got {type(tensor).__name__}")
        stride = element_strides(tensor)  # first: it refuses torch tensors with no strided shape (nested)
        return cls(
            shape=tuple(int(n) for n in tensor.shape),
            stride=stride,
            dtype=leaf_dtype(tensor),
            layout="strided",
            requires_grad=leaf_requires_grad(tensor),
        )

    @property
    def nbytes(self) -> int:
        """Logical bytes: number of elements times item size."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def matches(self, array: Any) -> bool:
        """True when ``array`` has exactly this topology (device ignored)."""
        kind = leaf_kind(array)
        if kind == "cupy" or kind == "numpy":
            return (
                array.shape == self.shape
                and (self._empty or array.strides == self._byte_strides)
                and array.dtype == self.dtype
                and not self.requires_grad
            )
        if kind == "torch":
            try:
                return TensorSignature.from_tensor(array) == self
            except TypeError:
                return False
        return False


@dataclass(frozen=True)
class ValueSignature:
    """Registered value state plus device-independent array topology.

    Attributes:
        type_name: registered type name (``"Ciphertext"``, ...).
        schema_version: the type's registered schema version.
        metadata: frozen ``(key, value)`` pairs sorted by key (level, scale, prime_ids,
            domain, basis, representation, context and key identity, ...).
        tensors: ``(name, TensorSignature)`` pairs sorted by name.
    """

    type_name: str
    schema_version: int
    metadata: tuple[tuple[str, object], ...]
    tensors: tuple[tuple[str, TensorSignature], ...]
    _metadata_dict: dict = field(init=False, repr=False, compare=False, hash=False)
    # Python equality says True == 1 == 1.0; the signature is exact, so the type of every
    # metadata item (recursively) takes part in equality, hashing and validation.
    _metadata_types: tuple = field(init=False, repr=False, compare=True, hash=True)

    _metadata_item_types: dict = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_metadata_dict", dict(self.metadata))
        object.__setattr__(self, "_metadata_types", _type_skeleton(self.metadata))
        object.__setattr__(self, "_metadata_item_types", {key: _type_skeleton(item) for key, item in self.metadata})

    @classmethod
    def from_value(cls, value: object) -> ValueSignature:
        """Describe one registered value.

        Raises:
            TypeError: ``value`` is not a registered value type, or has unsupported
                metadata or non-array tensors.
        """
        envelope = value_envelope(value)
        tensors = []
        for name, array in envelope.tensors:
            if leaf_kind(array) is None:
                raise TypeError(f"{envelope.type_name}.{name} is a {type(array).__name__}, not an array")
            tensors.append((name, TensorSignature.from_tensor(array)))
        return cls(envelope.type_name, envelope.schema_version, envelope.metadata, tuple(tensors))  # type: ignore[arg-type]


_NEXT_STEP = (
    "; pass a source with the same structure, array topology and value state (level, scale, domain, ...), "
    "or create a new buffer or capture a new program for this signature"
)


def _mismatch(message: str) -> ExecutionInputError:
    """The error for one validation mismatch, with what to do next appended."""
    return ExecutionInputError(message + _NEXT_STEP)


def _describe(obj: object) -> str:
    return type(obj).__name__


@dataclass(frozen=True)
class ValueTreeSignature:
    """Structure of arrays and registered values in a reusable execution payload.

    Attributes:
        kind: ``"tensor"``, ``"value"``, ``"list"``, ``"tuple"`` or ``"dict"``.
        leaf: the leaf signature for ``tensor``/``value`` nodes, else ``None``.
        children: child signatures of a container, in order.
        keys: dict keys parallel to ``children``: ``str`` or ``int`` (exactly: ``True`` and ``1.0``
            are refused, since they equal ``1``), sorted, ints first.
    """

    kind: TreeKind
    leaf: TensorSignature | ValueSignature | None = None
    children: tuple[ValueTreeSignature, ...] = ()
    keys: tuple[object, ...] = ()

    @classmethod
    def from_value(cls, value: object) -> ValueTreeSignature:
        """Describe a supported array/value tree.

        Raises:
            TypeError: a leaf is neither an array nor a registered value, a container is
                not a list, tuple or dict, or a dict key is not a str or int (the message
                names the path).
            ValueError: a registered value exposes no arrays.
        """
        return cls._build(value, "value")

    @classmethod
    def _build(cls, value: object, path: str) -> ValueTreeSignature:
        if is_registered_value(value):
            signature = ValueSignature.from_value(value)
            if not signature.tensors:
                raise ValueError(
                    f"value {signature.type_name} at {path} has no arrays; its value_tensors() must return at least "
                    "one array (bind array-free state statically in the callable)"
                )
            return cls("value", signature)
        if leaf_kind(value) is not None:
            try:
                return cls("tensor", TensorSignature.from_tensor(value))
            except TypeError as error:
                raise TypeError(f"{path}: {error}") from None
        if type(value) is list:
            return cls("list", None, tuple(cls._build(v, f"{path}[{i}]") for i, v in enumerate(value)))
        if type(value) is tuple:
            return cls("tuple", None, tuple(cls._build(v, f"{path}[{i}]") for i, v in enumerate(value)))
        if type(value) is dict:
            for key in value:
                if type(key) not in _KEY_TYPES:  # True == 1 == 1.0: only exact str and int keys stay exact
                    raise TypeError(
                        f"{path} has a {type(key).__name__} key {key!r}: dict keys in a value tree must be str or int"
                    )
            keys = _canonical_keys(value)
            return cls("dict", None, tuple(cls._build(value[k], f"{path}[{k!r}]") for k in keys), keys)
        check_plain_container(value, path)
        raise TypeError(_UNSUPPORTED.format(name=_describe(value), path=path))

    def validate(self, value: object, *, path: str = "value") -> None:
        """Require ``value`` to have exactly this structure and state (devices may differ).

        Raises:
            ExecutionInputError: on the first mismatch, naming its path and both sides.
        """
        self.collect_leaves(value, path, [])

    def collect_leaves(self, value: object, path: str, out: list[Any]) -> None:
        """Validate ``value`` and append its arrays to ``out`` in flattened order.

        The flattened order is depth-first: list/tuple by index, dict in signature key
        order, a value's arrays by sorted name. Nothing is appended for a subtree that
        fails (the caller discards ``out`` on error anyway).
        """
        kind = self.kind
        if kind == "value":
            _collect_value(self.leaf, value, path, out)  # type: ignore[arg-type]
        elif kind == "tensor":
            expected: TensorSignature = self.leaf  # type: ignore[assignment]
            if leaf_kind(value) is None:
                raise _mismatch(
                    f"Execution {path} structure differs from the buffer: expected=tensor, actual={_describe(value)}"
                )
            if not expected.matches(value):
                raise _mismatch(
                    f"Execution {path} tensor signature differs from the buffer: expected={expected}, "
                    f"actual={_safe_signature(value)}"
                )
            out.append(value)
        elif kind == "list" or kind == "tuple":
            container = list if kind == "list" else tuple
            if not isinstance(value, container):
                raise _mismatch(
                    f"Execution {path} structure differs from the buffer: expected={kind}, actual={_describe(value)}"
                )
            if len(value) != len(self.children):  # type: ignore[arg-type]
                raise _mismatch(
                    f"Execution {path} length differs from the buffer: expected={len(self.children)}, actual={len(value)}"  # type: ignore[arg-type]
                )
            for i, (child, item) in enumerate(zip(self.children, value)):  # type: ignore[call-overload]
                child.collect_leaves(item, f"{path}[{i}]", out)
        else:
            if not isinstance(value, dict):
                raise _mismatch(
                    f"Execution {path} structure differs from the buffer: expected=dict, actual={_describe(value)}"
                )
            if (len(value) != len(self.keys) or any(k not in value for k in self.keys)
                    or any(type(k) not in _KEY_TYPES for k in value)):
                raise _mismatch(
                    f"Execution {path} dictionary keys differ from the buffer: expected={self.keys}, actual={tuple(value)}"
                )
            for key, child in zip(self.keys, self.children):
                child.collect_leaves(value[key], f"{path}[{key!r}]", out)

    def leaf_signatures(self) -> list[TensorSignature]:
        """Array signatures in flattened order."""
        out: list[TensorSignature] = []
        self._leaf_signatures(out)
        return out

    def _leaf_signatures(self, out: list[TensorSignature]) -> None:
        if self.kind == "tensor":
            out.append(self.leaf)  # type: ignore[arg-type]
        elif self.kind == "value":
            out.extend(sig for _, sig in self.leaf.tensors)  # type: ignore[union-attr]
        else:
            for child in self.children:
                child._leaf_signatures(out)

    @property
    def nbytes(self) -> int:
        """Logical bytes of all arrays in the tree."""
        return sum(sig.nbytes for sig in self.leaf_signatures())


def check_plain_container(value: object, path: str, error: type[TypeError] = TypeError) -> None:
    """Refuse list/tuple/dict subclasses (namedtuple, OrderedDict, defaultdict, ...) with
    ``error``: buffers and outputs are rebuilt as plain containers, which would silently drop
    their type (a namedtuple's attribute access would fail inside the captured function)."""
    for base in (tuple, list, dict):
        if isinstance(value, base) and type(value) is not base:
            raise error(
                f"{path} is a {type(value).__name__}, a {base.__name__} subclass: containers are rebuilt as plain "
                f"{base.__name__}s, so pass a plain {base.__name__} ({base.__name__}(...))"
            )


_KEY_TYPES = (str, int)  # the dict keys a value tree takes, compared with their type


def _canonical_keys(mapping: Mapping) -> tuple[object, ...]:
    """The keys (all ``str`` or ``int``) sorted, ints first: insertion order must not make two
    equal dicts differ."""
    return tuple(sorted(mapping, key=lambda k: (type(k) is str, k)))


def _safe_signature(value: object) -> object:
    try:
        return TensorSignature.from_tensor(value)
    except (TypeError, ValueError) as error:
        return f"<{error}>"


def _type_skeleton(value: object) -> object:
    """The kinds inside a frozen metadata item: tuples recurse; bool, int and float are told
    apart (``True == 1 == 1.0`` in Python) while NumPy scalars count as their Python kind."""
    if type(value) is tuple:
        return tuple(_type_skeleton(item) for item in value)
    if isinstance(value, (bool, np.bool_)):
        return bool
    if isinstance(value, (int, np.integer)):
        return int
    if isinstance(value, (float, np.floating)):
        return float
    return type(value)


def _item_types_match(metadata: Any, expected_types: dict) -> bool:
    """Replay-path check that no item differs only in type (``True`` vs ``1``, ``(0, True)``
    vs ``(0, 1)``) once ``==`` has said the items are equal (so the keys are the same)."""
    for key, want in expected_types.items():
        item = metadata[key]
        if type(want) is tuple:
            if type(item) is not tuple or _type_skeleton(item) != want:
                return False
        elif type(item) is not want:
            return False
    return True


def _collect_value(expected: ValueSignature, value: object, path: str, out: list[Any]) -> None:
    if not is_registered_value(value):
        raise _mismatch(
            f"Execution {path} structure differs from the buffer: expected=value {expected.type_name}, "
            f"actual={_describe(value)}"
        )
    info = value_type_info(value)
    if info.type_name != expected.type_name or info.schema_version != expected.schema_version:
        raise _mismatch(
            f"Execution {path} value signature differs from the buffer: type expected="
            f"{expected.type_name} v{expected.schema_version}, actual={info.type_name} v{info.schema_version}"
        )
    metadata = value.value_metadata()  # type: ignore[attr-defined]
    try:
        same = metadata == expected._metadata_dict and _item_types_match(metadata, expected._metadata_item_types)
    except (TypeError, ValueError):  # e.g. an array item: == has no single truth value
        same = False
    if not same:
        try:
            frozen = dict(freeze_metadata(dict(metadata)))  # type: ignore[call-overload]
        except (TypeError, ValueError) as error:  # (ValueError: a NaN item)
            raise _mismatch(
                f"Execution {path} value signature differs from the buffer: {expected.type_name} metadata cannot "
                f"be compared ({error})"
            ) from None
        if frozen != expected._metadata_dict or _type_skeleton(tuple(sorted(frozen.items()))) != expected._metadata_types:
            for key in sorted(set(frozen) | set(expected._metadata_dict)):
                want = expected._metadata_dict.get(key, "<missing>")
                got = frozen.get(key, "<missing>")
                if want != got or _type_skeleton(want) != _type_skeleton(got):
                    raise _mismatch(
                        f"Execution {path} value signature differs from the buffer: {expected.type_name} metadata "
                        f"{key!r} expected={want!r}, actual={got!r}"
                    )
    tensors = value.value_tensors()  # type: ignore[attr-defined]
    if len(tensors) != len(expected.tensors):
        raise _mismatch(
            f"Execution {path} value signature differs from the buffer: {expected.type_name} arrays expected="
            f"{[n for n, _ in expected.tensors]}, actual={sorted(tensors)}"
        )
    for name, sig in expected.tensors:
        array = tensors.get(name)
        if array is None or not sig.matches(array):
            actual = "<missing>" if array is None else _safe_signature(array)
            raise _mismatch(
                f"Execution {path} value signature differs from the buffer: {expected.type_name}.{name} "
                f"expected={sig}, actual={actual}"
            )
        out.append(array)
