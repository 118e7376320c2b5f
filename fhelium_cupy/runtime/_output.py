"""Output trees of captured callables: validation, retained storage, borrowed and owned views.

A captured callable returns ``None``, a CuPy array, a torch CUDA tensor, a registered
value, or lists/tuples/dicts of those, every array on the capture device. The output
plan flattens that tree once at capture; replay then returns the borrowed tree around
the same fixed arrays, or clones the arrays into independent storage. A borrowed tree
never hands out the same *mutable* object twice (FHElium bug 7.5): lists, dicts and
wrappers of mutable value types are rebuilt per replay, while tuples, ``None``, the fixed
arrays themselves and values of types registered ``immutable=True`` (a CKKS
``Ciphertext``) are built once and shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..interop.arrays import leaf_device, leaf_kind, leaf_span, wrap_like
from ..interop.capabilities import require_cupy
from ..interop.devices import Device
from ..values import is_registered_value, registered_type_of, value_type_info
from .buffer import MEMCPY_DEFAULT, StorageLayout, allocate_storage
from .signature import TensorSignature, check_plain_container

__all__ = ["OutputLeafError", "OutputPlan", "OutputSpec", "allocate_retained", "check_output", "describe_output"]


# Structure nodes (tuples, cheap to walk):
#   ("none",) | ("tensor",) | ("value", type_name, names) | ("list", children)
#   | ("tuple", children) | ("dict", keys, children)
Node = tuple


class OutputLeafError(TypeError):
    """An unsupported output tree (capture reports it as ``CudaGraphOutputError``)."""


def _unsupported(obj: object) -> TypeError:
    return OutputLeafError(
        "CUDA Graph outputs must be arrays (CuPy or torch CUDA tensors), registered values, nested "
        f"list/tuple/dict containers, or None (actual={type(obj).__name__})"
    )


def _check_array(array: Any, device: Device, what: str) -> None:
    kind = leaf_kind(array)
    if kind is None:
        raise _unsupported(array)
    if kind == "numpy" or leaf_device(array) != device:
        raise OutputLeafError(f"CUDA Graph output {what} is not on the capture device {device}")


def _walk(out: object, device: Device, leaves: list[Any], values: list[Any]) -> Node:
    if out is None:
        return ("none",)
    if is_registered_value(out):
        info = value_type_info(out)
        tensors = out.value_tensors()  # type: ignore[attr-defined]
        if not tensors:
            raise OutputLeafError(f"CUDA Graph output {info.type_name} has no tensors")
        names = tuple(sorted(tensors))
        for name in names:
            _check_array(tensors[name], device, f"value {info.type_name}.{name}")
            leaves.append(tensors[name])
        values.append(out)
        return ("value", info.type_name, names)
    if leaf_kind(out) is not None:
        _check_array(out, device, "tensor")
        leaves.append(out)
        return ("tensor",)
    check_plain_container(out, "CUDA Graph output", OutputLeafError)
    if isinstance(out, list):
        return ("list", tuple(_walk(item, device, leaves, values) for item in out))
    if isinstance(out, tuple):
        return ("tuple", tuple(_walk(item, device, leaves, values) for item in out))
    if isinstance(out, dict):
        keys = tuple(out)
        return ("dict", keys, tuple(_walk(out[k], device, leaves, values) for k in keys))
    raise _unsupported(out)


def _value_starts(node: Node, position: int, starts: list[int]) -> int:
    """Append to ``starts`` the index of each value's first leaf in ``_walk``'s leaf order
    (values in tree order); return the position after ``node``'s leaves."""
    tag = node[0]
    if tag == "none":
        return position
    if tag == "tensor":
        return position + 1
    if tag == "value":
        starts.append(position)
        return position + len(node[2])
    for child in node[2] if tag == "dict" else node[1]:
        position = _value_starts(child, position, starts)
    return position


def check_output(out: object, device: Device) -> None:
    """Validate a callable's output tree for capture on ``device``.

    Raises:
        TypeError: an unsupported leaf or container, an array on another device, or a
            value without arrays.
    """
    _walk(out, device, [], [])


class OutputSpec:
    """Topology of an output tree: structure, array signatures and kinds, value metadata."""

    __slots__ = ("kinds", "metadata", "signatures", "structure")

    def __init__(self, structure: Node, leaves: list[Any], values: list[Any]) -> None:
        self.structure = structure
        self.signatures = tuple(TensorSignature.from_tensor(leaf) for leaf in leaves)
        self.kinds = tuple(leaf_kind(leaf) for leaf in leaves)
        self.metadata = tuple(dict(v.value_metadata()) for v in values)

    def difference(self, other: OutputSpec) -> str | None:
        """``None`` when both describe the same topology, else a short explanation."""
        if self.structure != other.structure:
            return f"structure {other.structure!r} differs from {self.structure!r}"
        for i, (a, b, ka, kb) in enumerate(zip(self.signatures, other.signatures, self.kinds, other.kinds)):
            if a != b or ka != kb:
                return f"array {i} is {kb} {b}, expected {ka} {a}"
        if self.metadata != other.metadata:
            return "value metadata differs"
        return None


def describe_output(out: object, device: Device) -> OutputSpec:
    """Validate ``out`` (as :func:`check_output`) and describe its topology."""
    leaves: list[Any] = []
    values: list[Any] = []
    structure = _walk(out, device, leaves, values)
    return OutputSpec(structure, leaves, values)


def _rebuild(node: Node, leaves: Any, values: Any) -> object:
    tag = node[0]
    if tag == "tensor":
        return next(leaves)
    if tag == "value":
        template = next(values)
        return template.with_value_tensors({name: next(leaves) for name in node[2]})
    if tag == "none":
        return None
    if tag == "list":
        return [_rebuild(child, leaves, values) for child in node[1]]
    if tag == "tuple":
        return tuple(_rebuild(child, leaves, values) for child in node[1])
    return {key: _rebuild(child, leaves, values) for key, child in zip(node[1], node[2])}


def _borrower(node: Node, leaves: Any, templates: Any) -> tuple[bool, Callable[[], object]]:
    """``(shared, build)`` for one output node; ``shared``: immutable, so build it once."""
    tag = node[0]
    if tag == "none":
        return True, lambda: None
    if tag == "tensor":
        leaf = next(leaves)
        return True, lambda: leaf
    if tag == "value":
        template = next(templates)
        items = tuple((name, next(leaves)) for name in node[2])
        entry = registered_type_of(template)
        if entry is not None and entry.immutable:
            value = template.with_value_tensors(dict(items))
            return True, lambda: value
        return False, lambda: template.with_value_tensors(dict(items))
    if tag == "dict":
        keys = node[1]
        builds = tuple(_borrower(child, leaves, templates)[1] for child in node[2])
        return False, lambda: {key: build() for key, build in zip(keys, builds)}
    children = tuple(_borrower(child, leaves, templates) for child in node[1])
    builds = tuple(build for _, build in children)
    if tag == "list":
        return False, lambda: [build() for build in builds]
    if all(shared for shared, _ in children):
        value = tuple(build() for build in builds)
        return True, lambda: value
    return False, lambda: tuple(build() for build in builds)


class _LeafLayout:
    """Everything needed to clone one fixed output array without re-inspecting it."""

    __slots__ = ("dtype", "kind", "low", "storage")

    def __init__(self, leaf: Any) -> None:
        sig = TensorSignature.from_tensor(leaf)
        self.dtype = sig.dtype  # a torch-only dtype's tag for torch leaves (wrap_like restores it)
        self.storage = StorageLayout(sig)
        self.low = leaf_span(leaf)[0]
        self.kind = leaf_kind(leaf)


def allocate_retained(spec: OutputSpec, device: Device) -> list[Any]:
    """Independent storage for every array of ``spec``, outside any graph arena, in leaf order.

    Call it before the capture begins (normal CuPy allocator, held for the program's
    lifetime, so no pool can hand it out again). torch leaves become torch views.
    """
    out = []
    for sig, kind in zip(spec.signatures, spec.kinds):
        storage = allocate_storage(sig, device)  # normal allocator, never the graph arena
        out.append(wrap_like(storage, kind, dtype=sig.dtype) if kind == "torch" else storage)  # type: ignore[arg-type]
    return out


class OutputPlan:
    """The fixed output of one program: structure, fixed arrays, value templates.

    ``borrow()`` returns a fresh tree around the fixed arrays (the arrays themselves are
    the stable graph arrays); ``clone(stream)`` enqueues device copies into newly
    allocated storage on ``stream`` and returns a tree around them.
    """

    __slots__ = ("_borrow", "_layouts", "leaves", "nbytes", "structure", "templates")

    def __init__(self, structure: Node, leaves: list[Any], templates: list[Any]) -> None:
        self.structure = structure
        self.leaves = tuple(leaves)
        self.templates = tuple(templates)
        self._layouts = tuple(_LeafLayout(leaf) for leaf in leaves)
        self.nbytes = sum(layout.storage.span for layout in self._layouts)
        self._borrow: Callable[[], object] = self._make_borrow()

    @classmethod
    def from_output(cls, out: object, device: Device) -> OutputPlan:
        """Plan around the arrays the callable returned (they become the fixed output)."""
        leaves: list[Any] = []
        values: list[Any] = []
        structure = _walk(out, device, leaves, values)
        return cls(structure, leaves, values)

    @classmethod
    def retained(cls, spec: OutputSpec, storage: list[Any], out: object, device: Device) -> tuple[OutputPlan, list[tuple[int, int, int]]]:
        """Plan over ``storage`` (from :func:`allocate_retained`) for the capture-time output ``out``.

        Pure host work, safe inside a capture. The returned copy list
        ``[(dst_low, src_low, span)]`` moves ``out`` into the retained storage; the caller
        enqueues it inside the capture, at the end of the graph.

        Raises:
            TypeError: ``out`` is invalid, or its topology differs from ``spec``.
        """
        leaves: list[Any] = []
        values: list[Any] = []
        structure = _walk(out, device, leaves, values)
        difference = spec.difference(OutputSpec(structure, leaves, values))
        if difference is not None:
            raise OutputLeafError(f"the captured output differs from the last warmup output: {difference}")
        copies = []
        for leaf, target in zip(leaves, storage):
            dst_low, span = leaf_span(target)
            if span:
                copies.append((dst_low, leaf_span(leaf)[0], span))
        starts: list[int] = []
        _value_starts(structure, 0, starts)  # plain arrays may sit between (and before) values' leaves
        templates = []
        for value, start in zip(values, starts):
            names = sorted(value.value_tensors())
            templates.append(value.with_value_tensors({name: storage[start + j] for j, name in enumerate(names)}))
        return cls(structure, list(storage), templates), copies

    def _make_borrow(self) -> Callable[[], object]:
        shared, build = _borrower(self.structure, iter(self.leaves), iter(self.templates))
        if shared:
            tree = build()
            return lambda: tree
        return build

    def borrow(self) -> object:
        """The tree around the fixed output arrays (overwritten by the next replay).

        Mutable nodes (lists, dicts, wrappers of mutable value types) are new on every
        call; immutable ones are the same objects every time.
        """
        return self._borrow()

    def clone(self, stream: Any) -> object:
        """Independent copies of the fixed arrays, enqueued on ``stream``; same leaf types.

        The caller must have made ``stream`` the current CuPy stream and the program's
        device current (the new blocks then belong to that stream's pool arena).
        """
        cupy = require_cupy("copying a graph output")
        runtime = cupy.cuda.runtime
        sptr = stream.ptr
        copies = []
        for layout in self._layouts:
            storage = layout.storage
            array = storage.device_array(cupy)
            if storage.span:
                runtime.memcpyAsync(array.data.ptr - storage.low_offset, layout.low, storage.span, MEMCPY_DEFAULT,
                                    sptr)
            copies.append(wrap_like(array, "torch", dtype=layout.dtype) if layout.kind == "torch" else array)
        return _rebuild(self.structure, iter(copies), iter(self.templates))
