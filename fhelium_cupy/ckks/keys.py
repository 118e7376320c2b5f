"""CKKS key values: secret, public and key-switching keys (relinearization, rotation, conjugation).

All keys hold level-0 rows in the NTT domain, Montgomery form. ``key_id`` is the first 16
hex digits of the sha256 of a random per-key salt (never derived from the key material);
every key and ciphertext carries the ``key_id`` of the secret it belongs to.

Layouts: ``SecretKey`` ``[nQ + nP, N]`` (basis QP); ``PublicKey`` ``[2, nQ + nP, N]`` (basis QP,
rows ``(b, a)`` with ``b + a*s = e``); ``KeySwitchKey`` ``[dnum, 2, nQ + nP, N]`` (basis
QP; digit ``d`` holds ``(b_d, a_d)`` with ``b_d + a_d*s = e_d + P*g_d*s_src``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ..errors import StateMismatchError
from ..values import register_value_type
from .values import _RNS_FIELDS, CkksValue, ModulusBasis, _init_rns

__all__ = [
    "ConjugationKey",
    "KeySwitchKey",
    "PublicKey",
    "RelinearizationKey",
    "RotationKey",
    "SecretKey",
    "galois_element_for_step",
    "normalize_rotation_step",
]

_KEY_FIELDS = _RNS_FIELDS


def normalize_rotation_step(step: int, num_slots: int) -> int:
    """Step modulo ``num_slots`` mapped into ``[-num_slots/2, num_slots/2)``.

    Raises:
        TypeError: ``step`` is not an integer (``1.5`` or ``"1"`` are not rotated by 1).
    """
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"a rotation step must be an int, got {type(step).__name__} {step!r}")
    r = int(step) % num_slots
    return r - num_slots if r >= num_slots // 2 else r


def galois_element_for_step(step: int, ring_degree: int) -> int:
    """``5**((-step) mod N/2) mod 2N``: decrypts to ``numpy.roll(m, step)`` (generator 5)."""
    return pow(5, (-int(step)) % (ring_degree // 2), 2 * ring_degree)


class _Key(CkksValue):
    __slots__ = _KEY_FIELDS
    _FIELDS: ClassVar[tuple[str, ...]] = _KEY_FIELDS
    _BASIS: ClassVar[ModulusBasis] = "QP"
    _LEADING: ClassVar[int] = 0
    key_id: str  # always a non-empty string for keys (checked in ``__init__``)

    def __init__(self, data: Any, *, prime_ids: Sequence[int], context_id: str, key_id: str, **extra: Any) -> None:
        _init_rns(
            self, data, self._LEADING, level=0, scale=None, prime_ids=prime_ids, polynomial_domain="ntt",
            modulus_basis=self._BASIS, residue_representation="montgomery", context_id=context_id, key_id=key_id,
            **extra,
        )
        if not isinstance(key_id, str) or not key_id:
            raise StateMismatchError(f"{type(self).__name__} key_id must be a non-empty string")
        shape = tuple(self.data.shape)
        if len(shape) != self._LEADING + 2 or (self._LEADING and shape[self._LEADING - 1] != 2):
            layout = ("[dnum, 2, rows, N]", "[2, rows, N]", "[rows, N]")[2 - self._LEADING]
            raise StateMismatchError(f"{type(self).__name__} data must be {layout}, got shape {shape}")


def _ring_degree_of(key: _Key) -> int:
    n = key.ring_degree
    if n < 4 or n & (n - 1):
        raise StateMismatchError(f"{type(key).__name__} limbs of {n} coefficients: not a power-of-two ring degree")
    return n


class SecretKey(_Key):
    """Ternary secret ``s`` over all level-0 QP rows, ``[nQ + nP, N]`` NTT/Montgomery."""

    __slots__ = ()

    def __repr__(self) -> str:  # never print key material
        return f"SecretKey(key_id={self.key_id!r}, context_id={self.context_id!r}, shape={tuple(self.data.shape)})"


class PublicKey(_Key):
    """Encryption key ``(b, a)``, ``[2, nQ + nP, N]`` NTT/Montgomery over level-0 QP rows."""

    __slots__ = ()
    _LEADING = 1


class KeySwitchKey(_Key):
    """Hybrid key-switching key ``[dnum, 2, nQ + nP, N]`` from some ``s_src`` to the secret ``key_id``."""

    __slots__ = ()
    _LEADING = 2

    @property
    def digit_count(self) -> int:
        return int(self.data.shape[0])


class RelinearizationKey(KeySwitchKey):
    """Key switching ``s**2 -> s`` (used by ``relinearize``)."""

    __slots__ = ()


_GALOIS_FIELDS: tuple[str, ...] = _KEY_FIELDS + ("galois_element",)


class ConjugationKey(KeySwitchKey):
    """Key switching ``sigma_g(s) -> s`` for ``g = 2N - 1`` (complex conjugation of slots)."""

    __slots__ = ("galois_element",)
    _FIELDS = _GALOIS_FIELDS
    galois_element: int  # slot attribute, declared for type checkers

    def __init__(
        self, data: Any, *, prime_ids: Sequence[int], context_id: str, key_id: str, galois_element: int
    ) -> None:
        super().__init__(
            data, prime_ids=prime_ids, context_id=context_id, key_id=key_id, galois_element=int(galois_element)
        )
        n = _ring_degree_of(self)
        if self.galois_element != 2 * n - 1:
            raise StateMismatchError(
                f"ConjugationKey galois_element must be 2N - 1 = {2 * n - 1}, got {self.galois_element}"
            )


class RotationKey(KeySwitchKey):
    """Key switching ``sigma_g(s) -> s`` with ``g = 5**(-rotation_step mod N/2) mod 2N``.

    ``rotate_with_key(ct, key)`` then decrypts to ``numpy.roll(m, rotation_step)``;
    ``rotation_step`` is normalised into ``[-N/4, N/4)``.
    """

    __slots__ = ("galois_element", "rotation_step")
    _FIELDS = _GALOIS_FIELDS + ("rotation_step",)
    # slot attributes, declared for type checkers
    galois_element: int
    rotation_step: int

    def __init__(
        self,
        data: Any,
        *,
        prime_ids: Sequence[int],
        context_id: str,
        key_id: str,
        galois_element: int,
        rotation_step: int,
    ) -> None:
        super().__init__(
            data,
            prime_ids=prime_ids,
            context_id=context_id,
            key_id=key_id,
            galois_element=int(galois_element),
            rotation_step=int(rotation_step),
        )
        n = _ring_degree_of(self)
        normalized = normalize_rotation_step(self.rotation_step, n // 2)
        expected = galois_element_for_step(self.rotation_step, n)
        if normalized != self.rotation_step or self.galois_element != expected:
            raise StateMismatchError(
                f"RotationKey rotation_step {self.rotation_step} (normalized: {normalized}) needs galois_element "
                f"{expected} for N = {n}, got {self.galois_element}"
            )


for _cls in (SecretKey, PublicKey, KeySwitchKey, RelinearizationKey, RotationKey, ConjugationKey):
    register_value_type(_cls, type_name=f"ckks.{_cls.__name__}", schema_version=1)
