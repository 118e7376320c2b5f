"""Homomorphic evaluation methods of ``CkksEngine`` (a mixin; backend primitives only).

Each method checks the operands' state first, then calls backend primitives with static
arguments (prime ids, Galois elements, key arrays); nothing reads array values on the
host, so these methods are CUDA-Graph capturable on the CuPy backend. Outputs are new
values; inputs are never modified or aliased.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import StateMismatchError
from ._checks import check_ciphertext, check_key, check_plaintext, check_product_scale, check_same_state
from .backends.base import Domain, keyswitch_from_digits_many_by_loop
from .keys import ConjugationKey, KeySwitchKey, RelinearizationKey, RotationKey
from .values import Ciphertext, Plaintext

if TYPE_CHECKING:
    from .backends.base import CkksBackend
    from .context import CkksContext
    from .keygen import KeyChain

__all__ = ["EvaluationMixin"]

def _key_tuple(keys: object, op: str) -> tuple:
    """``keys`` read once into a tuple (``EvaluationMixin._check_hoisted``)."""
    try:
        return tuple(keys)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{op}: keys must be an iterable of RotationKey, got {type(keys).__name__}") from None


def _check_output_domain(output_domain: str, op: str) -> Domain:
    """Reject an unknown ``output_domain`` before any key-switch work is enqueued."""
    if output_domain == "coefficient":
        return "coefficient"
    if output_domain == "ntt":
        return "ntt"
    raise ValueError(f"{op}: output_domain must be 'coefficient' or 'ntt', got {output_domain!r}")


def _from_ntt_sum(engine: EvaluationMixin, total: Ciphertext, output_domain: str, *, rescale: bool) -> Ciphertext:
    """The NTT-domain sum ``total`` of a linear map (checked state, ``output_domain`` checked)
    in ``output_domain``, and with ``rescale`` divided by its first prime
    (``rescale_to_next_level``: level + 1, scale / q). The coefficient-domain rescale is one
    launch, so a coefficient output is transformed back before the rescale, not after."""
    if output_domain == "coefficient":
        total = engine.ntt_domain_to_coefficient_domain(total)
    return engine.rescale_to_next_level(total) if rescale else total


class EvaluationMixin:
    """Evaluation methods; the host class provides ``backend``, ``context``, ``keys``."""

    # provided by the host class (``CkksEngine``); declared for type checkers only
    backend: CkksBackend
    context: CkksContext

    if TYPE_CHECKING:

        @property
        def keys(self) -> KeyChain: ...

        def _check_own_secret(self, ct: Ciphertext, op: str) -> KeyChain: ...

    # --- linear ----------------------------------------------------------------------
    def add(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """``a + b``: equal level, scale, domain and shape; output in the same state."""
        check_ciphertext(self, a, "add")
        check_ciphertext(self, b, "add")
        check_same_state(a, b, "add")
        return a._with_data(self.backend.add(a.data, b.data, a.prime_ids))

    def subtract(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """``a - b``: equal level, scale, domain and shape; output in the same state."""
        check_ciphertext(self, a, "subtract")
        check_ciphertext(self, b, "subtract")
        check_same_state(a, b, "subtract")
        return a._with_data(self.backend.sub(a.data, b.data, a.prime_ids))

    def negate(self, a: Ciphertext) -> Ciphertext:
        """``-a`` in the same state."""
        check_ciphertext(self, a, "negate")
        return a._with_data(self.backend.neg(a.data, a.prime_ids))

    def add_plaintext(self, ct: Ciphertext, pt: Plaintext) -> Ciphertext:
        """``ct + pt`` (pt in standard form, same domain, level and scale as ``ct``); state unchanged.

        ``pt`` has the batch shape of ``ct`` or none (then it is broadcast: one plaintext added
        to every entry), as in :meth:`multiply_plaintext`.
        """
        check_ciphertext(self, ct, "add_plaintext")
        check_plaintext(self, pt, "add_plaintext", domain=ct.polynomial_domain, residue="standard")
        check_same_state(ct, pt, "add_plaintext", check_components=False)
        target = tuple(ct.data.shape[1:])
        if tuple(pt.data.shape) not in (target, target[-2:]):
            raise StateMismatchError(
                f"add_plaintext: plaintext shape {tuple(pt.data.shape)} fits neither {target} nor {target[-2:]}"
            )
        xp, rows = self.backend.xp, ct.prime_ids
        out = xp.empty_like(ct.data)
        self.backend.add(ct.data[0], pt.data, rows, out=out[0])
        out[1:] = ct.data[1:]
        return ct._with_data(out)

    def sum_ciphertext_batch(self, ct: Ciphertext) -> Ciphertext:
        """Sum over the first batch axis (data axis 1); level, scale and domain unchanged."""
        check_ciphertext(self, ct, "sum_ciphertext_batch")
        if not ct.is_batched or ct.batch_shape[0] == 0:
            raise StateMismatchError(
                "sum_ciphertext_batch needs a batched ciphertext with at least one entry (data [component, batch, "
                f"..., limb, N]), got batch shape {ct.batch_shape}"
            )
        return ct._with_data(self.backend.sum_batch(ct.data, 1, ct.prime_ids))

    # --- domains -----------------------------------------------------------------------
    def coefficient_domain_to_ntt_domain(self, value):
        """Forward NTT of a ciphertext or plaintext (residue representation kept)."""
        self._check_any(value, "coefficient_domain_to_ntt_domain", "coefficient")
        return value._with_data(self.backend.ntt_forward(value.data, value.prime_ids), polynomial_domain="ntt")

    def ntt_domain_to_coefficient_domain(self, value):
        """Inverse NTT of a ciphertext or plaintext (residue representation kept)."""
        self._check_any(value, "ntt_domain_to_coefficient_domain", "ntt")
        return value._with_data(self.backend.ntt_inverse(value.data, value.prime_ids), polynomial_domain="coefficient")

    def _check_any(self, value, op: str, domain: str) -> None:
        if type(value) is Plaintext:
            check_plaintext(self, value, op, domain=domain, residue=value.residue_representation, basis=None)
        else:
            check_ciphertext(self, value, op, domain=domain)

    # --- multiplication ------------------------------------------------------------------
    def multiply_plaintext(self, ct: Ciphertext, pt: Plaintext) -> Ciphertext:
        """``ct * pt`` in the NTT domain (pt NTT/Montgomery); scale multiplies, level unchanged.

        ``pt`` has the batch shape of ``ct`` or none (then it is broadcast).
        """
        check_ciphertext(self, ct, "multiply_plaintext", domain="ntt")
        check_plaintext(self, pt, "multiply_plaintext", domain="ntt", residue="montgomery")
        check_same_state(ct, pt, "multiply_plaintext", check_scale=False, check_components=False)
        scale = check_product_scale(self, ct, ct.scale * pt.scale, "multiply_plaintext")
        target = tuple(ct.data.shape[1:])
        if tuple(pt.data.shape) not in (target, target[-2:]):
            raise StateMismatchError(
                f"multiply_plaintext: plaintext shape {tuple(pt.data.shape)} fits neither {target} nor {target[-2:]}"
            )
        xp, rows = self.backend.xp, ct.prime_ids
        p = pt.data if tuple(pt.data.shape) == target else xp.ascontiguousarray(xp.broadcast_to(pt.data, target))
        out = xp.empty_like(ct.data)
        for c in range(ct.component_count):
            self.backend.mul_montgomery(ct.data[c], p, rows, out=out[c])
        return ct._with_data(out, scale=scale)

    def multiply_plaintext_and_sum(self, ct: Ciphertext, pt: Plaintext) -> Ciphertext:
        """``sum_ciphertext_batch(multiply_plaintext(ct, pt))`` in one pass, bit for bit.

        ``ct``: NTT-domain ciphertext of batch shape ``(n,)``; ``pt``: NTT/Montgomery
        plaintext of batch shape ``(n,)`` (one plaintext per entry, e.g. the diagonals of a
        matrix). Returns an unbatched ciphertext; scale ``ct.scale * pt.scale``, level unchanged.
        """
        scale = self._check_weighted_sum(ct, pt)
        return ct._with_data(self.backend.mul_montgomery_sum(ct.data, pt.data, ct.prime_ids), scale=scale)

    def _check_weighted_sum(self, ct: Ciphertext, pt: Plaintext) -> float:
        """``multiply_plaintext_and_sum``'s operand checks; returns the result's scale."""
        op = "multiply_plaintext_and_sum"
        check_ciphertext(self, ct, op, domain="ntt")
        check_plaintext(self, pt, op, domain="ntt", residue="montgomery")
        check_same_state(ct, pt, op, check_scale=False, check_components=False)
        if len(ct.batch_shape) != 1 or tuple(pt.data.shape) != tuple(ct.data.shape[1:]):
            raise StateMismatchError(
                f"{op}: needs a ciphertext of batch shape (n,) and a plaintext of the same batch shape, got "
                f"{ct.batch_shape} and {pt.batch_shape}"
            )
        return check_product_scale(self, ct, ct.scale * pt.scale, op)

    def multiply(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """Tensor product of two NTT-domain CT2 -> CT3 ``(a0 b0, a0 b1 + a1 b0, a1 b1)``; scales multiply."""
        check_ciphertext(self, a, "multiply", domain="ntt", components=(2,))
        check_ciphertext(self, b, "multiply", domain="ntt", components=(2,))
        check_same_state(a, b, "multiply", check_scale=False)
        scale = check_product_scale(self, a, a.scale * b.scale, "multiply")
        return a._with_data(self.backend.tensor_product(a.data, b.data, a.prime_ids), scale=scale)

    def rescale_to_next_level(self, ct: Ciphertext) -> Ciphertext:
        """Divide by the first active prime ``q`` with rounding: level + 1, scale / q, same domain."""
        check_ciphertext(self, ct, "rescale_to_next_level")
        if ct.level >= self.context.max_level:
            raise StateMismatchError(
                f"rescale_to_next_level: ciphertext is at the last level {ct.level}; no prime left to drop"
            )
        self._check_rescaled_scale(ct, ct.scale, "rescale_to_next_level")
        data = self.backend.rescale(ct.data, ct.prime_ids, domain=ct.polynomial_domain)
        return self._next_level(ct, data, ct.polynomial_domain, ct.scale)

    def _next_level(self, ct: Ciphertext, data, domain: str, scale: float) -> Ciphertext:
        """``ct``'s state after dividing ``scale`` by its first active prime ``q`` (dropped):
        level + 1, ``data`` over the remaining primes in ``domain``, scale ``scale / q``."""
        rows = ct.prime_ids
        return ct._with_data(data, polynomial_domain=domain, level=ct.level + 1, prime_ids=rows[1:],
                             scale=scale / self.context.moduli[rows[0]])

    def _check_rescale_flag(self, ct: Ciphertext, rescale: object, op: str) -> None:
        """``rescale`` must be a bool, and ``True`` needs a prime left to drop (the caller checks
        the result's scale: ``_check_rescaled_scale``)."""
        if not isinstance(rescale, bool):
            raise TypeError(f"{op}: rescale must be a bool, got {rescale!r}")
        if rescale and ct.level >= self.context.max_level:
            raise StateMismatchError(f"{op}: ciphertext is at the last level {ct.level}; rescale has no prime to drop")

    def _check_rescaled_scale(self, ct: Ciphertext, scale: float, op: str) -> None:
        """A division of ``scale`` by ``ct``'s first prime must leave at least 1: below it the
        rounding keeps less than the message's integer part (a 2^20 scale over a 40-bit prime
        decrypted to values of 1e9, with no error)."""
        q = self.context.moduli[ct.prime_ids[0]]
        if not scale / q >= 1.0:
            raise StateMismatchError(
                f"{op}: rescaling would leave the scale 2^{math.log2(scale / q):.1f} (2^{math.log2(scale):.1f} divided by "
                f"the {q.bit_length()}-bit prime q_{ct.level}), below 1: the message would round away; multiply "
                "before rescaling, or encode at a larger scale"
            )

    # --- key switching -------------------------------------------------------------------
    def _in_domain(self, data, rows, domain: str, target: str):
        """``data`` (in ``domain``) transformed into ``target`` (itself when they agree)."""
        if domain == target:
            return data
        return self.backend.ntt_forward(data, rows) if target == "ntt" else self.backend.ntt_inverse(data, rows)

    def _modup_input(self, data, rows, domain: str):
        """The key-switched polynomial ``data`` (in ``domain``) in the coefficient domain, and
        its NTT when ``data`` is that (``modup``'s hint: no transform is done twice)."""
        if domain == "ntt":
            return self.backend.ntt_inverse(data, rows), data
        return data, None

    def _switch(self, c_coef, key: KeySwitchKey, rows, output_domain: Domain, c_ntt=None):
        """Key switch one coefficient-domain polynomial -> (y0, y1) ``[2, ..., L, N]`` in
        ``output_domain`` (NTT output skips the inverse NTT of the Q rows; see the backend contract).
        ``c_ntt``: the same polynomial in the NTT domain, when at hand (``modup``'s hint)."""
        digits = self.backend.modup(c_coef, rows, c_ntt=c_ntt)
        return self.backend.keyswitch_from_digits(digits, key.data, rows, domain=output_domain)

    def relinearize(
        self,
        ct: Ciphertext,
        key: RelinearizationKey | None = None,
        *,
        output_domain: str = "coefficient",
        rescale: bool = False,
    ) -> Ciphertext:
        """CT3 -> CT2 under the same secret via the relinearization key; level and scale
        unchanged unless ``rescale=True`` (below).

        ``rescale=True`` also rescales: the ModDown and the division by the first active prime
        ``q`` are one rounding division by ``P q`` (the backend's ``keyswitch_add_rescale``),
        and the result is at level + 1 with scale ``ct.scale / q``. It decrypts like
        ``rescale_to_next_level(relinearize(ct))`` with one rounding instead of two, so it is
        not bit-identical to it, and not more precise: the fast base conversion from the
        ``K + 1`` divided-out primes may be off by a small multiple of ``P q``, which the
        division leaves as a small integer on each coefficient (the separate path's ModDown
        error is divided by ``q`` afterwards), so its error is about half a bit larger (std
        1.4x, measured on the test and N=2^14 presets). NTT output then skips a whole
        ciphertext transform: only the rows of ``q`` and the special primes are transformed
        back, and their base conversion into the kept rows is transformed forward once (the
        kept rows stay NTT values).
        """
        check_ciphertext(self, ct, "relinearize", components=(3,))
        domain = _check_output_domain(output_domain, "relinearize")
        self._check_rescale_flag(ct, rescale, "relinearize")
        if rescale:
            self._check_rescaled_scale(ct, ct.scale, "relinearize")
        if key is None:  # the engine's own key: generated on first use, for its own ciphertexts only
            key = self._check_own_secret(ct, "relinearize").relinearization_key()
        check_key(self, ct, key, "relinearize", RelinearizationKey)
        be, rows, xp = self.backend, ct.prime_ids, self.backend.xp
        c2, c2_ntt = self._modup_input(xp.ascontiguousarray(ct.data[2]), rows, ct.polynomial_domain)
        if rescale:
            digits = be.modup(c2, rows, c_ntt=c2_ntt)
            c01 = self._in_domain(xp.ascontiguousarray(ct.data[:2]), rows, ct.polynomial_domain, "ntt")
            data = be.keyswitch_add_rescale(digits, key.data, rows, c01, domain=domain)
            return self._next_level(ct, data, output_domain, ct.scale)
        y = self._switch(c2, key, rows, domain, c2_ntt)
        c01 = self._in_domain(xp.ascontiguousarray(ct.data[:2]), rows, ct.polynomial_domain, domain)
        return ct._with_data(be.add(c01, y, rows), polynomial_domain=output_domain)

    def _galois(
        self, ct: Ciphertext, key, output_domain: str, op: str, key_type: type[KeySwitchKey], own_key=None
    ) -> Ciphertext:
        """One automorphism with key switch, in the hoisted form: ModUp of the unrotated c1, the
        permutation applied to the digits inside the inner product and to c0 inside the
        ModDown's last step (no separate automorphism or addition). Bit-identical to rotating
        first: the balanced digit decomposition commutes with automorphisms (it is
        coefficient-wise, and centered lifting commutes with negation). With ``key=None``,
        ``own_key(chain)`` makes the engine's key from the chain ``_check_own_secret`` returned
        (not one read again: another thread may replace the keys between), only once the
        operands checked out and only for a ciphertext under the engine's own secret."""
        check_ciphertext(self, ct, op, components=(2,))
        domain = _check_output_domain(output_domain, op)
        if key is None and own_key is not None:
            key = own_key(self._check_own_secret(ct, op))  # the chain checked, not one read again
        check_key(self, ct, key, op, key_type)
        c0, digits = self._hoisted_inputs(ct, domain)
        y = self._hoisted_switch(digits, ct.prime_ids, [key], c0, domain, None)
        return ct._with_data(y[0], polynomial_domain=output_domain)

    def rotate_with_key(self, ct: Ciphertext, key: RotationKey, *, output_domain: str = "coefficient") -> Ciphertext:
        """Rotate slots by ``key.rotation_step``: decrypts to ``numpy.roll(m, step)``; level/scale kept."""
        return self._galois(ct, key, output_domain, "rotate_with_key", RotationKey)

    def conjugate(
        self, ct: Ciphertext, key: ConjugationKey | None = None, *, output_domain: str = "coefficient"
    ) -> Ciphertext:
        """Complex-conjugate every slot; level/scale kept."""
        return self._galois(ct, key, output_domain, "conjugate", ConjugationKey, lambda chain: chain.conjugation_key())

    def rotate_hoisted_with_keys(
        self, ct: Ciphertext, keys: Sequence[RotationKey], *, output_domain: str = "coefficient"
    ) -> list[Ciphertext]:
        """Several rotations of one coefficient-domain CT2 sharing one ModUp (hoisting).

        Returns ciphertexts in ``output_domain``, one per key, in order; level/scale kept.
        ``output_domain="ntt"`` gives exactly the NTT of the coefficient-domain results, with
        fewer limb transforms (the key switch never leaves the NTT domain for the Q rows).
        """
        keys, domain = self._check_hoisted(ct, keys, output_domain, "rotate_hoisted_with_keys")
        if not keys:
            return []
        c0, digits = self._hoisted_inputs(ct, domain)
        y = self._hoisted_switch(digits, ct.prime_ids, keys, c0, domain, None)
        return [ct._with_data(y[i], polynomial_domain=domain) for i in range(len(keys))]

    def rotate_hoisted_batch(
        self, ct: Ciphertext, keys: Sequence[RotationKey], *, output_domain: str = "coefficient"
    ) -> Ciphertext:
        """``ct`` and its hoisted rotations as one batched ciphertext, with no stacking copies.

        Returns a ciphertext of batch shape ``(1 + len(keys),) + ct.batch_shape`` in
        ``output_domain``: entry 0 is ``ct`` itself, entry ``i`` its rotation by
        ``keys[i - 1]``; bit for bit
        ``Ciphertext.stack_batch([ct] + rotate_hoisted_with_keys(ct, keys))`` (in the same
        domain). The key switch writes its results straight into the batch storage, which is
        what a diagonal matrix-vector product consumes.
        """
        keys, domain = self._check_hoisted(ct, keys, output_domain, "rotate_hoisted_batch")
        return self._rotation_batch(ct, keys, domain, hoisted=True)

    def _rotations_batch(self, ct: Ciphertext, keys: Sequence[RotationKey], op: str) -> Ciphertext:
        """``Ciphertext.stack_batch([ct] + [rotate_with_key(ct, k) for k in keys])`` in the NTT
        domain, bit for bit, without the stacking copies: each rotation (its own ModUp,
        FHElium's independent schedule) is written by its key switch straight into the batch
        storage. ``ct``: an unbatched coefficient-domain CT2."""
        keys, _ = self._check_hoisted(ct, keys, "ntt", op)
        return self._rotation_batch(ct, keys, "ntt", hoisted=False)

    def _rotation_batch(self, ct: Ciphertext, keys: Sequence[RotationKey], domain: Domain, *, hoisted: bool):
        """``ct`` in ``domain`` and its rotations as one batch (checked operands): one ModUp shared
        by every key (``hoisted``), or a ModUp per key. The first key's inputs include ``ct``'s
        whole transform (``_hoisted_inputs(..., whole=True)``), which is entry 0.

        A ModUp per key: each rotation reads only ``ct`` and writes only its own entry, so
        they run as independent tasks (``backend.run_independent``: on the GPU, side by
        side on several streams, parallel branches of a captured graph). c0 is transformed
        once: the first task writes the source's transform into entry 0 and publishes it, and
        the others run their ModUp of c1 alone and read c0's transform from entry 0 before
        their key switch (``publish_to_branches`` / ``wait_for_published``); a backend may run
        such a ModUp and key switch in fewer passes (``rotate_keyswitch``)."""
        rows, be = ct.prime_ids, self.backend
        batch, slots = self._entry_batch(ct.data, len(keys))
        if not keys:
            batch[:, 0] = self._in_domain(ct.data, rows, "coefficient", domain)
            return ct._with_data(batch, polynomial_domain=domain)

        def switch(first: int, part: Sequence[RotationKey]) -> Callable[[], None]:
            def run() -> None:  # one ModUp, then the keys of entries first + 1 ..
                if first == 0:
                    source, digits = self._hoisted_inputs(ct, domain, whole=True)
                    batch[:, 0] = source
                    c0 = source[0]
                    be.publish_to_branches()
                elif be.rotate_keyswitch(  # (a task after the first has one key)
                        ct.data[1], part[0].data, rows, part[0].galois_element, c0=batch[0, 0], domain=domain,
                        out=slots[first:first + 1], before_c0=be.wait_for_published) is not None:
                    return  # the backend's fewer-pass form of the calls below
                else:  # a ModUp per key (ct: coefficient domain, as _check_hoisted requires)
                    digits = be.modup(ct.data[1], rows)
                    be.wait_for_published()
                    c0 = batch[0, 0]
                self._hoisted_switch(digits, rows, part, c0, domain, slots[first:first + len(part)])

            return run

        tasks = [switch(0, keys)] if hoisted else [switch(i, [key]) for i, key in enumerate(keys)]
        self.backend.run_independent(tasks)
        return ct._with_data(batch, polynomial_domain=domain)

    def _entry_batch(self, like, entries: int):
        """Storage of ``1 + entries`` entries shaped like the CT2 data ``like [2, *S]`` (``S``:
        ``[L, N]``, or ``[B, L, N]`` for a batched source): ``(batch [2, 1 + entries, *S],
        slots)``, ``slots`` its entries 1.. as ``[entries, 2, *S]`` views (a key switch's
        ``out``)."""
        batch = self.backend.xp.empty((2, 1 + entries) + tuple(like.shape[1:]), dtype=like.dtype)
        return batch, self.backend.xp.swapaxes(batch[:, 1:], 0, 1)

    def _giant_step_sum(self, stacked: Ciphertext, weights: Plaintext, keys: Sequence[RotationKey]) -> Ciphertext:
        """``sum_i rot_i(multiply_plaintext_and_sum(stacked, weights[i]))`` in the NTT domain, with
        ``rot_0`` the identity and ``rot_i`` the rotation by ``keys[i - 1]`` (a BSGS matvec's
        giant steps; ``stacked`` NTT-domain of batch shape ``(b,)``, ``weights`` ``[g, b, L, N]``
        with ``g = 1 + len(keys)``; the keys and the first product's operands are checked before
        any work). Bit for bit
        ``sum_ciphertext_batch(Ciphertext.stack_batch(...))`` of those terms, with no stacking
        copies: each term is an independent task (its own product, ModUp and key switch, written
        straight into its entry of one batch; ``backend.run_independent``: on the GPU, parallel
        branches of a captured graph), then one sum."""
        for key in keys:
            check_key(self, stacked, key, "rotate_with_key", RotationKey)
        scale = self._check_weighted_sum(stacked, weights._with_data(weights.data[0]))  # (every row: one state)
        rows = stacked.prime_ids
        batch, slots = self._entry_batch(stacked.data[:, 0], len(keys))  # one entry: [2, L, N]

        def term(i: int) -> Callable[[], None]:
            def run() -> None:
                inner = self.backend.mul_montgomery_sum(stacked.data, weights.data[i], rows)
                if i == 0:
                    batch[:, 0] = inner
                    return
                c0, digits = self._hoisted_inputs(stacked._with_data(inner), "ntt")
                self._hoisted_switch(digits, rows, [keys[i - 1]], c0, "ntt", slots[i - 1:i])

            return run

        self.backend.run_independent([term(i) for i in range(1 + len(keys))])
        return self.sum_ciphertext_batch(stacked._with_data(batch, scale=scale))

    def linear_transform(
        self,
        ct: Ciphertext,
        keys: Sequence[RotationKey],
        weights: Plaintext,
        *,
        rescale: bool = False,
        output_domain: str | None = None,
    ) -> Ciphertext:
        """``sum_i weights[i] * rot_i(ct)`` with double hoisting: one ModUp, one ModDown.

        ``rot_0`` is the identity and ``rot_i`` the rotation by ``keys[i - 1]``. ``ct``: an
        unbatched coefficient-domain CT2; ``weights``: an NTT/Montgomery plaintext in basis QP
        (``encode(..., modulus_basis="QP")``) of batch shape ``(1 + len(keys),)`` at ``ct``'s
        level. Returns a CT2 at the same level, scale ``ct.scale * weights.scale``, in the NTT
        domain by default (``output_domain`` below).

        The plaintext products and the sum happen in the extended basis before the single
        rounding ModDown (Bossuat et al.'s double hoisting; the backend's
        ``keyswitch_linear_transform``), so the result carries one rounding error instead of
        one per rotation: it decrypts like
        ``multiply_plaintext_and_sum(rotate_hoisted_batch(ct, keys, output_domain="ntt"), w)``
        with ``w`` the Q part of ``weights``, but is not bit-identical to it. The E rotated
        inner products are never stored: device memory stays at one ciphertext's ModUp.

        ``rescale=True`` also rescales: the ModDown and the division by the first active prime
        ``q`` are one rounding division by ``P q``, and the result is a CT2 at level + 1 with
        scale ``ct.scale * weights.scale / q``, in the coefficient domain by default. It decrypts like
        ``rescale_to_next_level(ntt_domain_to_coefficient_domain(...))`` of the default result
        (one rounding instead of two, so not bit-identical to it; about half a bit less
        precise, as for ``relinearize(..., rescale=True)``), with fewer transforms: on
        the GPU 3 launches after the accumulator instead of 8 (when each transform is one
        launch group, as in the presets). With no keys there is no
        ModDown: the plain product is transformed back and rescaled.

        ``output_domain`` (``"coefficient"`` or ``"ntt"``; ``None``: NTT without ``rescale``,
        coefficient with it) picks the result's domain; each is exactly the transform of the
        other, computed without that transform: the division's NTT output transforms back
        only the rows it divides out (``q`` and the special primes), where the coefficient
        output transforms back every row. At N=2^16 that spares most of a ciphertext NTT to a
        caller who needs NTT values next (a ciphertext product).
        """
        op = "linear_transform"
        keys, _ = self._check_hoisted(ct, keys, "ntt", op)
        if ct.is_batched:
            raise StateMismatchError(f"{op} needs an unbatched ciphertext, got batch shape {ct.batch_shape}")
        check_plaintext(self, weights, op, domain="ntt", residue="montgomery", basis="QP")
        if weights.level != ct.level or weights.batch_shape != (1 + len(keys),):
            raise StateMismatchError(
                f"{op}: weights must be at the ciphertext's level {ct.level} with batch shape {(1 + len(keys),)}, "
                f"got level {weights.level} and batch shape {weights.batch_shape}"
            )
        self._check_rescale_flag(ct, rescale, op)
        if output_domain is None:
            output_domain = "coefficient" if rescale else "ntt"
        domain = _check_output_domain(output_domain, op)
        be, rows = self.backend, ct.prime_ids
        scale = check_product_scale(self, ct, ct.scale * weights.scale, op)
        if rescale:
            self._check_rescaled_scale(ct, scale, op)
        if not keys:  # no rotation: the plain product with the Q part of the one weight
            c_ntt = be.ntt_forward(ct.data, rows)
            data = be.mul_montgomery_sum(c_ntt[:, None], self._q_limbs(weights).data, rows)
            product = ct._with_data(data, polynomial_domain="ntt", scale=scale)
            return _from_ntt_sum(self, product, domain, rescale=rescale)
        c_ntt, digits = self._hoisted_inputs(ct, "ntt", whole=True)
        data = be.keyswitch_linear_transform(
            digits, [key.data for key in keys], rows, [key.galois_element for key in keys], weights.data, c_ntt,
            rescale=rescale, domain=domain,
        )
        if rescale:
            return self._next_level(ct, data, output_domain, scale)
        return ct._with_data(data, polynomial_domain=output_domain, scale=scale)

    def drop_special_primes(self, plaintext: Plaintext) -> Plaintext:
        """The basis-Q plaintext of a basis-QP one: its Q limbs (a contiguous copy), same state
        otherwise; what the single-basis operations (``multiply_plaintext`` and friends) take."""
        q_part = self._q_limbs(plaintext)
        return q_part._with_data(self.backend.xp.ascontiguousarray(q_part.data))

    def _q_limbs(self, plaintext: Plaintext) -> Plaintext:
        """``drop_special_primes`` without the copy: its data is a view of ``plaintext``'s Q
        limbs (each entry's limbs contiguous, entries L + K limbs apart), for operations that
        read it in place (``mul_montgomery_sum``) and never hand it out."""
        if type(plaintext) is not Plaintext:
            raise StateMismatchError(f"drop_special_primes expects a Plaintext, got {type(plaintext).__name__}")
        check_plaintext(self, plaintext, "drop_special_primes", domain=plaintext.polynomial_domain,
                        residue=plaintext.residue_representation, basis="QP")
        count = len(plaintext.prime_ids) - self.context.p_count
        return plaintext._with_data(plaintext.data[..., :count, :], prime_ids=plaintext.prime_ids[:count],
                                    modulus_basis="Q")

    def _check_hoisted(self, ct: Ciphertext, keys: Iterable[RotationKey], output_domain: str,
                       op: str) -> tuple[tuple[RotationKey, ...], Domain]:
        """``(keys as a tuple, domain)``: the keys read once (a generator or a dict's values work
        as a list does; the checks and the key switch then see the same keys), each checked
        against ``ct``, a coefficient-domain CT2, and ``output_domain``."""
        keys = _key_tuple(keys, op)
        check_ciphertext(self, ct, op, domain="coefficient", components=(2,))
        domain = _check_output_domain(output_domain, op)
        for key in keys:
            check_key(self, ct, key, op, RotationKey)
        return keys, domain

    def _hoisted_inputs(self, ct: Ciphertext, domain: Domain, *, whole: bool = False):
        """What a hoisted key switch of ``ct`` into ``domain`` needs: ``(c0, digits)`` with c0
        in ``domain`` (``whole``: both components) and the ModUp of c1. A coefficient-domain
        ``ct`` going to the NTT domain takes both from one ``ntt_forward_and_modup``; an
        NTT-domain one hands its c1 to the ModUp as the hint."""
        be, rows, xp = self.backend, ct.prime_ids, self.backend.xp
        if ct.polynomial_domain == "coefficient" and domain == "ntt":
            ntt, digits = be.ntt_forward_and_modup(ct.data, rows, components=(0, 1) if whole else (0,))
            return (ntt if whole else ntt[0]), digits
        c1, c1_ntt = self._modup_input(xp.ascontiguousarray(ct.data[1]), rows, ct.polynomial_domain)
        data = ct.data if whole else xp.ascontiguousarray(ct.data[0])
        return self._in_domain(data, rows, ct.polynomial_domain, domain), be.modup(c1, rows, c_ntt=c1_ntt)

    def _hoisted_switch(self, digits, rows, keys: Sequence[RotationKey | ConjugationKey], c0, domain: Domain, out):
        """Every key on the ModUp ``digits`` of c1 (``_hoisted_inputs``): ``[E, 2, L, N]``
        (rotated ``c0`` + y0, y1)."""
        be = self.backend
        datas = [key.data for key in keys]
        elements = [key.galois_element for key in keys]
        many = getattr(be, "keyswitch_from_digits_many", None)
        if many is not None:
            return many(digits, datas, rows, elements, c0=c0, domain=domain, out=out)
        return keyswitch_from_digits_many_by_loop(be, digits, datas, rows, elements, c0=c0, domain=domain, out=out)
