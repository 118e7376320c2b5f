"""Key generation: secret, public, relinearization, rotation and conjugation keys; the KeyChain.

``KeyGenerator`` draws all randomness from ``sampling`` (OS CSPRNG) on the host, moves it
to the backend and does all ring arithmetic through backend primitives. ``KeyChain``
bundles a secret key with its public key and caches evaluation keys; an engine holds
one so that ``engine.rotation_key(step)`` works after key generation, while evaluation
methods only ever take keys as explicit arguments.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .._once import get_or_build
from ..errors import ForeignContextError, StateMismatchError
from ._checks import check_not_capturing
from ._device_scope import on_backend_device
from .crypto import decrypt_phase
from .keys import (
    ConjugationKey,
    KeySwitchKey,
    PublicKey,
    RelinearizationKey,
    RotationKey,
    SecretKey,
    galois_element_for_step,
    normalize_rotation_step,
)
from .sampling import sample_gaussian, sample_ternary, sample_uniform_mod

__all__ = ["KeyChain", "KeyGenerator", "galois_element_for_step", "normalize_rotation_step"]


def new_key_id() -> str:
    """Fingerprint of a fresh secret: sha256 of a random 32-byte salt (not of the key)."""
    return hashlib.sha256(os.urandom(32)).hexdigest()[:16]


@on_backend_device()
class KeyGenerator:
    """Generates keys for one context on one backend.

    Args:
        context: the ``CkksContext``.
        backend: the ``CkksBackend`` the keys live on.
    """

    def __init__(self, context, backend) -> None:
        self.context = context
        self.backend = backend
        self._qp = context.qp_ids
        self._q = tuple(range(context.q_count))

    def _check(self, sk: SecretKey) -> None:
        if not isinstance(sk, SecretKey):
            raise StateMismatchError(f"expected a SecretKey, got {type(sk).__name__}")
        if sk.context_id != self.context.context_id:
            raise ForeignContextError(
                f"secret key belongs to context {sk.context_id}, this generator to {self.context.context_id}"
            )
        qp = self.context.qp_ids
        if tuple(sk.prime_ids) != qp or tuple(sk.data.shape[-2:]) != (len(qp), self.context.ring_degree):
            raise StateMismatchError(
                f"a secret key must hold every Q and P prime {qp} over {self.context.ring_degree} coefficients, "
                f"got prime_ids {sk.prime_ids} and shape {tuple(sk.data.shape)}"
            )

    def check_secret_distribution(self, sk: SecretKey) -> None:
        """Refuse a secret the 128-bit bounds do not cover: every QP row must hold the same
        ternary polynomial (coefficients -1, 0, 1), with at least N/4 non-zero coefficients
        (a uniform ternary secret has about 2N/3; an all-zero or constant "secret" would make
        every ciphertext's c0 its message). Host work (one inverse NTT and a copy): for
        adopting a secret, never inside a capture.

        Raises:
            ExecutionError: called inside a CUDA Graph capture (it copies to the host).
            ForeignContextError: the secret belongs to another parameter set.
            StateMismatchError: a word is not a residue below its prime, or the secret is not
                such a polynomial (nothing of it is printed).
        """
        check_not_capturing(self.backend, "adopting a secret key")
        self._check(sk)
        be, qp = self.backend, self._qp
        moduli = np.array([self.context.moduli[r] for r in qp], dtype=np.uint64)[:, None]
        if not (be.to_numpy(sk.data) < moduli).all():  # (the inverse NTT below would reduce them: checked first)
            raise StateMismatchError(
                "a secret key's words must be residues below their primes (as load_value requires): "
                "the kernels' arithmetic assumes them"
            )
        residues = be.to_numpy(be.ntt_inverse(self.secret_standard(sk), qp))  # [QP, N] coefficients
        negative = residues > moduli // np.uint64(2)
        signed = residues.astype(np.int64) - negative * moduli.astype(np.int64)
        n = self.context.ring_degree
        if not (np.abs(signed) <= 1).all() or not (signed == signed[:1]).all():
            raise StateMismatchError(
                "a secret key must be one ternary polynomial (coefficients -1, 0, 1 in every QP row): "
                "the 128-bit bounds assume one"
            )
        if int(np.count_nonzero(signed[0])) < n // 4:
            raise StateMismatchError(
                f"a secret key needs at least N/4 = {n // 4} non-zero coefficients (a uniform ternary secret "
                "has about 2N/3): a sparser one is not covered by the 128-bit bounds"
            )

    # The two ways sampled host randomness reaches the device: both refuse inside a capture,
    # whose replays would reuse the recorded values (every key kind goes through them).
    def _small_ntt(self, coefficients: np.ndarray, rows: tuple[int, ...]):
        """Signed small integers ``[..., N]`` -> NTT (standard form) over ``rows``."""
        check_not_capturing(self.backend, "key generation")
        return self.backend.ntt_forward(self.backend.rns_from_integers(coefficients, rows), rows)

    def _uniform(self, rows: tuple[int, ...], lead: tuple[int, ...] = ()):
        check_not_capturing(self.backend, "key generation")
        moduli = [self.context.moduli[r] for r in rows]
        return self.backend.asarray(sample_uniform_mod(moduli, lead + (self.context.ring_degree,)))

    def secret_key(self) -> SecretKey:
        """Fresh ternary secret over all level-0 QP rows (NTT, Montgomery) with a new key_id."""
        s = self._small_ntt(sample_ternary((self.context.ring_degree,)), self._qp)
        return SecretKey(
            self.backend.to_montgomery(s, self._qp),
            prime_ids=self._qp,
            context_id=self.context.context_id,
            key_id=new_key_id(),
        )

    def secret_standard(self, sk: SecretKey, rows: tuple[int, ...] | None = None):
        """The secret's NTT values in standard form over ``rows`` (default: QP)."""
        rows = self._qp if rows is None else rows
        xp = self.backend.xp
        data = xp.ascontiguousarray(sk.data[list(rows)])
        return self.backend.from_montgomery(data, rows)

    def public_key(self, sk: SecretKey) -> PublicKey:
        """``(b, a)`` over level-0 QP rows with ``b = e - a*s`` (NTT, Montgomery)."""
        self._check(sk)
        be, q = self.backend, self._qp
        s = self.secret_standard(sk, q)
        a = self._uniform(q)
        e = self._small_ntt(sample_gaussian((self.context.ring_degree,), self.context.parameters.sigma), q)
        b = be.sub(e, be.mul(a, s, q), q)
        data = be.to_montgomery(be.xp.stack([b, a]), q)
        return PublicKey(data, prime_ids=q, context_id=self.context.context_id, key_id=sk.key_id)

    def _keyswitch_data(self, sk: SecretKey, source_ntt):
        """``[dnum, 2, QP, N]`` with ``b_d + a_d*s = e_d + P*g_d*source`` (NTT, Montgomery)."""
        be, qp, ctx = self.backend, self._qp, self.context
        dnum = len(ctx.digits)
        s = self.secret_standard(sk)
        a = self._uniform(qp, (dnum,))
        e = self._small_ntt(sample_gaussian((dnum, ctx.ring_degree), ctx.parameters.sigma), qp)
        b = be.sub(e, be.mul(a, s, qp), qp)
        for d, (lo, hi, rows, gadget) in enumerate(self._gadget_terms(source_ntt)):
            b[d, lo:hi] = be.add(be.xp.ascontiguousarray(b[d, lo:hi]), gadget, rows)
        return be.to_montgomery(be.xp.stack([b, a], axis=1), qp)

    def _gadget_terms(self, source_ntt):
        """Per digit ``d``: ``(lo, hi, rows, P * source)`` on the digit's rows ``lo:hi``, the
        term digit ``d`` of a key-switching key adds to ``b_d`` (``b_d + a_d*s = e_d + P*g_d*source``)."""
        be, ctx = self.backend, self.context
        P = math.prod(ctx.moduli[r] for r in ctx.p_ids)
        for digit in ctx.digits:
            rows = tuple(digit)
            lo, hi = rows[0], rows[-1] + 1
            yield lo, hi, rows, be.mul_scalar(be.xp.ascontiguousarray(source_ntt[lo:hi]), [P] * len(rows), rows)

    def _key_source(self, s, galois_element: int | None):
        """What a key switches from: ``s**2`` (relinearization) or ``s`` under ``galois_element``."""
        if galois_element is None:
            return self.backend.mul(s, s, self._qp)
        return self.backend.automorphism(s, galois_element, self._qp, domain="ntt")

    def relinearization_key(self, sk: SecretKey) -> RelinearizationKey:
        """Key switching ``s**2 -> s``."""
        self._check(sk)
        data = self._keyswitch_data(sk, self._key_source(self.secret_standard(sk), None))
        return RelinearizationKey(data, prime_ids=self._qp, context_id=self.context.context_id, key_id=sk.key_id)

    def _galois_data(self, sk: SecretKey, g: int):
        return self._keyswitch_data(sk, self._key_source(self.secret_standard(sk), g))

    def rotation_key(self, sk: SecretKey, step: int) -> RotationKey:
        """Key for ``rotate_with_key`` by ``step`` (``numpy.roll`` convention)."""
        self._check(sk)
        n = self.context.ring_degree
        step = normalize_rotation_step(step, n // 2)
        g = galois_element_for_step(step, n)
        return RotationKey(
            self._galois_data(sk, g),
            prime_ids=self._qp,
            context_id=self.context.context_id,
            key_id=sk.key_id,
            galois_element=g,
            rotation_step=step,
        )

    def _key_error_magnitude(self, sk: SecretKey, key: PublicKey | KeySwitchKey) -> int:
        """Largest centered coefficient of the error ``key`` carries under ``sk`` (a test of the
        generator's own keys).

        ``b + a*s`` for a public key; ``b_d + a_d*s - P*g_d*src`` per digit for a key-switching
        key (``src``: ``s**2``, or ``s`` under the key's Galois element). A key made under
        ``sk`` gives a few sigma; any other key gives values near half the primes.

        Never apply it to a key from outside, nor act on its result where anyone else can see
        the outcome: it is a decryption oracle. A forged key ``(b, a) = (H X^j, 1)`` gives
        ``H + s_j``, so one file per coefficient (or, from accept / reject against a bound
        alone, two) recovers the secret. ``load_value`` used it to test loaded keys until
        that was found; it no longer does. Host work (syncs on a GPU backend).
        """
        self._check(sk)
        be, qp, ctx = self.backend, self._qp, self.context
        data = be.from_montgomery(be.xp.ascontiguousarray(key.data), qp)  # [2, QP, N] or [dnum, 2, QP, N]
        if not isinstance(key, PublicKey):
            source = self._key_source(self.secret_standard(sk), getattr(key, "galois_element", None))
            for d, (lo, hi, rows, gadget) in enumerate(self._gadget_terms(source)):
                data[d, 0, lo:hi] = be.sub(be.xp.ascontiguousarray(data[d, 0, lo:hi]), gadget, rows)
            data = be.xp.ascontiguousarray(be.xp.swapaxes(data, 0, 1))  # components first: [2, dnum, QP, N]
        coeffs = be.to_numpy(decrypt_phase(be, sk, data, qp, "ntt"))  # b (- P g src) + a s, coefficients
        moduli = np.array([ctx.moduli[r] for r in qp], dtype=np.uint64)[:, None]
        return int(np.minimum(coeffs, moduli - coeffs).max())  # |x| of the centered residues

    def conjugation_key(self, sk: SecretKey) -> ConjugationKey:
        """Key for complex conjugation of the slots (``g = 2N - 1``)."""
        self._check(sk)
        g = 2 * self.context.ring_degree - 1
        return ConjugationKey(
            self._galois_data(sk, g),
            prime_ids=self._qp,
            context_id=self.context.context_id,
            key_id=sk.key_id,
            galois_element=g,
        )


class KeyChain:
    """A secret key, its public key, and lazily generated, cached evaluation keys.

    Thread-safe: workers sharing an engine get one key per kind and step. A key is generated
    under the chain's lock and never replaced, so a graph that captured it (the engine's
    default relinearization key, say) is not left reading a key another thread dropped.

    Args:
        generator: the ``KeyGenerator`` of the context/backend.
        secret_key: an existing secret (default: a fresh one), adopted after
            ``KeyGenerator.check_secret_distribution`` (StateMismatchError otherwise).
    """

    def __init__(self, generator: KeyGenerator, secret_key: SecretKey | None = None) -> None:
        self.generator = generator
        if secret_key is None:
            secret_key = generator.secret_key()
        else:  # adopted: this context's, ternary, dense enough, one polynomial in every row
            generator.check_secret_distribution(secret_key)
        self.secret_key = secret_key
        self.public_key = generator.public_key(self.secret_key)
        generator.backend.complete_for_other_streams()  # published next: other threads' streams read it
        self._relin: RelinearizationKey | None = None
        self._conj: ConjugationKey | None = None
        self._rotations: dict[int, RotationKey] = {}
        self._lock = threading.Lock()

    @property
    def key_id(self) -> str:
        return self.secret_key.key_id

    def _complete(self, make: Callable[..., Any], *args: Any) -> Any:
        """``make(*args)``, its device work finished before the key is cached: a worker of
        another thread may read the cached key on its own stream at once."""
        key = make(*args)
        self.generator.backend.complete_for_other_streams()
        return key

    def relinearization_key(self) -> RelinearizationKey:
        # the attributes are the cache (vars(self)): None until the first call makes the key
        return get_or_build(vars(self), "_relin", self._lock, self._complete, self.generator.relinearization_key,
                            self.secret_key)

    def conjugation_key(self) -> ConjugationKey:
        return get_or_build(vars(self), "_conj", self._lock, self._complete, self.generator.conjugation_key,
                            self.secret_key)

    def missing_rotation_steps(self, steps: Iterable[int]) -> list[int]:
        """The normalized steps of ``steps`` whose keys are not cached yet, each once, in order.

        Raises:
            TypeError: a step is not an integer (checked for all before anything is generated).
        """
        half = self.generator.context.ring_degree // 2
        missing: dict[int, None] = {}
        for step in steps:
            key = normalize_rotation_step(step, half)
            if key not in self._rotations:
                missing[key] = None
        return list(missing)

    def rotation_key(self, step: int) -> RotationKey:
        n = self.generator.context.ring_degree
        step = normalize_rotation_step(step, n // 2)
        return get_or_build(self._rotations, step, self._lock, self._complete, self.generator.rotation_key,
                            self.secret_key, step)
