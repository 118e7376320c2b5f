"""Replay-speed validation: a signature compiled once into nested closures.

``ValueTreeSignature.collect_leaves`` walks a tree generically: it formats a path string
per node, classifies every leaf and re-derives the metadata type skeletons. A program
replays one fixed signature many times, so :func:`leaf_collector` specializes that walk
at capture. The compiled check accepts a *subset* of what ``collect_leaves`` accepts
(exact container types, NumPy/CuPy leaves, metadata already in frozen form with exactly
the captured item types); on any miss it returns no answer and the generic walk runs,
which either raises the precise ``ExecutionInputError`` or accepts a rarer form (torch
leaves, NumPy scalars in metadata, subclassed containers). Exactness is therefore
unchanged, and nothing is copied before the whole tree passed one of the two walks.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..values import registered_type_of, value_type_info
from .signature import _KEY_TYPES, TensorSignature, ValueSignature, ValueTreeSignature, _type_skeleton

__all__ = ["leaf_collector"]

# check(value, out) -> True when ``value`` matched (its arrays appended to ``out``)
Check = Callable[[Any, list], bool]


def _never(value: Any, out: list) -> bool:
    return False


def leaf_collector(signature: ValueTreeSignature, array_types: Iterable[type] = (), path: str = "source") -> Callable[[object], list[Any]]:
    """``collect(value) -> arrays in flattened order``, raising as ``signature.collect_leaves``.

    ``array_types``: exact array classes the compiled check accepts besides
    ``numpy.ndarray`` (pass ``cupy.ndarray``); other leaves take the generic walk.

    Raises (from the returned function):
        ExecutionInputError: ``value`` differs from ``signature`` (nothing is returned).
    """
    check = _compile(signature, frozenset((np.ndarray, *array_types)))

    def collect(value: object) -> list[Any]:
        out: list[Any] = []
        if check(value, out):
            return out
        out = []
        signature.collect_leaves(value, path, out)
        return out

    return collect


def _compile(sig: ValueTreeSignature, array_types: frozenset[type]) -> Check:
    kind = sig.kind
    if kind == "tensor":
        return _compile_tensor(sig.leaf, array_types)  # type: ignore[arg-type]
    if kind == "value":
        return _compile_value(sig.leaf, array_types)  # type: ignore[arg-type]
    children = tuple(_compile(child, array_types) for child in sig.children)
    if kind == "dict":
        return _compile_dict(sig.keys, children)
    return _compile_sequence(list if kind == "list" else tuple, children)


def _compile_tensor(expected: TensorSignature, array_types: frozenset[type]) -> Check:
    if expected.requires_grad:
        return _never  # only torch leaves carry requires_grad: the generic walk handles them
    if expected._empty:  # no element, no stride to compare (TensorSignature.matches)
        shape, dtype = expected.shape, expected.dtype

        def empty(value: Any, out: list) -> bool:
            if type(value) in array_types and value.shape == shape and value.dtype == dtype:
                out.append(value)
                return True
            return False

        return empty
    topology = (expected.shape, expected._byte_strides, expected.dtype)

    def tensor(value: Any, out: list) -> bool:
        if type(value) in array_types and (value.shape, value.strides, value.dtype) == topology:
            out.append(value)
            return True
        return False

    return tensor


def _compile_sequence(container: Any, children: tuple[Check, ...]) -> Check:
    n = len(children)
    if n == 1:
        only = children[0]

        def single(value: Any, out: list) -> bool:
            return type(value) is container and len(value) == 1 and only(value[0], out)

        return single

    def sequence(value: Any, out: list) -> bool:
        if type(value) is not container or len(value) != n:
            return False
        for check, item in zip(children, value):
            if not check(item, out):
                return False
        return True

    return sequence


def _compile_dict(keys: tuple[object, ...], children: tuple[Check, ...]) -> Check:
    key_set = frozenset(keys)
    pairs = tuple(zip(keys, children))
    # {True: ...} and {1.0: ...} have the key set {1}: only a signature with int keys needs the
    # key types read (a str never equals a bool or a float), so all-str dicts skip that loop
    typed = any(type(k) is int for k in keys)

    def mapping(value: Any, out: list) -> bool:
        if type(value) is not dict or value.keys() != key_set:
            return False
        if typed and any(type(key) not in _KEY_TYPES for key in value):
            return False
        for key, check in pairs:
            if not check(value[key], out):
                return False
        return True

    return mapping


def _compile_value(expected: ValueSignature, array_types: frozenset[type]) -> Check:
    try:
        entry = value_type_info(expected.type_name)
    except TypeError:
        return _never
    if entry.schema_version != expected.schema_version:
        return _never
    metadata = expected._metadata_dict
    types_match = _metadata_types_check(expected)
    tensors = tuple((name, _compile_tensor(sig, array_types)) for name, sig in expected.tensors)
    count = len(tensors)

    def value_check(value: Any, out: list) -> bool:
        if registered_type_of(value) is not entry:
            return False
        items = value.value_metadata()
        try:
            if items != metadata or not types_match(items):
                return False
        except (TypeError, ValueError):  # an item whose == has no answer (an array): the walk says why
            return False
        arrays = value.value_tensors()
        if len(arrays) != count:
            return False
        for name, check in tensors:
            array = arrays.get(name)
            if array is None or not check(array, out):
                return False
        return True

    return value_check


def _metadata_types_check(expected: ValueSignature) -> Callable[[Any], bool]:
    """``check(metadata)``: every item has exactly the captured item's type (given ``==``).

    Scalars compare ``type(item)`` with the skeleton type; flat tuples compare the
    element types at once; nested tuples fall back to the skeleton function. A miss only
    means "let the generic walk decide".
    """
    scalar_keys: list[str] = []
    scalar_types: list[object] = []
    flat: list[tuple[str, tuple]] = []
    nested: list[tuple[str, tuple]] = []
    for key, item in expected.metadata:
        skeleton = _type_skeleton(item)
        if type(skeleton) is not tuple:
            scalar_keys.append(key)
            scalar_types.append(skeleton)
        elif any(type(part) is tuple for part in skeleton):
            nested.append((key, skeleton))
        else:
            flat.append((key, skeleton))
    want = tuple(scalar_types)
    getter: Callable[[Any], Any]
    if len(scalar_keys) > 1:
        getter = operator.itemgetter(*scalar_keys)
    elif scalar_keys:
        single = operator.itemgetter(scalar_keys[0])

        def getter(items: Any) -> tuple:
            return (single(items),)

    else:

        def getter(items: Any) -> tuple:
            return ()

    def check(items: Any) -> bool:
        if tuple(map(type, getter(items))) != want:
            return False
        for key, skeleton in flat:
            item = items[key]
            if type(item) is not tuple or tuple(map(type, item)) != skeleton:
                return False
        for key, skeleton in nested:
            item = items[key]
            if type(item) is not tuple or _type_skeleton(item) != skeleton:
                return False
        return True

    return check
