"""The exact NumPy backend: the bit-for-bit CPU reference of the ``CkksBackend`` contract.

Every primitive follows the integer definitions in ``base.py`` literally and returns
canonical residues. Products use ``modarith``: when every modulus involved in an
operation is below 2**50, the float-assisted exact products (``mul_mod_float`` for array x
array, ``mul_shoup_float`` for constants); otherwise the exact 128-bit emulation from
32-bit halves (Shoup for constants, Montgomery R = 2**64 for array x array). Both give
the same canonical residues bit for bit (``NumpyBackend(context, float_products=False)``
forces the 32-bit-split path everywhere; the tests compare the two). Hot NumPy code runs
under ``modarith``'s scoped small ufunc buffer. Tables are derived from the context's plain
integers and cached per tuple of prime ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..encoding import crt_reconstructor, integers_to_rns
from ..modarith import (
    MASK32,
    _unbuffered,
    add_mod,
    as_u64,
    montgomery_inverse,
    mul_mod_float,
    mul_montgomery,
    mul_shoup,
    mul_shoup_float,
    neg_mod,
    shoup_companion,
    sub_mod,
)
from ..ntt import (
    coefficient_automorphism_indices,
    ntt_automorphism_indices,
    ntt_forward_u64,
    ntt_inverse_u64,
    ntt_tables,
    stack_ntt_tables,
)
from .base import (
    Domain,
    RingContext,
    active_digits,
    check_domain,
    check_keyswitch_add_rescale,
    check_linear_transform,
    keyswitch_from_digits_many_by_loop,
    ntt_forward_and_modup_by_calls,
)

__all__ = ["NumpyBackend"]

_S32 = np.uint64(32)
_R = 1 << 64
_FLOAT_LIMIT = 1 << 50  # float-assisted products are exact for every modulus below this


def _all_small(moduli: Sequence[int]) -> bool:
    return all(q < _FLOAT_LIMIT for q in moduli)


class _Const:
    """A per-limb constant ``[L, 1]`` with its Shoup companion halves."""

    __slots__ = ("w", "split", "q", "w_over_q", "small", "_parts")

    def __init__(self, values: Sequence[int], moduli: Sequence[int]) -> None:
        L = len(values)
        self.w = as_u64([v % q for v, q in zip(values, moduli)], (L, 1))
        s = as_u64([shoup_companion(v % q, q) for v, q in zip(values, moduli)], (L, 1))
        self.split = (s & MASK32, s >> _S32)
        self.q = as_u64(moduli, (L, 1))
        self.small = _all_small(moduli)
        self.w_over_q = self.w.astype(np.float64) / self.q.astype(np.float64)
        # mixed widths: a constant per width group, the narrow limbs on the float path
        self._parts: tuple[tuple[slice | np.ndarray, _Const], ...] = tuple(
            (where, _Const([values[i] for i in idx], [moduli[i] for i in idx]))
            for where, idx in _positions_by_width(moduli)
        )

    def mul(self, x: np.ndarray, *, fast: bool, out: np.ndarray | None = None) -> np.ndarray:
        """``x * w mod q`` per limb, canonical. ``fast`` (needs ``x < 2**51`` on the limbs of
        moduli below 2**50): the float-assisted Shoup product on those limbs (all of them when
        every modulus is below 2**50), the exact 32-bit-split one (any ``x < 2**64``) on the
        others; into ``out`` when given on the exact path. Use the return value."""
        if fast and self.small:
            return mul_shoup_float(x, self.w, self.w_over_q, self.q)
        if fast and self._parts:
            result = np.empty(np.broadcast_shapes(x.shape, self.q.shape), dtype=np.uint64) if out is None else out
            for where, part in self._parts:
                result[..., where, :] = part.mul(x if x.shape[-2] == 1 else x[..., where, :], fast=True)
            return result
        return mul_shoup(x, self.w, None, self.q, w_split=self.split, out=out)


def _positions(idx: list[int]) -> slice | np.ndarray:
    """A slice for contiguous positions (a view), else an index array."""
    return slice(idx[0], idx[-1] + 1) if idx == list(range(idx[0], idx[-1] + 1)) else np.array(idx)


def _positions_by_width(moduli: Sequence[int]) -> tuple[tuple[slice | np.ndarray, list[int]], ...]:
    """The positions of ``moduli`` split by width: those below 2**50 (float-assisted products),
    then the wider ones (exact 32-bit-split products), each as (where, positions) with
    ``where`` from ``_positions``. Empty when the moduli are all alike (no split)."""
    narrow = [i for i, q in enumerate(moduli) if q < _FLOAT_LIMIT]
    if not narrow or len(narrow) == len(moduli):
        return ()
    wide = [i for i, q in enumerate(moduli) if q >= _FLOAT_LIMIT]
    return tuple((_positions(idx), idx) for idx in (narrow, wide))


class _Rows:
    """Tables of one tuple of prime ids."""

    def __init__(self, context: RingContext, rows: tuple[int, ...], *, fast: bool = True) -> None:
        moduli = [context.moduli[r] for r in rows]
        L = len(rows)
        self.moduli = moduli
        self.q = as_u64(moduli, (L, 1))
        self.q_inv = as_u64([montgomery_inverse(q) for q in moduli], (L, 1))
        self.q_split = (self.q & MASK32, self.q >> _S32)
        self.r_mod = _Const([_R % q for q in moduli], moduli)  # x -> x * R
        self.r_inv = _Const([pow(_R, -1, q) for q in moduli], moduli)  # x -> x * R^-1
        self.one = _Const([1] * L, moduli)  # x (any < 2^64) -> x mod q
        self.half = as_u64([(q - 1) // 2 for q in moduli], (L, 1))
        self.small = fast and _all_small(moduli)  # float-assisted exact products
        self.q_f = self.q.astype(np.float64)
        n = context.ring_degree
        self.ntt = stack_ntt_tables(tuple(ntt_tables(context.moduli[r], context.psi[r], n) for r in rows))
        self.contiguous = slice(rows[0], rows[-1] + 1) if rows == tuple(range(rows[0], rows[-1] + 1)) else None


class _BasisConversion:
    """Centred fast basis conversion from ``src`` primes to ``dst`` primes (contract formula).

    ``out_r = sum_j centered((x_j * inv_j) mod s_j, s_j) * (S / s_j) mod m_r`` with
    ``S = prod(src)``, ``inv_j = (S / s_j)^-1 mod s_j``.

    With ``fast`` the products take the float-assisted ``mul_shoup_float`` wherever its
    operands allow (``_Const.mul``: a modulus below 2**50, and for the terms a source prime
    below 2**50, so that the scaled source is too), the exact 32-bit-split ``mul_shoup``
    elsewhere: a narrow-source conversion into Q and P primes splits by target width. With one src prime ``inv = 1`` and the first product is
    skipped (``x`` is canonical, so ``x * 1 mod s = x``).
    """

    def __init__(self, context: RingContext, src: tuple[int, ...], dst: tuple[int, ...], *, fast: bool = True) -> None:
        s_mod = [context.moduli[r] for r in src]
        d_mod = [context.moduli[r] for r in dst]
        S = 1
        for s in s_mod:
            S *= s
        J, T = len(src), len(dst)
        self.float_products = fast
        self.narrow_src = [s < _FLOAT_LIMIT for s in s_mod]
        inv = [pow(S // s, -1, s) for s in s_mod]
        self.inv = _Const(inv, s_mod)
        self.inv_is_one = all(v == 1 for v in inv)
        self.src_q = as_u64(s_mod, (J, 1))
        self.half = as_u64([(s - 1) // 2 for s in s_mod], (J, 1))
        self.terms = [_Const([(S // s) % m for m in d_mod], d_mod) for s in s_mod]  # each [T, 1]
        self.s_mod_dst = _Const([S % m for m in d_mod], d_mod)
        self.dst_q = as_u64(d_mod, (T, 1))
        self.J = J

    @_unbuffered
    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``x [..., J, N]`` canonical over src -> ``[..., T, N]`` canonical over dst."""
        fast = self.float_products
        y = x if self.inv_is_one else self.inv.mul(x, fast=fast)
        neg_count = (y > self.half).sum(axis=-2, dtype=np.uint64)  # [..., N]
        acc = None
        for j in range(self.J):
            term = self.terms[j].mul(y[..., j : j + 1, :], fast=fast and self.narrow_src[j])
            acc = term if acc is None else add_mod(acc, term, self.dst_q, out=acc)
        assert acc is not None
        corr = self.s_mod_dst.mul(neg_count[..., None, :], fast=fast)
        return sub_mod(acc, corr, self.dst_q, out=acc)


class NumpyBackend:
    """Exact CPU implementation of ``CkksBackend`` (``name = "numpy"``, ``xp = numpy``).

    Args:
        context: any ``RingContext`` (a ``CkksContext``).
        float_products: use the float-assisted exact products wherever every modulus
            involved is below 2**50 (default). ``False`` forces the exact 32-bit-split
            products everywhere (the reference the tests compare against); the outputs are
            identical either way.

    Notes:
        Results are new arrays unless ``out=`` is given; ``out`` may alias an input.
        Nothing here synchronizes anything: it is plain NumPy on the host.
    """

    name = "numpy"
    xp = np
    device_id = None

    def __init__(self, context: RingContext, *, float_products: bool = True) -> None:
        self.context = context
        self.float_products = bool(float_products)
        fast = self.float_products
        self._rows = lru_cache(maxsize=None)(lambda rows: _Rows(context, rows, fast=fast))
        self._conv = lru_cache(maxsize=None)(lambda src, dst: _BasisConversion(context, src, dst, fast=fast))
        self._drop = lru_cache(maxsize=None)(self._drop_constant)
        self._width_groups = lru_cache(maxsize=None)(self._split_by_width)
        self.p_rows = tuple(range(context.q_count, context.q_count + context.p_count))
        self._big_p = math.prod(context.moduli[j] for j in self.p_rows)  # P (its multiples pass a ModDown)

    def tables(self, rows: Sequence[int]) -> _Rows:
        """Cached tables for a tuple of prime ids."""
        return self._rows(tuple(int(r) for r in rows))

    def _limbs(self, what: str, rows: Sequence[int], *arrays) -> None:
        """Refuse an array whose last two axes are not ``[len(rows), N]`` (as the CuPy backend's
        ``_check`` does): NumPy would broadcast a single limb, or pass an extra one, silently."""
        want = (len(rows), self.context.ring_degree)
        for a in arrays:
            shape = np.shape(a)
            if len(shape) < 2 or tuple(shape[-2:]) != want:
                raise ValueError(f"{what}: expected [..., {want[0]}, {want[1]}] for rows {tuple(rows)}, got {shape}")

    def _drop_constant(self, dropped: tuple[int, ...], rows: tuple[int, ...]) -> _Const:
        """``(prod of moduli[dropped])^-1`` per row of ``rows`` (rescale, moddown)."""
        D = 1
        for r in dropped:
            D *= self.context.moduli[r]
        moduli = self.tables(rows).moduli
        return _Const([pow(D, -1, q) for q in moduli], moduli)

    # --- residency -------------------------------------------------------------
    def asarray(self, host) -> np.ndarray:
        return np.array(host, dtype=np.uint64, copy=True, order="C")

    def to_numpy(self, array) -> np.ndarray:
        return np.array(array, dtype=np.uint64, copy=True, order="C")

    def rns_from_integers(self, coefficients, rows) -> np.ndarray:
        return integers_to_rns(coefficients, [self.context.moduli[int(r)] for r in rows])

    def centered_crt_to_float(self, a, rows) -> np.ndarray:
        rows = tuple(int(r) for r in rows)
        return crt_reconstructor(tuple(self.context.moduli[r] for r in rows))(a)

    def is_capturing(self) -> bool:
        return False

    def complete_for_other_streams(self) -> None:
        """Nothing to wait for: host work is complete when it returns."""

    def run_independent(self, tasks):
        for task in tasks:  # one host thread: in order
            task()

    def publish_to_branches(self):  # tasks run in order: what one wrote, the next may read
        pass

    def wait_for_published(self):
        pass

    @staticmethod
    def _emit(result: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            return result
        out[...] = result
        return out

    # --- element-wise mod q ----------------------------------------------------
    def add(self, a, b, rows, *, out=None):
        self._limbs("add", rows, a, b)
        return self._emit(add_mod(a, b, self.tables(rows).q), out)

    def sub(self, a, b, rows, *, out=None):
        self._limbs("sub", rows, a, b)
        return self._emit(sub_mod(a, b, self.tables(rows).q), out)

    def neg(self, a, rows, *, out=None):
        self._limbs("neg", rows, a)
        return self._emit(neg_mod(a, self.tables(rows).q), out)

    def _by_width(self, rows, arrays: tuple, fn, out):
        """``fn(*parts, part_rows)`` on each width group of ``rows`` (``_split_by_width``): the
        limb axis (-2) of every array split alike, the results written into one output (``out``
        when given; it may alias an input, every group's result is made before it is written).
        One group: ``fn`` on the whole arrays."""
        rows = tuple(int(r) for r in rows)
        groups = self._width_groups(rows)
        if len(groups) == 1:
            return self._emit(fn(*arrays, rows), out)
        shape = np.broadcast_shapes(*(np.shape(x) for x in arrays))
        result = np.empty(shape, dtype=np.uint64) if out is None else out
        for where, part in groups:
            result[..., where, :] = fn(*(x[..., where, :] for x in arrays), part)
        return result

    def mul(self, a, b, rows, *, out=None):
        self._limbs("mul", rows, a, b)
        return self._by_width(rows, (a, b), self._mul, out)

    def _mul(self, a, b, rows):
        t = self.tables(rows)
        if t.small:
            return mul_mod_float(a, b, t.q, t.q_f)
        m = mul_montgomery(a, b, t.q, t.q_inv, q_split=t.q_split)
        return mul_shoup(m, t.r_mod.w, None, t.q, w_split=t.r_mod.split)

    def mul_montgomery(self, a, b, rows, *, out=None):
        self._limbs("mul_montgomery", rows, a, b)
        return self._by_width(rows, (a, b), self._mul_montgomery, out)

    def _mul_montgomery(self, a, b, rows):
        t = self.tables(rows)
        if t.small:
            return mul_shoup_float(mul_mod_float(a, b, t.q, t.q_f), t.r_inv.w, t.r_inv.w_over_q, t.q)
        return mul_montgomery(a, b, t.q, t.q_inv, q_split=t.q_split)

    def to_montgomery(self, a, rows, *, out=None):
        self._limbs("to_montgomery", rows, a)
        return self._emit(self.tables(rows).r_mod.mul(a, fast=self.float_products), out)

    def from_montgomery(self, a, rows, *, out=None):
        self._limbs("from_montgomery", rows, a)
        return self._emit(self.tables(rows).r_inv.mul(a, fast=self.float_products), out)

    def mul_scalar(self, a, scalars, rows, *, out=None):
        self._limbs("mul_scalar", rows, a)
        t = self.tables(rows)
        values = [int(s) for s in scalars]
        if len(values) != len(t.moduli):
            raise ValueError(f"mul_scalar: {len(values)} scalars for {len(t.moduli)} limbs")
        return self._emit(_Const(values, t.moduli).mul(a, fast=self.float_products), out)

    def mul_montgomery_sum(self, a, b, rows):
        if a.ndim != 4 or tuple(b.shape) != tuple(a.shape[1:]):
            raise ValueError(f"mul_montgomery_sum: expected a [outer, count, L, N] and b [count, L, N], "
                             f"got {a.shape} and {b.shape}")
        return self.sum_batch(self.mul_montgomery(a, b[None], rows), 1, rows)

    def sum_batch(self, a, axis, rows):
        nd = a.ndim
        ax = axis % nd
        if ax >= nd - 2:
            raise ValueError("sum_batch cannot sum over the limb or coefficient axis")
        self._limbs("sum_batch", rows, a)
        q = self.tables(rows).q
        if a.shape[ax] == 0:  # the empty sum: zeros, as the CuPy backend's (np.take of index 0 raised)
            return np.zeros(a.shape[:ax] + a.shape[ax + 1:], dtype=np.uint64)
        acc = np.array(np.take(a, 0, axis=ax), copy=True)
        for k in range(1, a.shape[ax]):
            add_mod(acc, np.take(a, k, axis=ax), q, out=acc)
        return acc

    def tensor_product(self, a, b, rows):
        mid = self.add(self.mul(a[0], b[1], rows), self.mul(a[1], b[0], rows), rows)
        return np.stack([self.mul(a[0], b[0], rows), mid, self.mul(a[1], b[1], rows)])

    # --- transforms --------------------------------------------------------------
    def ntt_forward(self, a, rows, *, out=None):
        self._limbs("ntt_forward", rows, a)
        return self._by_width(rows, (a,), lambda x, part: ntt_forward_u64(x, self.tables(part).ntt), out)

    def ntt_inverse(self, a, rows, *, out=None):
        self._limbs("ntt_inverse", rows, a)
        return self._by_width(rows, (a,), lambda x, part: ntt_inverse_u64(x, self.tables(part).ntt), out)

    @_unbuffered
    def automorphism(self, a, galois_element: int, rows, *, domain: Domain):
        n = self.context.ring_degree
        g = int(galois_element) % (2 * n)
        if g % 2 == 0:
            raise ValueError(f"galois element must be odd, got {galois_element}")
        check_domain(domain, "automorphism")
        self._limbs("automorphism", rows, a)
        if domain == "ntt":
            return np.take(a, ntt_automorphism_indices(n, g), axis=-1)  # a new C-contiguous array
        source, negate = coefficient_automorphism_indices(n, g)
        gathered = np.take(a, source, axis=-1)  # faster than a[..., source]; np.where beats copyto(where=)
        return np.where(negate, neg_mod(gathered, self.tables(rows).q), gathered)

    @_unbuffered
    def rescale(self, a, rows, *, domain: Domain):
        rows = tuple(int(r) for r in rows)
        if len(rows) < 2:
            raise ValueError("rescale needs at least two limbs")
        check_domain(domain, "rescale")
        self._limbs("rescale", rows, a)
        head, rest = rows[:1], rows[1:]
        c0 = a[..., 0:1, :]
        if domain == "ntt":
            c0 = self.ntt_inverse(c0, head)
        return self._divide(a[..., 1:, :], c0, rest, head, ntt=domain == "ntt")

    def _centered_lift(self, c: np.ndarray, row: int, targets: tuple[int, ...]) -> np.ndarray:
        """``centered(c, q_row) mod m_t`` for each target row: ``c [..., 1, N]`` -> ``[..., T, N]``
        (the one-source-prime basis conversion: ``c mod m_t - [c > (q_row - 1) / 2] * (q_row mod m_t)``)."""
        return self._conv((row,), targets)(c)

    # --- key switching -----------------------------------------------------------
    def modup(self, c, rows, *, c_ntt=None):
        """See ``CkksBackend.modup``; ``c_ntt``'s rows replace each digit's own rows (as on the
        GPU, where they are not transformed again), so a wrong ``c_ntt`` shows here too."""
        rows = tuple(int(r) for r in rows)
        targets = rows + self.p_rows
        position = {r: i for i, r in enumerate(rows)}
        active = active_digits(self.context, rows)
        self._limbs("modup", rows, c)
        if c_ntt is not None and np.shape(c_ntt) != np.shape(c):
            raise ValueError(f"modup: c_ntt {np.shape(c_ntt)} must have c's shape {np.shape(c)}")
        out = np.empty((len(active),) + c.shape[:-2] + (len(targets), c.shape[-1]), dtype=np.uint64)
        for d, (_, kept) in enumerate(active):
            idx = [position[r] for r in kept]
            src = c[..., idx[0] : idx[-1] + 1, :]
            out[d] = self._conv(kept, targets)(src)
        out = self.ntt_forward(out, targets)
        if c_ntt is not None:
            for d, (_, kept) in enumerate(active):
                idx = [position[r] for r in kept]
                out[d][..., idx, :] = c_ntt[..., idx, :]
        return out

    def ntt_forward_and_modup(self, c, rows, *, components=(0, 1)):
        """See ``CkksBackend.ntt_forward_and_modup``: the two calls
        (``ntt_forward_and_modup_by_calls``)."""
        return ntt_forward_and_modup_by_calls(self, np.asarray(c), rows, components)

    @_unbuffered
    def _inner_product(self, digits_ntt, key, rows: tuple[int, ...], galois_element) -> np.ndarray:
        """The key inner product ``[2, ..., L + K, N]`` over ``rows + p_rows`` (NTT domain, before
        ModDown), digits first permuted by the NTT-domain automorphism of ``galois_element``."""
        targets = rows + self.p_rows
        active = active_digits(self.context, rows)
        self._limbs("key switch digits", targets, digits_ntt)
        if digits_ntt.shape[0] != len(active):
            raise ValueError(f"expected {len(active)} active digits for these rows, got {digits_ntt.shape[0]}")
        if galois_element is not None:
            g = int(galois_element) % (2 * self.context.ring_degree)
            if g % 2 == 0:  # not a permutation of the NTT slots: the inner product would be garbage
                raise ValueError(f"galois element must be odd, got {galois_element}")
            perm = ntt_automorphism_indices(self.context.ring_degree, g)
            digits_ntt = np.take(digits_ntt, perm, axis=-1)
        acc = np.empty((2,) + digits_ntt.shape[1:], dtype=np.uint64)
        for where, part in self._width_groups(targets):
            t = self.tables(part)
            key_rows = t.contiguous if t.contiguous is not None else np.asarray(part)  # a slice is a view
            dig = digits_ntt[..., where, :]
            for k in range(2):
                total = None
                for d, (index, _) in enumerate(active):
                    key_k = key[index, k][key_rows]
                    if t.small:
                        # sum_D digit * key mod q, then one R^-1: equal to sum_D (digit * key * R^-1 mod q) mod q
                        prod = mul_mod_float(dig[d], key_k, t.q, t.q_f)
                    else:
                        prod = mul_montgomery(dig[d], key_k, t.q, t.q_inv, q_split=t.q_split)
                    total = prod if total is None else add_mod(total, prod, t.q, out=total)
                if t.small:
                    total = mul_shoup_float(total, t.r_inv.w, t.r_inv.w_over_q, t.q)
                acc[k][..., where, :] = total
        return acc

    def _split_by_width(self, rows: tuple[int, ...]) -> tuple[tuple[slice | np.ndarray, tuple[int, ...]], ...]:
        """``rows`` as the primes below 2**50 (float-assisted products) and the wider ones (exact
        split products): (positions, prime ids) per group, one group when the primes are alike
        or ``float_products`` is off. Positions are slices where contiguous (views, no copies).
        The presets' 40-bit Q primes and 60-bit P primes: the wide products only on the P rows.
        The split itself is ``_positions_by_width`` (as for ``_Const``'s per-width parts)."""
        groups = _positions_by_width([self.context.moduli[r] for r in rows]) if self.float_products else ()
        if not groups:
            return ((slice(None), rows),)
        return tuple((where, tuple(rows[i] for i in idx)) for where, idx in groups)

    def keyswitch_from_digits(self, digits_ntt, key, rows, *, galois_element=None, domain="coefficient"):
        check_domain(domain, "keyswitch_from_digits")
        rows = tuple(int(r) for r in rows)
        return self._round_accumulator(self._inner_product(digits_ntt, key, rows, galois_element), rows, domain)

    def keyswitch_linear_transform(self, digits_ntt, keys, rows, galois_elements, weights, c, *, rescale=False,
                                   domain=None):
        """Double-hoisted ``sum_i weights[i] * rot_i(c)`` (see the contract): the weighted inner
        products and the ``P``-scaled ``c`` terms summed over ``rows + p_rows``, one ModDown
        (with ``rescale``: one division by ``P q_0``), into ``domain``."""
        rows = tuple(int(r) for r in rows)
        keys, gs, domain = check_linear_transform(self, digits_ntt, keys, rows, galois_elements, weights, c,
                                                  rescale=rescale, domain=domain)
        targets, L = rows + self.p_rows, len(rows)
        acc = None
        for key, g, w in zip(keys, gs, weights[1:]):
            term = self.mul_montgomery(self._inner_product(digits_ntt, key, rows, g), w[None], targets)
            acc = term if acc is None else self.add(acc, term, targets, out=acc)
        direct = self.mul_montgomery(c, weights[0, None, :L], rows)
        for g, w in zip(gs, weights[1:]):
            rotated = self.mul_montgomery(self.automorphism(c[0], g, rows, domain="ntt"), w[:L], rows)
            self.add(direct[0], rotated, rows, out=direct[0])
        self._add_p_multiple(acc, direct, rows)
        return self._round_accumulator(acc, rows, domain, rescale=rescale)

    def keyswitch_add_rescale(self, digits_ntt, key, rows, c, *, domain="coefficient"):
        """Relinearize and rescale with one rounding (see the contract): the inner product plus
        ``P c`` on the Q rows, divided by ``P q_0``."""
        rows = tuple(int(r) for r in rows)
        check_keyswitch_add_rescale(self, digits_ntt, rows, c, domain)
        acc = self._inner_product(digits_ntt, key, rows, None)
        self._add_p_multiple(acc, c, rows)
        return self._round_accumulator(acc, rows, domain, rescale=True)

    def _round_accumulator(self, acc: np.ndarray, rows: tuple[int, ...], domain: str, *,
                           rescale: bool = False) -> np.ndarray:
        """The NTT-domain key-switch accumulator ``[..., L + K, N]`` over ``rows + p_rows``
        divided with rounding by ``P`` (ModDown) or, with ``rescale``, by ``P q_0``, into
        ``domain``; NTT output transforms back only the divided-out rows."""
        if domain == "ntt":
            return self._moddown_rescale(acc, rows, ntt=True) if rescale else self._moddown_ntt(acc, rows)
        coefficients = self.ntt_inverse(acc, rows + self.p_rows)
        return self._moddown_rescale(coefficients, rows) if rescale else self.moddown(coefficients, rows)

    def _add_p_multiple(self, acc: np.ndarray, c: np.ndarray, rows: tuple[int, ...]) -> None:
        """``acc[..., :L, :] += P * c mod q_i`` in place (``P`` = product of the P primes): a
        multiple of ``P`` on the Q rows, which a rounding division by ``P`` passes exactly."""
        L = len(rows)
        self.add(acc[..., :L, :], self.mul_scalar(c, [self._big_p] * L, rows), rows, out=acc[..., :L, :])

    def rotate_keyswitch(self, c, key, rows, galois_element, *, c0=None, domain="coefficient", out=None,
                         before_c0=None):
        """See ``CkksBackend.rotate_keyswitch``: no one-pass form here (``None``: the caller makes
        the two calls, which this backend computes exactly)."""
        return None

    def keyswitch_from_digits_many(
        self, digits_ntt, keys, rows, galois_elements, *, c0=None, domain="coefficient", out=None
    ):
        """Stacked ``keyswitch_from_digits`` per (key, Galois element): ``[len(keys), 2, ..., L, N]``
        (plus the rotated ``c0`` in component 0 when given; see the contract)."""
        return keyswitch_from_digits_many_by_loop(
            self, digits_ntt, keys, rows, galois_elements, c0=c0, domain=domain, out=out
        )

    def _divide(self, x_kept: np.ndarray, x_dropped: np.ndarray, kept: tuple[int, ...], dropped: tuple[int, ...],
                *, ntt: bool = False) -> np.ndarray:
        """Rounding division by ``D = prod(moduli[dropped])``: ``(x_kept - e) * D^-1`` over ``kept``,
        ``e`` the centered fast base conversion of the coefficient-domain ``x_dropped`` (over
        ``dropped``) into ``kept``. With ``ntt`` ``x_kept`` is in the NTT domain and ``e`` is
        transformed to match (every step is linear mod q_i: the NTT of the coefficient result).
        ModDown, the NTT-domain ModDown, rescale and their fold are this with other rows."""
        e = self._conv(dropped, kept)(x_dropped)
        if ntt:
            e = self.ntt_forward(e, kept)
        diff = sub_mod(x_kept, e, self.tables(kept).q, out=e)
        return self._drop(dropped, kept).mul(diff, fast=self.float_products, out=diff)

    def _moddown_ntt(self, acc: np.ndarray, rows: tuple[int, ...]) -> np.ndarray:
        """``ntt_forward(moddown(ntt_inverse(acc)))`` computed with the inverse NTT of the K P
        rows only: ``(acc_Q - NTT(e)) * P^-1`` (every step linear mod q_i, so bit-identical)."""
        L = len(rows)
        return self._divide(acc[..., :L, :], self.ntt_inverse(acc[..., L:, :], self.p_rows), rows, self.p_rows,
                            ntt=True)

    def _moddown_rescale(self, x: np.ndarray, rows: tuple[int, ...], *, ntt: bool = False) -> np.ndarray:
        """ModDown and rescale as one rounding division by ``P q_0``: ``x [..., L + K, N]`` over
        ``rows + p_rows`` -> ``[..., L - 1, N]`` over ``rows[1:]`` (``q_0 = rows[0]``), in the
        coefficient domain, or with ``ntt`` in the NTT domain (only the divided-out rows are
        transformed back: bit-identical to the coefficient result's NTT)."""
        L = len(rows)
        dropped_rows = rows[:1] + self.p_rows
        dropped = np.concatenate((x[..., :1, :], x[..., L:, :]), axis=-2)
        if ntt:
            dropped = self.ntt_inverse(dropped, dropped_rows)
        return self._divide(x[..., 1:L, :], dropped, rows[1:], dropped_rows, ntt=ntt)

    @_unbuffered
    def moddown(self, x: np.ndarray, rows) -> np.ndarray:
        """Rounding division by P: coefficient ``x [..., L + K, N]`` over ``rows + p_rows`` -> ``[..., L, N]`` (the contract's ``moddown``)."""
        rows = tuple(int(r) for r in rows)
        self._limbs("moddown", rows + self.p_rows, x)
        L = len(rows)
        return self._divide(x[..., :L, :], x[..., L:, :], rows, self.p_rows)
