"""``CkksEngine``: the eager CKKS API (FHElium's method names) over an exact backend.

Every ciphertext operation validates the operands' state first (raising
``StateMismatchError``, ``ForeignKeyError`` or ``ForeignContextError`` before computing)
and then calls only ``self.backend`` primitives with static arguments: no host sync, no
reads of array values, no data-dependent branching, so the CuPy backend can be captured
in a CUDA Graph. Encoding, sampling, encryption and decryption run partly on the host.

Keys: ``generate_keys()`` (or the first call that needs one) creates a ``KeyChain``
(secret + public key, cached evaluation keys) held by the engine; evaluation methods take
keys explicitly (``rotate_with_key(ct, key)``), defaulting only relinearization and
conjugation keys to the chain's.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from .._once import get_or_build
from .._progress import progress_bar, show_progress_by_default
from ..errors import CudaUnavailableError, ForeignKeyError, InsecureParametersError
from ..interop.arrays import check_plain_torch, is_torch_only_dtype, leaf_kind, numpy_dtype_of
from ..interop.capabilities import loaded_torch
from ..interop.devices import as_device, is_unindexed_cuda
from ._checks import check_ciphertext, check_key, check_not_capturing, check_plaintext
from ._device_scope import on_backend_device
from ._evaluation import EvaluationMixin
from .context import CkksContext
from .crypto import decrypt_phase, encrypt_rns
from .encoding import coefficients_to_slots, slots_to_coefficients
from .flooding import FLOODED_DECRYPTIONS, NoiseFlooding
from .keygen import KeyChain, KeyGenerator
from .keys import ConjugationKey, PublicKey, RelinearizationKey, RotationKey, SecretKey, normalize_rotation_step
from .params import Parameters, ParametersLiteral, require_opt_in_flag
from .sampling import sample_discrete_gaussian_wide
from .values import Ciphertext, ModulusBasis, Plaintext

__all__ = ["CkksEngine", "host_message"]


def host_message(message: Any) -> np.ndarray:
    """NumPy view/copy of a NumPy, CuPy or torch (CPU or CUDA) message, or a sequence.

    Raises:
        TypeError: the message is not numeric (bool, integer, float or complex values), or is
            a masked array (the values under its mask are not its values; the runtime's
            ``leaf_kind`` refuses them for the same reason).
    """
    if isinstance(message, np.ma.MaskedArray):
        raise TypeError("a masked array's hidden values would be encrypted as they are; pass message.filled(value) "
                        "or message.compressed()")
    if isinstance(message, np.ndarray):
        array = message
    else:
        kind = leaf_kind(message)
        if kind == "torch":
            array = _torch_message(message)
        elif kind == "cupy":
            array = message.get()
        else:
            try:
                array = np.asarray(message)
            except (TypeError, ValueError, RuntimeError) as error:  # torch items raise RuntimeError
                raise TypeError(
                    f"a message must be an array or a sequence of numbers ({' '.join(str(error).split())})"
                ) from None
    if array.dtype.kind not in "biufc":
        raise TypeError(f"a message must hold numbers (bool, int, float or complex), got dtype {array.dtype}")
    return array


def _torch_message(tensor: Any) -> np.ndarray:
    """Host NumPy values of a torch message: any dense CPU/CUDA tensor, whatever its autograd
    state, lazy bits or float format (bfloat16 and float8 widen exactly to float64, complex32
    to complex128)."""
    torch: Any = loaded_torch()  # a torch tensor exists, so torch is imported
    if tensor.layout is torch.strided and tensor.device.type in ("cpu", "cuda") and not tensor.is_nested:
        tensor = tensor.detach().resolve_conj().resolve_neg()  # lazy bits: read the values
        if tensor.is_quantized:  # its values are scale * (q - zero point), which float32 holds
            tensor = tensor.dequantize()
    try:
        check_plain_torch(tensor)  # what is left: layout, device, storage
    except TypeError as error:
        raise TypeError(f"a torch message must be a dense CPU or CUDA tensor: {error}") from None
    try:
        widen = is_torch_only_dtype(numpy_dtype_of(tensor.dtype))
    except TypeError:  # other formats NumPy lacks: the wider type decides what they hold
        widen = True
    if widen:  # exact in the wider type
        try:
            tensor = tensor.to(torch.complex128 if tensor.is_complex() else torch.float64)
        except (NotImplementedError, RuntimeError) as error:  # sub-byte and bits formats: no arithmetic
            raise TypeError(f"a torch message of dtype {tensor.dtype} has no numeric reading: {error}") from None
    return tensor.cpu().numpy()


def _make_backend(context: CkksContext, device: str):
    if device == "cpu":
        from .backends.numpy_backend import NumpyBackend

        return NumpyBackend(context)
    if device == "cuda" or device.startswith("cuda:"):
        try:
            from .backends.cupy_backend import CupyBackend  # noqa: PLC0415 - lazy: imports cupy
        except ImportError as error:
            raise CudaUnavailableError(
                f"device={device!r} needs the CuPy backend, which could not be imported ({error}); "
                "install cupy-cuda12x or cupy-cuda13x (pip install 'fhelium-cupy[cuda13]') and use a CUDA GPU, "
                "or use device='cpu'"
            ) from error
        return CupyBackend(context, device)
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


@on_backend_device("keys")
class CkksEngine(EvaluationMixin):
    """Eager CKKS engine over a parameter preset.

    On CUDA every method runs on the engine's device, whatever the calling thread's
    current device is; inputs must live there (``value.to(engine.device)``).

    Args:
        preset: preset name (``fhelium_cupy.ckks.preset_names()``), ``Parameters`` or
            ``ParametersLiteral``.
        device: ``"cpu"`` (exact NumPy backend) or ``"cuda"``/``"cuda:N"`` (CuPy backend);
            an int, ``torch.device`` or ``cupy.cuda.Device`` names a device too.
        insecure: allow sets above the 128-bit HE-standard bound (tests only).

    Raises:
        ConfigurationError: an unknown preset name or invalid parameters.
        InsecureParametersError: insecure parameters without ``insecure=True``.
        TypeError: ``insecure`` is not a bool, or ``device`` is not a device description.
        ValueError: a device that is neither CPU nor CUDA.
        CudaUnavailableError: a CUDA device was requested but the CuPy backend is missing.
    """

    def __init__(
        self,
        preset: str | Parameters | ParametersLiteral = "slots8192-scale40-depth7",
        device: object = "cpu",
        *,
        insecure: bool = False,
    ) -> None:
        require_opt_in_flag(insecure)
        if isinstance(preset, Parameters):
            if preset.insecure and not insecure:
                raise InsecureParametersError(
                    f"parameters {preset.name!r} exceed the 128-bit HE-standard bound (log2(QP) = {preset.log2_qp:.1f}); "
                    "pass insecure=True to the engine as well (testing only)"
                )
            parameters = preset
        elif isinstance(preset, ParametersLiteral):
            parameters = Parameters.from_literal(preset, insecure=insecure)
        else:
            parameters = Parameters.preset(preset, insecure=insecure)
        self.parameters = parameters
        self.context = CkksContext(parameters)
        # "cpu", "cuda" or "cuda:N"; also an int, torch.device or cupy.cuda.Device (as_device)
        self.device = "cuda" if is_unindexed_cuda(device) else str(as_device(device))
        self.backend = _make_backend(self.context, self.device)
        self.key_generator = KeyGenerator(self.context, self.backend)
        self._keys: KeyChain | None = None
        self._keys_lock = threading.Lock()

    # --- description ---------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        """Complex slots per ciphertext (N/2)."""
        return self.context.num_slots

    @property
    def max_level(self) -> int:
        return self.context.max_level

    @property
    def scale(self) -> float:
        """Default encoding scale."""
        return self.parameters.scale

    # --- keys ----------------------------------------------------------------------
    def generate_keys(self, secret_key: SecretKey | None = None) -> KeyChain:
        """Create (or adopt ``secret_key`` into) the engine's ``KeyChain``; replaces any previous one.

        Graphs captured before keep the keys they read (their programs hold them).

        Raises:
            ExecutionError: called inside a CUDA Graph capture (key generation draws fresh
                randomness).
            ForeignContextError: ``secret_key`` belongs to another parameter set.
            StateMismatchError: ``secret_key`` is not one ternary polynomial over every QP row
                with at least N/4 non-zero coefficients (the 128-bit bounds assume a uniform
                ternary secret); the engine keeps its previous keys.
        """
        chain = KeyChain(self.key_generator, secret_key)
        with self._keys_lock:
            self._keys = chain
        return chain

    @property
    def keys(self) -> KeyChain:
        """The engine's key chain (generated on first use, once even when threads race)."""
        return get_or_build(vars(self), "_keys", self._keys_lock, KeyChain, self.key_generator)

    @property
    def flooded_decryptions(self) -> int:
        """Flooded decryptions (``decrypt(..., flooding=...)``, each batch entry counting) made in
        this process under the engine's secret key, by any engine holding it; 0 without keys."""
        return 0 if self._keys is None else FLOODED_DECRYPTIONS.count(self._keys.key_id)

    def _check_own_secret(self, ct: Ciphertext, op: str) -> KeyChain:
        """The engine's key chain, read once, if ``ct`` is under its secret, else
        ForeignKeyError; never generates keys (an operation on a foreign ciphertext must not
        leave a new random secret behind). Callers use the chain returned, not ``self.keys``:
        another thread's ``generate_keys`` may replace it after this check."""
        chain = self._keys
        if chain is None:
            raise ForeignKeyError(
                f"{op}: the engine holds no keys, so the ciphertext (under secret {ct.key_id}) is not under its "
                "secret; call generate_keys(secret_key) to adopt that secret first"
            )
        if ct.key_id != chain.key_id:
            raise ForeignKeyError(f"{op}: ciphertext is under secret {ct.key_id}, the engine holds {chain.key_id}")
        return chain

    def relinearization_key(self) -> RelinearizationKey:
        return self.keys.relinearization_key()

    def rotation_key(self, step: int) -> RotationKey:
        """Key for ``rotate_with_key`` by ``step`` (``numpy.roll`` convention; cached).

        Raises:
            TypeError: ``step`` is not an integer; checked before the key chain is made.
        """
        normalize_rotation_step(step, self.context.ring_degree // 2)
        return self.keys.rotation_key(step)

    def rotation_keys(self, steps: Sequence[int], *, progress: bool | None = None) -> dict[int, RotationKey]:
        """Keys for every step of ``steps``, keyed by the step as given (cached like ``rotation_key``).

        Each key is a key-switching key over every digit: about 7 s on the NumPy backend at
        N=2^16, so generating many shows a progress bar on stderr.

        Args:
            steps: rotation steps (``numpy.roll`` convention); steps equal modulo the slot
                count share one key.
            progress: show a progress bar (rich, else tqdm, else none) while keys are
                generated. ``None`` (default): when stderr is a terminal and more than one
                key is missing.

        Raises:
            TypeError: a step is not an integer, or ``progress`` is not a bool or ``None``;
                checked before any key is generated.
        """
        if progress is not None and not isinstance(progress, bool):
            raise TypeError(f"progress must be a bool or None, got {type(progress).__name__} {progress!r}")
        steps = list(steps)
        half = self.context.ring_degree // 2
        for step in steps:
            normalize_rotation_step(step, half)  # TypeError before the key chain is made
        chain = self.keys
        missing = chain.missing_rotation_steps(steps)
        show = show_progress_by_default(len(missing)) if progress is None else progress
        with progress_bar(len(missing), f"rotation keys (N={self.context.ring_degree})", enabled=show) as advance:
            for step in missing:
                chain.rotation_key(step)
                advance(1)
        return {int(s): chain.rotation_key(s) for s in steps}

    def conjugation_key(self) -> ConjugationKey:
        return self.keys.conjugation_key()

    # --- encoding --------------------------------------------------------------------
    def encode(
        self,
        message: Any,
        *,
        level: int = 0,
        scale: float | None = None,
        polynomial_domain: str = "ntt",
        modulus_basis: ModulusBasis = "Q",
    ) -> Plaintext:
        """Encode up to ``num_slots`` complex/real values (``[*batch, k]``) at ``level`` and ``scale``.

        ``polynomial_domain="ntt"`` returns the NTT/Montgomery form ``multiply_plaintext``
        takes; ``"coefficient"`` the coefficient/standard form ``encrypt`` and
        ``add_plaintext`` of a coefficient-domain ciphertext take. ``add_plaintext`` of an
        NTT-domain ciphertext takes NTT/standard:
        ``coefficient_domain_to_ntt_domain(encode(m, polynomial_domain="coefficient"))``.
        ``modulus_basis="QP"`` adds the special primes' limbs (the same integer polynomial
        reduced mod P too): the weights ``linear_transform`` takes.

        Raises:
            TypeError: the message is not numeric, ``level`` is not an int or ``scale`` is
                not a real number (a bool is neither).
            ValueError: NaN or infinite values, more than ``num_slots`` values, a level past
                the last, a scale that is not a finite number above 1, or scaled coefficients
                that the level's primes cannot
                hold (|c| must stay below half their product; it would wrap and decode to
                garbage).
        """
        if not isinstance(level, (int, np.integer)) or isinstance(level, (bool, np.bool_)):
            raise TypeError(f"level must be an int, got {type(level).__name__} {level!r}")
        if scale is not None and (isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real)):
            raise TypeError(f"scale must be a real number, got {type(scale).__name__} {scale!r}")
        level = int(level)
        if modulus_basis not in ("Q", "QP"):
            raise ValueError(f"modulus_basis must be 'Q' or 'QP', got {modulus_basis!r}")
        if polynomial_domain not in ("ntt", "coefficient"):
            raise ValueError(f"polynomial_domain must be 'ntt' or 'coefficient', got {polynomial_domain!r}")
        scale = self.parameters.scale if scale is None else float(scale)
        if not math.isfinite(scale) or scale <= 1.0:  # (as Parameters: at most 1, the message rounds away)
            raise ValueError(f"scale must be a finite number > 1, got {scale!r}")
        rows = self.context.prime_ids(level) + (self.context.p_ids if modulus_basis == "QP" else ())
        coefficients = slots_to_coefficients(host_message(message), self.context.ring_degree, scale)
        modulus = math.prod(self.context.moduli[r] for r in rows)
        peak = int(np.max(np.abs(coefficients), initial=0))
        if 2 * peak >= modulus:  # the residues would wrap around: decrypts to garbage, silently
            raise ValueError(
                f"the scaled message reaches |coefficient| = 2**{math.log2(peak):.1f}, but the {len(rows)} primes "
                f"at level {level} ({modulus_basis} basis) hold only |coefficient| < 2**{math.log2(modulus) - 1:.1f}; "
                "use a smaller scale, smaller values or a level with more primes"
            )
        data = self.backend.rns_from_integers(coefficients, rows)
        pt = Plaintext(data, level=level, scale=scale, prime_ids=rows, modulus_basis=modulus_basis,
                       context_id=self.context.context_id)
        if polynomial_domain == "ntt":
            return self.prepare_plaintext_for_multiplication(pt)
        return pt

    def prepare_plaintext_for_multiplication(self, plaintext: Plaintext) -> Plaintext:
        """Coefficient/standard plaintext -> NTT/Montgomery (same level, scale, basis)."""
        check_plaintext(
            self, plaintext, "prepare_plaintext_for_multiplication", domain="coefficient", residue="standard",
            basis=None,
        )
        rows = plaintext.prime_ids
        data = self.backend.to_montgomery(self.backend.ntt_forward(plaintext.data, rows), rows)
        return plaintext._with_data(data, polynomial_domain="ntt", residue_representation="montgomery")

    def decode(self, plaintext: Plaintext, *, real: bool = False) -> np.ndarray:
        """Plaintext (any domain/representation) -> ``[*batch, num_slots]`` complex (or real) NumPy values.

        Raises:
            StateMismatchError: not a ``Plaintext``, or its prime ids, ring degree or device
                are not the engine's for its level.
            ForeignContextError: it was made under another parameter set.
        """
        check_plaintext(self, plaintext, "decode", domain=None, residue=None, basis=None)  # any form
        rows = plaintext.prime_ids
        data = plaintext.data
        if plaintext.polynomial_domain == "ntt":
            data = self.backend.ntt_inverse(data, rows)
        if plaintext.residue_representation == "montgomery":
            data = self.backend.from_montgomery(data, rows)
        slots = coefficients_to_slots(self.backend.centered_crt_to_float(data, rows), plaintext.scale)
        return slots.real.copy() if real else slots

    # --- encryption ------------------------------------------------------------------
    def encrypt(self, plaintext: Plaintext, *, public_key: PublicKey | None = None) -> Ciphertext:
        """Public-key encryption of a coefficient/standard plaintext -> coefficient-domain CT2.

        Args:
            plaintext: coefficient domain, standard form (``encode(m, polynomial_domain="coefficient")``).
            public_key: encrypt under this key (a party without the secret: a client's key
                loaded with ``load_value``); the ciphertext carries its ``key_id``. Default:
                the engine's own key chain (made on first use).

        Raises:
            ExecutionError: called inside a CUDA Graph capture (fresh randomness each call:
                ``encrypt_rns`` refuses).
            StateMismatchError: the plaintext is not coefficient/standard at its level, or
                ``public_key`` is not a ``PublicKey`` of this context's layout on the
                engine's device.
            ForeignContextError: the plaintext or ``public_key`` belongs to another parameter set.
        """
        check_plaintext(self, plaintext, "encrypt", domain="coefficient", residue="standard")
        if public_key is not None:
            check_key(self, None, public_key, "encrypt", PublicKey)
        return self._encrypt_checked(plaintext, public_key)

    def _encrypt_checked(self, plaintext: Plaintext, public_key: PublicKey | None) -> Ciphertext:
        """:meth:`encrypt` of a plaintext and key already checked (the default key when None)."""
        if public_key is None:
            public_key = self.keys.public_key
        data = encrypt_rns(self.context, self.backend, public_key, plaintext.data, plaintext.prime_ids)
        return Ciphertext(
            data,
            level=plaintext.level,
            scale=plaintext.scale,
            prime_ids=plaintext.prime_ids,
            context_id=self.context.context_id,
            key_id=public_key.key_id,
        )

    def encrypt_message(
        self, message: Any, *, level: int = 0, scale: float | None = None, public_key: PublicKey | None = None
    ) -> Ciphertext:
        """Encode and encrypt ``[*batch, k]`` values -> coefficient-domain CT2 at ``level``, ``scale``
        (under ``public_key`` when given, as for :meth:`encrypt`).

        Raises:
            ExecutionError: called inside a CUDA Graph capture (fresh randomness each call).
            StateMismatchError, ForeignContextError: a bad ``public_key``, as for :meth:`encrypt`.
            TypeError, ValueError: a message ``encode`` refuses.
        """
        check_not_capturing(self.backend, "encryption")  # before encode's upload fails less clearly
        if public_key is not None:
            check_key(self, None, public_key, "encrypt_message", PublicKey)  # before anything is encoded
        plaintext = self.encode(message, level=level, scale=scale, polynomial_domain="coefficient")
        return self._encrypt_checked(plaintext, public_key)  # encode made it in the form encrypt checks

    def decrypt(self, ciphertext: Ciphertext, *, flooding: NoiseFlooding | None = None) -> Plaintext:
        """Phase ``c0 + c1*s (+ c2*s**2)`` as a coefficient/standard plaintext (same level, scale).

        Args:
            flooding: add a fresh discrete Gaussian polynomial of parameter ``flooding.sigma``
                (one per batch entry, from the OS CSPRNG) to the phase: for results that leave the
                secret holder (``fhelium_cupy.ckks.flooding``). Without it the result carries the
                ciphertext's error, which depends on the secret.

        Raises:
            StateMismatchError, ForeignContextError: not a ciphertext of this context in a valid state.
            ForeignKeyError: the ciphertext is not under this engine's secret.
            TypeError: ``flooding`` is not exactly a ``NoiseFlooding``, or one of its fields has the
                wrong type (fields are validated again here).
            ValueError: a field of ``flooding`` is out of range, its noise does not fit the
                ciphertext level's modulus, or the decryption would take the flooded decryptions
                under this secret in this process (:attr:`flooded_decryptions`, each batch entry
                counting) past ``flooding.queries``.
        """
        check_ciphertext(self, ciphertext, "decrypt")
        chain = self._check_own_secret(ciphertext, "decrypt")  # the secret checked is the one used
        rows = ciphertext.prime_ids
        batch = ciphertext.batch_shape  # data [component, *batch, limb, N]
        counted: AbstractContextManager[None] = nullcontext()
        if flooding is not None:
            flooding = NoiseFlooding.checked(flooding)  # exactly the class, fields validated again
            flooding.check_fits(self.context.level_modulus_bits[ciphertext.level], ciphertext.level)
            counted = FLOODED_DECRYPTIONS.reserve(chain.key_id, math.prod(batch), flooding)
        with counted:  # a flooded decryption is counted, or refused before anything is computed
            phase = decrypt_phase(self.backend, chain.secret_key, ciphertext.data, rows,
                                  ciphertext.polynomial_domain)
            if flooding is not None:  # one fresh integer polynomial a batch entry, reduced mod every row
                noise = sample_discrete_gaussian_wide(batch + (self.context.ring_degree,), flooding.sigma)
                phase = self.backend.add(phase, self.backend.rns_from_integers(noise, rows), rows)
        return Plaintext(
            phase,
            level=ciphertext.level,
            scale=ciphertext.scale,
            prime_ids=rows,
            context_id=self.context.context_id,
        )

    def decrypt_message(
        self, ciphertext: Ciphertext, *, real: bool = False, flooding: NoiseFlooding | None = None
    ) -> np.ndarray:
        """Decrypt (with ``flooding`` noise when given, as for :meth:`decrypt`) and decode ->
        ``[*batch, num_slots]`` complex (or real) NumPy values."""
        return self.decode(self.decrypt(ciphertext, flooding=flooding), real=real)

    def measure_error_bits(self, ciphertext: Ciphertext, message: Any) -> float:
        """``log2`` of the largest coefficient of ``phase - scale * message``, rounded up to a multiple
        of 1/2: the ciphertext's error against the result it should hold (``message``, ``[*batch,
        k]`` values as for ``encode``), in coefficient units, at least 0. What
        ``NoiseFlooding(error_bits=...)`` needs.

        Measure on sample inputs with an engine of throwaway keys (a second ``CkksEngine`` of the
        same preset), as OpenFHE's noise-estimation mode does: the error of a computation under the
        real secret is information about that secret (hence also the rounding). The expected
        result is encoded at the ciphertext's level and scale, so a scale ``encode`` refuses (a
        product before its rescale at scale 2**80, say) cannot be measured.

        Raises:
            StateMismatchError, ForeignContextError, ForeignKeyError: as for :meth:`decrypt`.
            ValueError: ``message`` does not have the ciphertext's batch shape, or ``encode``
                refuses it at the ciphertext's level and scale.
            TypeError: a message ``encode`` refuses.
        """
        check_ciphertext(self, ciphertext, "measure_error_bits")
        chain = self._check_own_secret(ciphertext, "measure_error_bits")
        expected = self.encode(message, level=ciphertext.level, scale=ciphertext.scale,
                               polynomial_domain="coefficient")
        rows = ciphertext.prime_ids
        if expected.data.shape != ciphertext.data.shape[1:] or expected.prime_ids != rows:
            raise ValueError(
                f"message of batch shape {tuple(expected.data.shape[:-2])} for a ciphertext of batch shape "
                f"{tuple(ciphertext.data.shape[1:-2])}"
            )
        phase = decrypt_phase(self.backend, chain.secret_key, ciphertext.data, rows, ciphertext.polynomial_domain)
        error = self.backend.sub(phase, expected.data, rows)
        peak = float(np.max(np.abs(self.backend.centered_crt_to_float(error, rows)), initial=0.0))
        return math.ceil(2.0 * math.log2(max(peak, 1.0))) / 2.0

    def __repr__(self) -> str:
        return f"CkksEngine(preset={self.parameters.name!r}, device={self.device!r}, context_id={self.context.context_id!r})"
