"""CKKS values: ciphertexts and plaintexts as arrays plus frozen RNS state metadata.

A value is ``data`` (a NumPy or CuPy uint64 array, whatever the backend produced) and its
state: ``level`` (index of the first active Q prime; 0 = fresh, +1 per rescale), ``scale``
(exact float), ``prime_ids`` (one per limb), ``polynomial_domain``, ``modulus_basis``,
``residue_representation``, ``context_id`` and ``key_id``. Values implement the runtime's
value protocol (``fhelium_cupy.values``) and are registered with ``schema_version=1`` and
``immutable=True``.
``with_value_tensors`` is on the graph-replay hot path: it only checks the tensor name and
shape. Layouts: ciphertext ``[component (2|3), *batch, limb, N]``; plaintext
``[*batch, limb, N]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np

from ..errors import StateMismatchError
from ..interop.arrays import leaf_kind
from ..interop.capabilities import require_cupy
from ..interop.devices import as_device
from ..values import register_value_type

__all__ = [
    "Ciphertext",
    "CkksValue",
    "ModulusBasis",
    "Plaintext",
    "PolynomialDomain",
    "ResidueRepresentation",
    "array_module",
    "to_device",
]

PolynomialDomain = Literal["coefficient", "ntt"]
ModulusBasis = Literal["Q", "QP"]
ResidueRepresentation = Literal["standard", "montgomery"]

_DOMAINS = ("coefficient", "ntt")
_BASES = ("Q", "QP")
_RESIDUES = ("standard", "montgomery")


def array_module(array: Any):
    """``numpy`` for NumPy arrays, ``cupy`` (imported lazily) for CuPy arrays."""
    if isinstance(array, np.ndarray):
        return np
    import cupy  # noqa: PLC0415 - lazy on purpose: no CUDA work at import time

    return cupy.get_array_module(array)


def to_device(array: Any, device: object) -> Any:
    """Copy ``array`` to ``device`` (``interop.devices.as_device``: ``"cpu"`` gives NumPy, a
    CUDA device CuPy); no copy if it is already there.

    Raises:
        ValueError, TypeError: ``device`` is not a device description, or ``array`` is not a
            NumPy or CuPy array.
        CudaUnavailableError: a CUDA device without CuPy or a GPU.
    """
    target = as_device(device)
    if leaf_kind(array) not in ("numpy", "cupy"):
        raise TypeError(f"to_device moves NumPy or CuPy arrays, got {type(array).__name__}")
    if target.type == "cpu":
        return array if isinstance(array, np.ndarray) else array.get()
    cupy = require_cupy(f"moving a value to {target}")

    if not isinstance(array, np.ndarray) and array.device.id == target.index:
        return array
    with cupy.cuda.Device(target.index):
        return cupy.asarray(array)


class CkksValue:
    """Base of every CKKS value: one ``data`` array plus immutable metadata.

    Subclasses list their metadata fields in ``_FIELDS``; ``__init__`` validates them
    (public construction), ``with_value_tensors``/``_with_data`` skip validation.
    """

    __slots__ = ("data",)
    _FIELDS: ClassVar[tuple[str, ...]] = ()
    # slot attributes, declared for type checkers (no class attributes are created)
    data: Any
    level: int
    scale: float
    prime_ids: tuple[int, ...]
    polynomial_domain: PolynomialDomain
    modulus_basis: ModulusBasis
    residue_representation: ResidueRepresentation
    context_id: str
    key_id: str | None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new value instead")

    def _set(self, **fields: Any) -> None:
        for name, value in fields.items():
            if isinstance(value, np.generic):  # np.int64 level, np.str_ ids: their Python kind
                value = value.item()
            object.__setattr__(self, name, value)

    def _with_data(self, data: Any, **changes: Any):
        new = object.__new__(type(self))
        for name in self._FIELDS:
            object.__setattr__(new, name, changes.get(name, getattr(self, name)))
        object.__setattr__(new, "data", data)
        return new

    # --- value protocol ------------------------------------------------------------
    def value_metadata(self) -> Mapping[str, object]:
        return {name: getattr(self, name) for name in self._FIELDS}

    def value_tensors(self) -> Mapping[str, Any]:
        return {"data": self.data}

    def with_value_tensors(self, tensors: Mapping[str, Any]):
        """Same type and metadata around the given ``data`` array (no copy; shape checked only)."""
        data = tensors.get("data")
        if len(tensors) != 1 or data is None or tuple(data.shape) != tuple(self.data.shape):
            raise StateMismatchError(
                f"{type(self).__name__} needs exactly one tensor 'data' of shape {tuple(self.data.shape)}, "
                f"got {sorted(tensors)}" + ("" if data is None else f" with shape {tuple(data.shape)}")
            )
        return self._with_data(data)

    # --- residency -------------------------------------------------------------------
    @property
    def device(self) -> str:
        """``"cpu"`` for NumPy data, ``"cuda:N"`` for CuPy data."""
        if isinstance(self.data, np.ndarray):
            return "cpu"
        return f"cuda:{self.data.device.id}"

    def to(self, device: str):
        """Copy to ``"cpu"`` or ``"cuda[:N]"`` (returns ``self`` if already there)."""
        data = to_device(self.data, device)
        return self if data is self.data else self._with_data(data)

    def cpu(self):
        return self.to("cpu")

    @property
    def ring_degree(self) -> int:
        return int(self.data.shape[-1])

    @property
    def limb_count(self) -> int:
        return int(self.data.shape[-2])

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def __repr__(self) -> str:
        meta = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS if k != "prime_ids")
        return f"{type(self).__name__}(shape={tuple(self.data.shape)}, device={self.device!r}, {meta})"


def _init_rns(value: Any, data: Any, leading_dims: int, *, prime_ids: Sequence[int], **fields: Any) -> None:
    """Set ``data`` and the metadata fields of a new value (``prime_ids`` as a tuple of ints),
    then check them: the one constructor body of every CKKS value."""
    value._set(data=data, prime_ids=tuple(int(i) for i in prime_ids), **fields)
    _check_rns_state(value, data, leading_dims=leading_dims)


def _check_rns_state(value: Any, data: Any, *, leading_dims: int) -> None:
    name = type(value).__name__
    if leaf_kind(data) not in ("numpy", "cupy"):
        hint = "; convert torch tensors zero-copy with fhelium_cupy.interop.arrays.to_cupy / to_numpy" if leaf_kind(data) else ""
        raise StateMismatchError(f"{name} data must be a NumPy or CuPy array, got {type(data).__name__}{hint}")
    if getattr(data, "dtype", None) != np.uint64:
        raise StateMismatchError(f"{name} data must be uint64, got {getattr(data, 'dtype', type(data).__name__)}")
    if data.ndim < leading_dims + 2:
        raise StateMismatchError(f"{name} data must have at least {leading_dims + 2} axes, got shape {data.shape}")
    ids = value.prime_ids
    if not ids or any(not isinstance(i, int) or i < 0 for i in ids) or list(ids) != sorted(set(ids)):
        raise StateMismatchError(f"{name} prime_ids must be strictly increasing non-negative ints, got {ids}")
    if data.shape[-2] != len(ids):
        raise StateMismatchError(f"{name} has {data.shape[-2]} limbs but {len(ids)} prime_ids")
    if isinstance(value.level, bool) or not isinstance(value.level, int) or value.level < 0:
        raise StateMismatchError(f"{name} level must be a non-negative int, got {value.level!r}")
    if value.polynomial_domain not in _DOMAINS:
        raise StateMismatchError(f"{name} polynomial_domain must be one of {_DOMAINS}, got {value.polynomial_domain!r}")
    if value.modulus_basis not in _BASES:
        raise StateMismatchError(f"{name} modulus_basis must be one of {_BASES}, got {value.modulus_basis!r}")
    if value.residue_representation not in _RESIDUES:
        raise StateMismatchError(
            f"{name} residue_representation must be one of {_RESIDUES}, got {value.residue_representation!r}"
        )
    if value.scale is not None and (
        not isinstance(value.scale, float) or not math.isfinite(value.scale) or value.scale <= 0
    ):
        raise StateMismatchError(f"{name} scale must be a positive finite float, got {value.scale!r}")
    if not isinstance(value.context_id, str) or not value.context_id:
        raise StateMismatchError(f"{name} context_id must be a non-empty string")


_RNS_FIELDS: tuple[str, ...] = (
    "level",
    "scale",
    "prime_ids",
    "polynomial_domain",
    "modulus_basis",
    "residue_representation",
    "context_id",
    "key_id",
)


class Ciphertext(CkksValue):
    """An RLWE ciphertext ``(c0, c1[, c2])``, data ``[component, *batch, limb, N]`` uint64.

    Ciphertexts are stored in standard residue form in either domain (the backend
    contract); ``key_id`` names the secret key they decrypt under. Each word of ``data``
    must be a canonical residue, below the prime of its row: the constructor has no context
    to check them against (``load_value`` checks a file's), and operations given larger words
    return wrong results (a rescale does first).
    """

    __slots__ = _RNS_FIELDS
    _FIELDS = _RNS_FIELDS

    def __init__(
        self,
        data: Any,
        *,
        level: int,
        scale: float,
        prime_ids: Sequence[int],
        polynomial_domain: PolynomialDomain = "coefficient",
        modulus_basis: ModulusBasis = "Q",
        residue_representation: ResidueRepresentation = "standard",
        context_id: str,
        key_id: str,
    ) -> None:
        _init_rns(
            self, data, 1, level=level, scale=float(scale), prime_ids=prime_ids, polynomial_domain=polynomial_domain,
            modulus_basis=modulus_basis, residue_representation=residue_representation, context_id=context_id,
            key_id=key_id,
        )
        if data.shape[0] not in (2, 3):
            raise StateMismatchError(f"Ciphertext needs 2 or 3 components, got {data.shape[0]}")
        if not isinstance(key_id, str) or not key_id:
            raise StateMismatchError("Ciphertext key_id must be a non-empty string")

    @property
    def component_count(self) -> int:
        return int(self.data.shape[0])

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape[1:-2])

    @property
    def is_batched(self) -> bool:
        return self.data.ndim > 3

    def select_batch(self, index: int) -> Ciphertext:
        """Entry ``index`` of the first batch axis (a view)."""
        if not self.is_batched:
            raise StateMismatchError("select_batch needs a batched ciphertext")
        return self._with_data(self.data[:, index])

    @classmethod
    def stack_batch(cls, ciphertexts: Iterable[Ciphertext]) -> Ciphertext:
        """Stack equal-state ciphertexts (any iterable, read once) along a new batch axis at dim 1 of ``data``."""
        items = _stackable(ciphertexts, cls)
        xp = array_module(items[0].data)
        return items[0]._with_data(xp.stack([c.data for c in items], axis=1))


class Plaintext(CkksValue):
    """An encoded message in RNS form, data ``[*batch, limb, N]`` uint64 (``key_id`` is None).

    ``polynomial_domain="ntt"`` with ``residue_representation="montgomery"`` is the form
    ``multiply_plaintext`` takes; ``coefficient``/``standard`` is the form encryption and
    ``add_plaintext`` (on coefficient ciphertexts) take. Words must be canonical residues, as
    for ``Ciphertext`` (not checked here).
    """

    __slots__ = _RNS_FIELDS
    _FIELDS = _RNS_FIELDS

    def __init__(
        self,
        data: Any,
        *,
        level: int,
        scale: float,
        prime_ids: Sequence[int],
        polynomial_domain: PolynomialDomain = "coefficient",
        modulus_basis: ModulusBasis = "Q",
        residue_representation: ResidueRepresentation = "standard",
        context_id: str,
    ) -> None:
        _init_rns(
            self, data, 0, level=level, scale=float(scale), prime_ids=prime_ids, polynomial_domain=polynomial_domain,
            modulus_basis=modulus_basis, residue_representation=residue_representation, context_id=context_id,
            key_id=None,
        )

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape[:-2])

    @classmethod
    def stack_batch(cls, plaintexts: Iterable[Plaintext]) -> Plaintext:
        """Stack equal-state plaintexts (any iterable, read once) along a new leading batch axis."""
        items = _stackable(plaintexts, cls)
        xp = array_module(items[0].data)
        return items[0]._with_data(xp.stack([p.data for p in items], axis=0))


_V = TypeVar("_V", bound=CkksValue)


def _stackable(values: Iterable[_V], cls: type[_V]) -> list[_V]:
    """``values`` read once into a list, each of exactly ``cls`` and of the first's state and
    shape (StateMismatchError otherwise, or when there is none)."""
    items = list(values)
    if not items:
        raise StateMismatchError(f"{cls.__name__}.stack_batch needs at least one value")
    first = items[0]
    for i, v in enumerate(items):
        if type(v) is not cls:
            raise StateMismatchError(f"{cls.__name__}.stack_batch item {i} is a {type(v).__name__}")
        if v.value_metadata() != first.value_metadata() or tuple(v.data.shape) != tuple(first.data.shape):
            raise StateMismatchError(
                f"{cls.__name__}.stack_batch item {i} differs from item 0 in state or shape: "
                f"{dict(v.value_metadata())} {tuple(v.data.shape)} vs {dict(first.value_metadata())} {tuple(first.data.shape)}"
            )
    return items


# immutable: __setattr__ raises and construction is the only writer, so a graph replay
# may return one shared borrowed output value instead of a fresh wrapper per replay
register_value_type(Ciphertext, type_name="ckks.Ciphertext", schema_version=1, immutable=True)
register_value_type(Plaintext, type_name="ckks.Plaintext", schema_version=1, immutable=True)
