"""Array leaves of NumPy, CuPy and torch: one vocabulary for kind, device, topology and storage.

Every supported leaf is described by the same facts: its framework (``"numpy"``,
``"cupy"`` or ``"torch"``), its device, its shape, its strides *in elements*, its NumPy
dtype, its ``requires_grad`` flag (torch only) and the byte range it spans in memory.

torch dtypes NumPy lacks (bfloat16, the float8 formats, complex32) are described by a
*tag*: a one-field structured NumPy dtype named after the torch dtype over an unsigned
integer of its size (``[("torch.bfloat16", "<u2")]``). A tag equals no numeric dtype, so a
signature keeps such leaves apart from integers of the same size; the runtime stores their
payload as those unsigned integers (``storage_dtype``) and hands it out as torch views of
the original dtype (``wrap_like(..., dtype=tag)``). Tagged leaves have no NumPy or CuPy view.
Views between frameworks are zero-copy through DLPack (``to_cupy``, ``to_numpy``,
``wrap_like``); torch never receives a negative-stride array (torch aborts the whole
process on one), and tensors that require grad are detached before export.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Literal

import numpy as np

from .capabilities import cupy_or_none, loaded_torch, require_cupy
from .devices import CPU, Device

__all__ = [
    "LeafKind",
    "bump_autograd_versions",
    "check_plain_torch",
    "data_pointer",
    "element_strides",
    "is_array_leaf",
    "is_torch_only_dtype",
    "leaf_device",
    "leaf_dtype",
    "leaf_kind",
    "leaf_requires_grad",
    "leaf_span",
    "low_offset_bytes",
    "numpy_dtype_of",
    "span_nbytes",
    "storage_dtype",
    "to_cupy",
    "to_numpy",
    "wrap_like",
]

LeafKind = Literal["numpy", "cupy", "torch"]


# Array classes already classified, mapped to their kind. The kind depends on the class
# alone, so one dict lookup answers every later leaf of that class (the replay hot path).
_KIND_OF_CLASS: dict[type, LeafKind] = {np.ndarray: "numpy"}


def leaf_kind(obj: object) -> LeafKind | None:
    """Framework of an array leaf, or ``None`` if ``obj`` is not a supported array."""
    cls = type(obj)
    kind = _KIND_OF_CLASS.get(cls)
    if kind is not None:
        return kind
    if isinstance(obj, np.ndarray):
        if cls is not np.memmap:
            # a subclass would come back as a plain ndarray from a buffer or graph (np.matrix's
            # * is a matrix product, a recarray's fields attributes); MaskedArray's bytes under
            # the mask are not its values: np.asarray(x) states the conversion
            return None
        kind = "numpy"
    else:
        # the module name first: it answers without importing CuPy or torch; then, for
        # subclasses defined elsewhere, isinstance against a framework already imported
        cupy = cupy_or_none() if cls.__module__.startswith("cupy") else sys.modules.get("cupy")
        torch = loaded_torch()
        if cupy is not None and isinstance(getattr(cupy, "ndarray", None), type) and isinstance(obj, cupy.ndarray):
            kind = "cupy"
        elif torch is not None and isinstance(obj, torch.Tensor):
            kind = "torch"
    if kind is not None:
        _KIND_OF_CLASS[cls] = kind
    return kind


def is_array_leaf(obj: object) -> bool:
    return leaf_kind(obj) is not None


# torch dtypes NumPy lacks whose bytes are their values: staged through a tag (module docstring)
_TORCH_ONLY_NAMES = (
    "bfloat16", "complex32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
)
_TAG_PREFIX = "torch."
_TORCH_TO_NUMPY: dict[Any, np.dtype] = {}  # torch dtype -> NumPy dtype or tag, built once
_TAG_TO_TORCH: dict[np.dtype, Any] = {}  # tag -> torch dtype


def _torch_dtype_table() -> dict[Any, np.dtype]:
    if not _TORCH_TO_NUMPY:
        torch = loaded_torch()
        assert torch is not None
        table, tags = {}, {}
        for name in (
            "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
            "complex64", "complex128", "uint16", "uint32", "uint64",
        ):
            tdt = getattr(torch, name, None)
            if tdt is not None:
                table[tdt] = np.dtype(name)
        for name in _TORCH_ONLY_NAMES:
            tdt = getattr(torch, name, None)
            if tdt is not None:
                tag = np.dtype([(_TAG_PREFIX + name, f"<u{tdt.itemsize}")])
                table[tdt], tags[tag] = tag, tdt
        _TAG_TO_TORCH.update(tags)  # before the table: a tag handed out is always in the map
        _TORCH_TO_NUMPY.update(table)  # one step: another thread never sees a partial table
    return _TORCH_TO_NUMPY


def is_torch_only_dtype(dtype: np.dtype) -> bool:
    """True for the tag of a torch dtype NumPy lacks (module docstring)."""
    names = dtype.names
    return names is not None and len(names) == 1 and names[0].startswith(_TAG_PREFIX)


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The NumPy dtype storage of ``dtype`` is allocated with: a tag's unsigned integer, else itself."""
    if is_torch_only_dtype(dtype):
        return dtype.fields[dtype.names[0]][0]  # type: ignore[index]
    return dtype


def _torch_dtype_of_tag(dtype: np.dtype) -> Any:
    _torch_dtype_table()  # a tag exists only once torch is imported
    return _TAG_TO_TORCH[dtype]


def numpy_dtype_of(dtype: object) -> np.dtype:
    """The NumPy dtype equivalent to a NumPy, CuPy or torch dtype.

    torch dtypes NumPy lacks but whose bytes are their values (bfloat16, float8, complex32)
    give their tag (module docstring).

    Raises:
        TypeError: for other torch dtypes NumPy cannot represent (quantized, bit-packed),
            and for dtypes holding Python objects (their bytes are references, not values).
    """
    if type(dtype).__module__.startswith("torch"):
        found = _torch_dtype_table().get(dtype)
        if found is None:
            raise TypeError(f"torch dtype {dtype} has no NumPy equivalent and cannot be staged")
        return found
    result = np.dtype(dtype)  # type: ignore[call-overload]
    if result.hasobject:
        raise TypeError(f"dtype {result} holds Python object references, not values, and cannot be staged")
    return result


def leaf_dtype(leaf: Any) -> np.dtype:
    if leaf_kind(leaf) == "torch":
        return numpy_dtype_of(leaf.dtype)
    return leaf.dtype


def check_plain_torch(leaf: Any) -> None:
    """Refuse torch tensors whose bytes are not their values or that have no bytes to copy.

    Nested tensors (``torch.nested``) have no one shape or strides. A lazily conjugated or
    negated view (``is_conj()``, ``is_neg()``, e.g. ``x.conj().imag``)
    shares the bytes of its base, and only reading it through torch applies the sign; a
    byte copy would silently lose it. Sparse and other non-strided layouts and tensors on
    devices other than CPU and CUDA (``meta``) have no strided storage to copy.

    Tensors with no storage of their own (``data_ptr()`` 0 or unavailable: DTensor,
    FakeTensor, functional, vmap or wrapper-subclass tensors) have nothing to copy either.

    Raises:
        TypeError: naming the fix (``resolve_conj()``, ``resolve_neg()``, ``to_dense()``).
    """
    torch = loaded_torch()
    if getattr(leaf, "is_nested", False):  # layout reads strided, but it has no one shape or strides
        raise TypeError("nested torch tensors are not supported; pass one dense tensor per leaf (tensor.unbind())")
    if torch is not None and leaf.layout is not torch.strided:
        raise TypeError(f"torch tensors with layout {leaf.layout} are not supported; pass a dense tensor (to_dense())")
    if leaf.device.type not in ("cpu", "cuda"):
        raise TypeError(f"torch tensors on {leaf.device.type} are not supported; use CPU or CUDA tensors")
    if leaf.numel():
        try:
            if type(leaf) is torch.Tensor:  # type: ignore[union-attr]
                pointer = leaf.data_ptr()  # functional and vmap tensors raise
            else:  # subclasses: FakeTensor warns before it answers 0
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    pointer = leaf.data_ptr()
        except RuntimeError:
            pointer = 0
        if not pointer:
            raise TypeError(
                f"this {type(leaf).__name__} has no addressable storage (a DTensor, FakeTensor, functional, vmap or "
                "wrapper-subclass tensor); pass a plain tensor (DTensor.full_tensor(), or call outside tracing/vmap)"
            )
    if leaf.is_conj():
        raise TypeError(
            "a lazily conjugated torch view (is_conj()) shares its base's bytes, which are not its values; "
            "call resolve_conj() first"
        )
    if leaf.is_neg():
        raise TypeError(
            "a lazily negated torch view (is_neg(), e.g. x.conj().imag) shares its base's bytes, which are not "
            "its values; call resolve_neg() first"
        )


def bump_autograd_versions(tensors: tuple[Any, ...]) -> None:
    """Tell autograd that the payload under these torch tensors changed outside torch (as
    ``copy_`` would): a graph that saved the old values then refuses ``backward()`` instead
    of silently using the new ones."""
    torch = loaded_torch()
    if torch is not None and tensors:
        torch.autograd.graph.increment_version(tensors)


def element_strides(leaf: Any) -> tuple[int, ...]:
    """Strides in elements (torch convention) for any leaf.

    Raises:
        TypeError: if the dtype's item size is 0, a NumPy/CuPy byte stride is not a multiple of
            the item size, or a torch
            tensor is not a plain strided CPU/CUDA tensor (``check_plain_torch``).
    """
    if leaf_kind(leaf) == "torch":
        check_plain_torch(leaf)
        return tuple(int(s) for s in leaf.stride())
    itemsize = leaf.dtype.itemsize
    if itemsize == 0:  # (np.dtype("V0"), np.dtype([])): no bytes to stage, and no strides in elements
        raise TypeError(f"dtype {leaf.dtype} has an item size of 0 and cannot be staged")
    out = []
    for s in leaf.strides:
        if s % itemsize:
            raise TypeError(f"array stride {s} bytes is not a multiple of its item size {itemsize}")
        out.append(s // itemsize)
    return tuple(out)


def leaf_requires_grad(leaf: Any) -> bool:
    return bool(getattr(leaf, "requires_grad", False)) if leaf_kind(leaf) == "torch" else False


def leaf_device(leaf: Any) -> Device:
    kind = leaf_kind(leaf)
    if kind == "numpy":
        return CPU
    if kind == "cupy":
        return Device("cuda", int(leaf.device.id))
    if kind == "torch":
        dev = leaf.device
        if dev.type == "cpu":
            return CPU
        if dev.type == "cuda":
            return Device("cuda", int(dev.index))
        raise TypeError(f"torch tensors on {dev.type} are not supported; use CPU or CUDA tensors")
    raise TypeError(f"{type(leaf).__name__} is not a NumPy, CuPy or torch array")


def low_offset_bytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from the lowest addressed element up to element 0 (non-zero for negative strides)."""
    if any(n == 0 for n in shape):
        return 0
    return -sum(min(0, s) * (n - 1) for n, s in zip(shape, strides)) * itemsize


def span_nbytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from the lowest to one past the highest addressed element (0 for empty arrays)."""
    if any(n == 0 for n in shape):
        return 0
    extent = sum(abs(s) * (n - 1) for n, s in zip(shape, strides))
    return (extent + 1) * itemsize


def data_pointer(leaf: Any) -> int:
    """Address of element 0 (host or device). Cheap for CuPy arrays: replay calls it per leaf."""
    kind = _KIND_OF_CLASS.get(type(leaf)) or leaf_kind(leaf)
    if kind == "cupy":
        return leaf.data.ptr  # type: ignore[no-any-return]
    if kind == "numpy":
        return int(leaf.__array_interface__["data"][0])
    return int(leaf.data_ptr())


def device_pointer(leaf: Any, index: int) -> int | None:
    """``data_pointer(leaf)`` when the leaf's memory is CUDA device memory of device ``index``
    (a CuPy array or a torch CUDA tensor there), else ``None``. One kind lookup: replay calls
    it per leaf."""
    kind = _KIND_OF_CLASS.get(type(leaf)) or leaf_kind(leaf)
    if kind == "cupy":
        memory = leaf.data
        return memory.ptr if memory.device_id == index else None  # type: ignore[no-any-return]
    if kind == "torch":
        device = leaf.device
        return int(leaf.data_ptr()) if device.type == "cuda" and device.index == index else None
    return None


def leaf_span(leaf: Any) -> tuple[int, int]:
    """``(lowest address, span bytes)`` of the memory a leaf touches."""
    shape = tuple(int(n) for n in leaf.shape)
    strides = element_strides(leaf)
    itemsize = leaf_dtype(leaf).itemsize
    return data_pointer(leaf) - low_offset_bytes(shape, strides, itemsize), span_nbytes(shape, strides, itemsize)


def _require_numpy_equivalent(dtype: Any, framework: str) -> None:
    if is_torch_only_dtype(numpy_dtype_of(dtype)):
        raise TypeError(f"torch dtype {dtype} has no {framework} equivalent, so a tensor of it has no {framework} view")


def to_cupy(leaf: Any) -> Any:
    """Zero-copy CuPy view of a CUDA leaf (CuPy arrays pass through).

    Raises:
        TypeError: not a CUDA leaf, or a torch tensor whose bytes are not its values or that
            has no storage (``check_plain_torch``), or a dtype NumPy has no equivalent for.
    """
    kind = leaf_kind(leaf)
    if kind == "cupy":
        return leaf
    if kind == "torch" and leaf.device.type == "cuda":
        check_plain_torch(leaf)  # DLPack exports a lazily negated view's base bytes: wrong signs
        _require_numpy_equivalent(leaf.dtype, "CuPy")
        cupy = require_cupy("a CuPy view of a torch CUDA tensor")
        return cupy.from_dlpack(leaf.detach())
    raise TypeError(f"{type(leaf).__name__} on {leaf_device(leaf)} has no CuPy view")


def to_numpy(leaf: Any) -> np.ndarray:
    """Zero-copy NumPy view of a CPU leaf (NumPy arrays pass through).

    Raises:
        TypeError: not a CPU leaf, or a torch tensor that has no zero-copy NumPy view (lazy
            conjugate/negative bit, no storage: ``check_plain_torch``; a dtype NumPy lacks).
    """
    kind = leaf_kind(leaf)
    if kind == "numpy":
        return leaf
    if kind == "torch" and leaf.device.type == "cpu":
        check_plain_torch(leaf)
        _require_numpy_equivalent(leaf.dtype, "NumPy")
        return leaf.detach().numpy()
    raise TypeError(f"{type(leaf).__name__} on {leaf_device(leaf)} has no NumPy view")


def wrap_like(storage: Any, kind: LeafKind, *, requires_grad: bool = False, dtype: np.dtype | None = None) -> Any:
    """Present ``storage`` (a NumPy or CuPy array) as a leaf of framework ``kind``, zero-copy.

    ``kind == "torch"`` wraps through DLPack (CUDA) or ``torch.from_numpy`` (CPU). Negative
    strides are refused before torch sees them. ``dtype``: the leaf's dtype when it is a tag
    (storage then holds its unsigned integers, ``storage_dtype``): the torch view gets the
    tagged torch dtype.

    Raises:
        ValueError: negative strides for a torch leaf, or a read-only NumPy array for one
            (torch has no read-only tensors: writes through it would land in memory NumPy
            protects, a fault for a read-only memmap).
        TypeError: a tag for a NumPy or CuPy leaf.
    """
    tagged = dtype is not None and is_torch_only_dtype(dtype)
    if tagged and kind != "torch":
        raise TypeError(f"{dtype} is a torch-only dtype: it has no {kind} leaf")
    if kind == "torch":
        torch = loaded_torch()
        if torch is None:
            raise TypeError("a torch leaf was requested but torch is not imported")
        if any(s < 0 for s in storage.strides):
            raise ValueError("torch cannot view an array with negative strides (it would abort the process)")
        if isinstance(storage, np.ndarray):
            if not storage.flags.writeable:
                raise ValueError("torch cannot view a read-only NumPy array (its tensors are writable); pass a copy")
            tensor = torch.from_numpy(storage)
        else:
            tensor = torch.from_dlpack(storage)
        if tagged:
            tensor = tensor.view(_torch_dtype_of_tag(dtype))  # type: ignore[arg-type]
        if requires_grad:
            tensor.requires_grad_(True)
        return tensor
    if kind == "numpy":
        if isinstance(storage, np.ndarray):
            return storage
        raise TypeError("a NumPy leaf needs host storage")
    if kind == "cupy":
        if isinstance(storage, np.ndarray):
            raise TypeError("a CuPy leaf needs device storage")
        return storage
    raise ValueError(f"unknown leaf kind {kind!r}")
