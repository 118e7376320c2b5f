"""Encrypted matrix-vector products: cyclic diagonals (FHElium example 18) and BSGS.

``x`` is encrypted *periodic* with period ``n`` (``periodic_message``); diagonal ``k`` of
``A`` (``n x n``) is the slot vector ``d_k[j] = A[j mod n, (j - k) mod n]`` and
``A x = sum_k d_k * roll(x, k)`` slot-wise (the result is periodic too).

* ``matrix_vector``: ``n - 1`` rotations and the diagonal products, then inverse NTT and
  rescale (level + 1). With the default QP-basis diagonals it is double-hoisted
  (``engine.linear_transform``: one ModUp, the products and the sum in the extended basis,
  one ModDown); with Q-basis diagonals single-hoisted (one ModUp, every rotation ModDown'd
  into one batch next to the source's NTT, one ``multiply_plaintext_and_sum``).
* ``matrix_vector_bsgs``: with baby step ``b`` and giant count ``g``, ``k = i*b + j``:
  ``A x = sum_i roll(sum_j roll(d_k, -i*b) * roll(x, j), i*b)``; the ``b - 1`` baby
  rotations share one ModUp (hoisting), then ``g - 1`` giant rotations.

Diagonals are encoded at the ciphertext's level with scale = the prime the final rescale
drops, so the output scale equals the input scale exactly. All evaluation goes through
engine methods (capturable); encoding helpers run on the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import StateMismatchError
from ._checks import check_ciphertext, check_plaintext, check_product_scale
from ._evaluation import _check_output_domain, _from_ntt_sum
from .engine import host_message
from .keygen import normalize_rotation_step
from .keys import RotationKey
from .values import Ciphertext, Plaintext

__all__ = [
    "bsgs_split",
    "encode_bsgs_diagonals",
    "encode_diagonals",
    "matrix_diagonals",
    "matrix_vector",
    "matrix_vector_bsgs",
    "periodic_message",
    "required_rotation_steps",
    "required_rotation_steps_bsgs",
]


def periodic_message(x, num_slots: int) -> np.ndarray:
    """Repeat ``x`` (length ``n`` dividing ``num_slots``) to fill every slot."""
    x = host_message(x)
    if x.ndim == 0:
        raise ValueError("periodic_message needs a vector (length n dividing the slot count), got a scalar")
    n = x.shape[-1]
    if n == 0 or num_slots % n:
        raise ValueError(f"vector length {n} must divide the slot count {num_slots}")
    return np.tile(x, x.shape[:-1] and (1,) * (x.ndim - 1) + (num_slots // n,) or (num_slots // n,))


def matrix_diagonals(matrix, num_slots: int) -> np.ndarray:
    """``[n, num_slots]`` slot vectors ``d_k[j] = A[j mod n, (j - k) mod n]``."""
    a = host_message(matrix)
    n = a.shape[0] if a.ndim else 0
    if n == 0 or a.shape != (n, n) or num_slots % n:
        raise ValueError(f"matrix must be square with a size dividing {num_slots}, got shape {a.shape}")
    j = np.arange(num_slots)
    return np.stack([a[j % n, (j - k) % n] for k in range(n)])


def required_rotation_steps(n: int) -> tuple[int, ...]:
    """Rotation steps ``matrix_vector`` needs for an ``n x n`` matrix: ``1 .. n-1``."""
    return tuple(range(1, n))


def bsgs_split(n: int) -> tuple[int, int]:
    """Baby step ``b = ceil(sqrt(n))`` and giant count ``g = ceil(n / b)``."""
    b = max(1, math.isqrt(n - 1) + 1) if n > 1 else 1
    return b, -(-n // b)


def required_rotation_steps_bsgs(n: int) -> tuple[int, ...]:
    """Baby steps ``1 .. b-1`` and giant steps ``b, 2b, .. (g-1)b``."""
    b, g = bsgs_split(n)
    return tuple(range(1, b)) + tuple(i * b for i in range(1, g))


def _diagonal_scale(engine, level: int) -> float:
    return float(engine.context.moduli[engine.context.prime_ids(level)[0]])


def encode_diagonals(
    engine, matrix, *, level: int = 0, scale: float | None = None, modulus_basis: str = "QP"
) -> Plaintext:
    """Pre-stacked NTT/Montgomery diagonals ``[n, L (+ K), N]`` for ``matrix_vector``.

    ``scale`` defaults to the prime that the final rescale drops, which keeps the output
    scale equal to the input scale. ``modulus_basis="QP"`` (default) also keeps the
    diagonals mod the special primes, which lets ``matrix_vector`` run double-hoisted;
    ``"Q"`` selects the single-hoisted schedule.
    """
    scale = _diagonal_scale(engine, level) if scale is None else float(scale)
    return engine.encode(
        matrix_diagonals(matrix, engine.num_slots), level=level, scale=scale, modulus_basis=modulus_basis
    )


def encode_bsgs_diagonals(engine, matrix, *, level: int = 0, scale: float | None = None) -> Plaintext:
    """Pre-rotated diagonals ``[g, b, L, N]``: entry ``(i, j)`` is ``roll(d_{i b + j}, -i b)`` (zero past n)."""
    scale = _diagonal_scale(engine, level) if scale is None else float(scale)
    diagonals = matrix_diagonals(matrix, engine.num_slots)
    n = diagonals.shape[0]
    b, g = bsgs_split(n)
    grid = np.zeros((g, b, engine.num_slots), dtype=diagonals.dtype)
    for i in range(g):
        for j in range(b):
            if i * b + j < n:
                grid[i, j] = np.roll(diagonals[i * b + j], -i * b)
    return engine.encode(grid, level=level, scale=scale)


def _keys(rotation_keys, steps, num_slots: int) -> list[RotationKey]:
    """The keys for ``steps``, all looked up and checked before any work starts.

    A mapping is indexed by step, a sequence by ``step - 1``. Each key must be a
    ``RotationKey`` whose ``rotation_step`` is ``step`` (normalized), so keys filed under the
    wrong step are refused instead of rotating by the wrong amount.
    """
    if isinstance(rotation_keys, Mapping):
        def find(step):
            return rotation_keys.get(step)
    elif isinstance(rotation_keys, Sequence) and not isinstance(rotation_keys, (str, bytes)):
        def find(step):
            return rotation_keys[step - 1] if 0 < step <= len(rotation_keys) else None
    else:
        raise TypeError(
            "rotation_keys must be a mapping step -> RotationKey or a sequence whose item k - 1 is "
            f"step k, got {type(rotation_keys).__name__}"
        )
    keys = []
    for step in steps:
        key = find(step)
        if key is None:
            raise StateMismatchError(f"no rotation key for step {step}; generate it with engine.rotation_key({step})")
        if type(key) is not RotationKey:
            raise TypeError(f"the rotation key for step {step} is a {type(key).__name__}, not a RotationKey")
        want = normalize_rotation_step(step, num_slots)
        if key.rotation_step != want:
            raise StateMismatchError(
                f"the key given for step {step} rotates by {key.rotation_step}, not {want}; "
                f"generate it with engine.rotation_key({step})"
            )
        keys.append(key)
    return keys


def _check_source(engine, source: Ciphertext, diagonals: Plaintext, batch: tuple[int, ...], op: str) -> None:
    """Everything the product with the diagonals and the rescale will check, checked before
    the first rotation runs (a capture must not record work that then fails): the source's
    and the diagonals' types, context, form and level rows, the batch shape, a prime left to
    drop and the product's scale."""
    if type(source) is not Ciphertext or source.polynomial_domain != "coefficient" or source.is_batched:
        raise StateMismatchError(f"{op} needs an unbatched coefficient-domain Ciphertext")
    if type(diagonals) is not Plaintext or diagonals.batch_shape != batch:
        raise StateMismatchError(
            f"diagonals must be a Plaintext with batch shape {batch}, got "
            f"{getattr(diagonals, 'batch_shape', type(diagonals).__name__)}"
        )
    check_ciphertext(engine, source, op, domain="coefficient", components=(2,))
    check_plaintext(engine, diagonals, op, domain="ntt", residue="montgomery", basis=None)
    if diagonals.level != source.level:
        raise StateMismatchError(f"diagonals are at level {diagonals.level}, the source at level {source.level}")
    if source.level >= engine.context.max_level:
        raise StateMismatchError(f"{op}: the source is at the last level {source.level}; the product's rescale has no "
                                 "prime to drop")
    check_product_scale(engine, source, source.scale * diagonals.scale, op)


def matrix_vector(
    source: Ciphertext,
    *,
    engine,
    diagonals: Plaintext,
    rotation_keys: Mapping[int, RotationKey] | Sequence[RotationKey],
    hoisted: bool = True,
    output_domain: str = "coefficient",
) -> Ciphertext:
    """Encrypted ``A x`` by the cyclic-diagonal method (n - 1 rotations, one batched product).

    Args:
        source: coefficient-domain CT2 of ``periodic_message(x)`` at level ``l``.
        engine: the ``CkksEngine``.
        diagonals: ``encode_diagonals(engine, A, level=l)`` (``[n, L + K, N]`` in the default
            QP basis, ``[n, L, N]`` with ``modulus_basis="Q"``).
        rotation_keys: step -> ``RotationKey`` for steps ``1..n-1`` (mapping, or a sequence
            whose item ``k - 1`` is step ``k``).
        hoisted: True (default) shares one ModUp among the ``n - 1`` rotations. With QP-basis
            diagonals (``encode_diagonals``' default) the diagonal products and their sum
            also happen before one shared ModDown (double hoisting,
            ``engine.linear_transform(..., rescale=True)``: one rounding instead of ``n - 1``,
            no stored rotations, and the rescale folded into that ModDown, which costs about
            half a bit of precision: see ``CkksEngine.linear_transform``). With Q-basis
            diagonals every rotation is ModDown'd straight into one batch
            (``rotate_hoisted_batch``) and bit-identical to ``hoisted=False``:
            FHElium example 18's independent ``rotate_with_key`` calls (which use the Q
            limbs of QP diagonals).
        output_domain: ``"coefficient"`` (default, as FHElium's) or ``"ntt"``: exactly the
            NTT of the coefficient result, computed without transforming it, for a caller
            that multiplies next (the double-hoisted division transforms back only the rows it
            divides out; the other schedules rescale their NTT-domain sum in place).

    Raises:
        StateMismatchError: a key is missing or rotates by another step than the one it is
            filed under (checked for every key before any work), or the source or diagonals
            do not fit.
        TypeError: ``rotation_keys`` is neither a mapping nor a sequence of ``RotationKey``.
        ValueError: an unknown ``output_domain``.

    Returns:
        CT2 in ``output_domain`` at level ``l + 1``, scale ``source.scale * diagonals.scale / q_l``.
    """
    _check_output_domain(output_domain, "matrix_vector")
    n = diagonals.data.shape[0] if type(diagonals) is Plaintext and diagonals.data.ndim == 3 else 0
    _check_source(engine, source, diagonals, (n,), "matrix_vector")
    keys = _keys(rotation_keys, range(1, n), engine.num_slots)
    if diagonals.modulus_basis == "QP":
        if hoisted:
            return engine.linear_transform(source, keys, diagonals, rescale=True, output_domain=output_domain)
        diagonals = engine._q_limbs(diagonals)  # (read in place by the product-sum: no copy)
    # Rotations come out in the NTT domain (the key switch then never transforms the Q rows
    # back and forth); only the source itself needs a forward NTT. Both schedules write every
    # rotation straight into the batch that multiply_plaintext_and_sum consumes; the
    # independent one's rotations are rotate_with_key's, each with its own ModUp.
    if hoisted:
        stacked = engine.rotate_hoisted_batch(source, keys, output_domain="ntt")
    else:
        stacked = engine._rotations_batch(source, keys, "matrix_vector")
    return _from_ntt_sum(engine, engine.multiply_plaintext_and_sum(stacked, diagonals), output_domain, rescale=True)


def matrix_vector_bsgs(
    source: Ciphertext,
    *,
    engine,
    diagonals: Plaintext,
    rotation_keys: Mapping[int, RotationKey] | Sequence[RotationKey],
    output_domain: str = "coefficient",
) -> Ciphertext:
    """Encrypted ``A x`` by baby-step giant-step with hoisted baby rotations.

    Args:
        source: coefficient-domain CT2 of ``periodic_message(x)`` at level ``l``.
        engine: the ``CkksEngine``.
        diagonals: ``encode_bsgs_diagonals(engine, A, level=l)`` (``[g, b, L, N]``).
        rotation_keys: step -> ``RotationKey`` for ``required_rotation_steps_bsgs(n)`` (mapping,
            or a sequence whose item ``k - 1`` is step ``k``).
        output_domain: as in ``matrix_vector``.

    Raises:
        StateMismatchError: a key is missing or rotates by another step than the one it is
            filed under (checked for every key before any work).
        ValueError: an unknown ``output_domain``.

    Returns:
        CT2 in ``output_domain`` at level ``l + 1`` (scale as in ``matrix_vector``).
    """
    _check_output_domain(output_domain, "matrix_vector_bsgs")
    if type(diagonals) is not Plaintext or diagonals.data.ndim != 4:
        raise StateMismatchError("matrix_vector_bsgs needs diagonals from encode_bsgs_diagonals ([g, b, L, N])")
    g, b = diagonals.data.shape[:2]
    _check_source(engine, source, diagonals, (g, b), "matrix_vector_bsgs")
    baby = _keys(rotation_keys, range(1, b), engine.num_slots)
    giant = _keys(rotation_keys, [i * b for i in range(1, g)], engine.num_slots)
    stacked = engine.rotate_hoisted_batch(source, baby, output_domain="ntt")
    # everything stays in the NTT domain until the one inverse NTT below; the giant steps are
    # independent (each its own product, ModUp and key switch): parallel branches on the GPU
    if g == 1:
        total = engine.multiply_plaintext_and_sum(stacked, diagonals._with_data(diagonals.data[0]))
    else:
        total = engine._giant_step_sum(stacked, diagonals, giant)
    return _from_ntt_sum(engine, total, output_domain, rescale=True)
