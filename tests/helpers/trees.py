"""Hypothesis strategies for random nested value trees and single-point mutations."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.helpers.toy_values import ToyValue

__all__ = ["build_tree", "mutate_spec", "tree_specs", "MUTATIONS"]

DTYPES = ("float64", "float32", "int64", "uint64", "int32", "complex128")
VIEWS = ("contiguous", "reversed", "step2", "transposed")

_shape = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def _array_spec() -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {"node": st.just("array"), "shape": _shape, "dtype": st.sampled_from(DTYPES), "view": st.sampled_from(VIEWS)}
    )


def _value_spec() -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {
            "node": st.just("value"),
            "shape": _shape,
            "dtype": st.sampled_from(("uint64", "int64", "float64")),
            "view": st.sampled_from(VIEWS),
            "level": st.integers(0, 5),
            "scale": st.sampled_from((2.0**30, 2.0**40, 1.5)),
            "context_id": st.sampled_from(("ctx-a", "ctx-b")),
            "key_id": st.sampled_from(("key-a", "key-b", None)),
            "aux": st.booleans(),
        }
    )


def _containers(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.lists(children, min_size=0, max_size=3).map(lambda c: {"node": "list", "items": c}),
        st.lists(children, min_size=0, max_size=3).map(lambda c: {"node": "tuple", "items": c}),
        st.dictionaries(st.sampled_from(("x", "y", "z", "w")), children, min_size=0, max_size=3).map(
            lambda c: {"node": "dict", "items": c}
        ),
    )


def _has_leaf(spec: dict) -> bool:
    if spec["node"] in ("array", "value"):
        return True
    items = spec["items"].values() if spec["node"] == "dict" else spec["items"]
    return any(_has_leaf(i) for i in items)


tree_specs = st.recursive(st.one_of(_array_spec(), _value_spec()), _containers, max_leaves=6).filter(_has_leaf)


def _make_array(shape: tuple[int, ...], dtype: str, view: str, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(dtype)
    big_shape = tuple(n * 2 if view == "step2" else n for n in shape)
    if view == "transposed":
        big_shape = tuple(reversed(shape))
    if dt.kind == "c":
        base = (rng.standard_normal(big_shape) + 1j * rng.standard_normal(big_shape)).astype(dt)
    elif dt.kind == "f":
        base = rng.standard_normal(big_shape).astype(dt)
    else:
        info = np.iinfo(dt)
        base = rng.integers(info.min if info.min > -(2**62) else -(2**62), min(info.max, 2**62), size=big_shape, dtype=dt)
    if view == "reversed":
        return base[..., ::-1]
    if view == "step2":
        return base[tuple(slice(None, None, 2) for _ in shape)]
    if view == "transposed":
        return base.T
    return base


def build_tree(spec: dict, seed: int, *, frozen_metadata: bool = False) -> Any:
    """Materialize a spec with fresh random contents (same spec, same signature).

    ``frozen_metadata``: give values ``extras=None`` instead of ``{}``, so their raw
    metadata is already in frozen form (what replay's compiled check accepts directly).
    """
    rng = np.random.default_rng(seed)

    def build(node: dict) -> Any:
        kind = node["node"]
        if kind == "array":
            return _make_array(node["shape"], node["dtype"], node["view"], rng)
        if kind == "value":
            aux = _make_array((2,), "float64", "contiguous", rng) if node["aux"] else None
            return ToyValue(
                data=_make_array(node["shape"], node["dtype"], node["view"], rng),
                level=node["level"],
                scale=node["scale"],
                context_id=node["context_id"],
                key_id=node["key_id"],
                aux=aux,
                extras=None if frozen_metadata else {},  # type: ignore[arg-type]
            )
        if kind == "list":
            return [build(i) for i in node["items"]]
        if kind == "tuple":
            return tuple(build(i) for i in node["items"])
        return {k: build(v) for k, v in node["items"].items()}

    return build(spec)


def _nodes(spec: dict, out: list) -> list:
    out.append(spec)
    if spec["node"] in ("list", "tuple"):
        for item in spec["items"]:
            _nodes(item, out)
    elif spec["node"] == "dict":
        for item in spec["items"].values():
            _nodes(item, out)
    return out


MUTATIONS = ("shape", "dtype", "stride", "level", "scale", "context", "key", "aux", "length", "container", "dict_key")


def mutate_spec(spec: dict, choice: int, kind_choice: int) -> dict | None:
    """Apply one mutation to a deep copy of ``spec``; ``None`` when it does not apply."""
    spec = copy.deepcopy(spec)
    nodes = _nodes(spec, [])
    node = nodes[choice % len(nodes)]
    mutation = MUTATIONS[kind_choice % len(MUTATIONS)]
    kind = node["node"]
    if kind in ("array", "value"):
        if mutation == "shape":
            node["shape"] = (*node["shape"][:-1], node["shape"][-1] + 1)
        elif mutation == "dtype":
            node["dtype"] = "float32" if node["dtype"] != "float32" else "float64"
        elif mutation == "stride":
            if node["view"] == "contiguous":
                node["view"] = "step2"
            elif node["view"] == "transposed" and len(node["shape"]) == 1:
                node["view"] = "reversed" if node["shape"][0] > 1 else "step2"
            else:
                node["view"] = "contiguous"
            if node["view"] == "reversed" and node["shape"][-1] == 1:
                node["view"] = "step2"
        elif kind == "value" and mutation == "level":
            node["level"] += 1
        elif kind == "value" and mutation == "scale":
            node["scale"] *= 2.0
        elif kind == "value" and mutation == "context":
            node["context_id"] = "ctx-other"
        elif kind == "value" and mutation == "key":
            node["key_id"] = "key-other" if node["key_id"] != "key-other" else None
        elif kind == "value" and mutation == "aux":
            node["aux"] = not node["aux"]
        else:
            node["shape"] = (*node["shape"], 2)
        return spec
    if mutation in ("length", "shape", "dtype") or kind == "tuple" and mutation == "dict_key":
        items = node["items"]
        if kind == "dict":
            items["extra"] = {"node": "array", "shape": (1,), "dtype": "float64", "view": "contiguous"}
        else:
            items.append({"node": "array", "shape": (1,), "dtype": "float64", "view": "contiguous"})
        return spec
    if mutation == "container" or kind != "dict":
        if kind == "list":
            node["node"] = "tuple"
        elif kind == "tuple":
            node["node"] = "list"
        else:
            node["node"] = "list"
            node["items"] = list(node["items"].values())
        return spec
    if not node["items"]:
        node["items"]["new"] = {"node": "array", "shape": (1,), "dtype": "float64", "view": "contiguous"}
        return spec
    first = next(iter(node["items"]))
    node["items"]["renamed_" + first] = node["items"].pop(first)
    return spec


def topology(node: Any) -> Any:
    """What a signature must tell apart, read from NumPy and the values themselves (an oracle
    independent of ``fhelium_cupy.runtime.signature``): container kinds and dict keys, array
    shape, dtype and byte strides (none for arrays without elements), value metadata."""
    if isinstance(node, np.ndarray):
        return ("array", node.shape, node.dtype.str, node.strides if node.size else None)
    if isinstance(node, ToyValue):
        return ("value", topology(node.data), node.level, node.scale, node.context_id, node.key_id,
                node.prime_ids, None if node.aux is None else topology(node.aux))
    if type(node) is dict:
        return ("dict", tuple(sorted((k, topology(v)) for k, v in node.items())))
    return (type(node).__name__, tuple(topology(item) for item in node))
