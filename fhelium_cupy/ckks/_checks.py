"""State checks shared by the engine and linalg: raise before any computation."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ExecutionError, ForeignContextError, ForeignKeyError, StateMismatchError
from .keys import KeySwitchKey, PublicKey
from .values import Ciphertext, Plaintext

__all__ = [
    "check_ciphertext",
    "check_ciphertext_form",
    "check_key",
    "check_key_layout",
    "check_level_rows",
    "check_not_capturing",
    "check_plaintext",
    "check_product_scale",
    "check_same_state",
    "scales_match",
]


def scales_match(a: float, b: float) -> bool:
    """Scales agree to 1e-9 relative (they are tracked exactly, but may be computed in different orders)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _residency(engine, value, op: str) -> None:
    on_host = isinstance(value.data, np.ndarray)
    gpu = engine.backend.device_id
    if on_host != (gpu is None) or (not on_host and value.data.device.id != gpu):
        where = "cpu" if gpu is None else f"cuda:{gpu}"
        raise StateMismatchError(
            f"{op}: {type(value).__name__} lives on {value.device} but the engine runs on {where}; "
            f"move it with .to({where!r})"
        )


def _ring_degree(context, value, op: str) -> None:
    n = value.data.shape[-1]
    if n != context.ring_degree:
        raise StateMismatchError(
            f"{op}: {type(value).__name__} has {n} coefficients per limb, the ring degree is {context.ring_degree}"
        )


def check_level_rows(context, value, op: str) -> None:
    """``value``'s prime ids are those of its level in its basis (the Q rows, then the P rows
    in basis QP)."""
    rows = context.prime_ids(value.level) if 0 <= value.level <= context.max_level else None
    if rows is None or value.prime_ids != (rows + context.p_ids if value.modulus_basis == "QP" else rows):
        raise StateMismatchError(
            f"{op}: {type(value).__name__.lower()} prime_ids {value.prime_ids} do not match level {value.level} "
            f"in basis {value.modulus_basis}"
        )


def check_ciphertext_form(ct, op: str, components: tuple[int, ...] = (2, 3)) -> None:
    """Basis Q, standard form and a supported component count (every operation's precondition)."""
    if ct.modulus_basis != "Q" or ct.residue_representation != "standard":
        raise StateMismatchError(
            f"{op}: ciphertext must be in basis Q, standard form; got {ct.modulus_basis}/{ct.residue_representation}"
        )
    if ct.component_count not in components:
        raise StateMismatchError(f"{op} needs a ciphertext with {components} components, got {ct.component_count}")


def check_ciphertext(engine, ct, op: str, *, domain: str | None = None, components: tuple[int, ...] = (2, 3)) -> None:
    if type(ct) is not Ciphertext:
        raise StateMismatchError(f"{op} expects a Ciphertext, got {type(ct).__name__}")
    if ct.context_id != engine.context.context_id:
        raise ForeignContextError(
            f"{op}: ciphertext belongs to context {ct.context_id}, the engine to {engine.context.context_id}"
        )
    check_ciphertext_form(ct, op, components)
    check_level_rows(engine.context, ct, op)
    if domain is not None and ct.polynomial_domain != domain:
        hint = "coefficient_domain_to_ntt_domain" if domain == "ntt" else "ntt_domain_to_coefficient_domain"
        raise StateMismatchError(
            f"{op} needs a {domain}-domain ciphertext, got {ct.polynomial_domain}; use engine.{hint}"
        )
    _ring_degree(engine.context, ct, op)
    _residency(engine, ct, op)


def _plaintext_hint(pt, domain: str, residue: str, basis: str) -> str:
    """How to make the plaintext form an operation needs, from ``engine.encode``."""
    if pt.modulus_basis != basis:
        return f"; encode it with modulus_basis={basis!r}"
    coefficient = "engine.encode(m, polynomial_domain='coefficient')"
    if (domain, residue) == ("ntt", "montgomery"):
        return f"; engine.encode(m) returns that form (as does engine.prepare_plaintext_for_multiplication of {coefficient})"
    if (domain, residue) == ("coefficient", "standard"):
        prepared = (pt.polynomial_domain, pt.residue_representation) == ("ntt", "montgomery")
        return f"; {coefficient} gives it" + (
            " (engine.encode(m) already returns the form multiply_plaintext takes)" if prepared else ""
        )
    if (domain, residue) == ("ntt", "standard"):
        return f"; engine.coefficient_domain_to_ntt_domain({coefficient}) gives it"
    return ""


def check_plaintext(engine, pt, op: str, *, domain: str | None, residue: str | None,
                    basis: str | None = "Q") -> None:
    """Type, context, domain, residue form and basis (each ``None``: any, the plaintext's
    own), prime ids of the level in that basis, residency."""
    if type(pt) is not Plaintext:
        raise StateMismatchError(f"{op} expects a Plaintext, got {type(pt).__name__}")
    if pt.context_id != engine.context.context_id:
        raise ForeignContextError(
            f"{op}: plaintext belongs to context {pt.context_id}, the engine to {engine.context.context_id}"
        )
    basis = pt.modulus_basis if basis is None else basis
    domain = pt.polynomial_domain if domain is None else domain
    residue = pt.residue_representation if residue is None else residue
    if pt.polynomial_domain != domain or pt.residue_representation != residue or pt.modulus_basis != basis:
        raise StateMismatchError(
            f"{op} needs a plaintext in {domain}/{residue}/{basis}, got "
            f"{pt.polynomial_domain}/{pt.residue_representation}/{pt.modulus_basis}" + _plaintext_hint(pt, domain, residue, basis)
        )
    check_level_rows(engine.context, pt, op)  # its basis is ``basis`` here
    _ring_degree(engine.context, pt, op)
    _residency(engine, pt, op)


def check_same_state(a, b, op: str, *, check_scale: bool = True, check_components: bool = True) -> None:
    """Level, prime ids, domain, batch shape, scale (and component count) must agree."""
    if a.key_id is not None and b.key_id is not None and a.key_id != b.key_id:
        raise ForeignKeyError(f"{op}: operands are under different secret keys ({a.key_id} vs {b.key_id})")
    if a.level != b.level or a.prime_ids != b.prime_ids:
        raise StateMismatchError(
            f"{op}: operands are at different levels ({a.level} vs {b.level}); rescale or re-encode one"
        )
    if a.polynomial_domain != b.polynomial_domain:
        raise StateMismatchError(
            f"{op}: operands are in different domains ({a.polynomial_domain} vs {b.polynomial_domain})"
        )
    if check_scale and not scales_match(a.scale, b.scale):
        raise StateMismatchError(f"{op}: operands have different scales ({a.scale!r} vs {b.scale!r})")
    if check_components and tuple(a.data.shape) != tuple(b.data.shape):
        raise StateMismatchError(f"{op}: operand shapes differ ({tuple(a.data.shape)} vs {tuple(b.data.shape)})")


def check_key_layout(context, key, op: str) -> None:
    """A key of ``context``: every QP prime of level 0, its ring degree and, for key switching,
    one digit per digit of the parameters (the kernels index by these without checking)."""
    name = type(key).__name__
    if key.prime_ids != context.qp_ids:
        raise StateMismatchError(f"{op}: {name} prime_ids {key.prime_ids} are not the context's QP primes {context.qp_ids}")
    _ring_degree(context, key, op)
    if isinstance(key, KeySwitchKey) and key.digit_count != len(context.digits):
        raise StateMismatchError(f"{op}: {name} has {key.digit_count} digits, the parameters {len(context.digits)}")


def check_key(engine, ct, key, op: str, key_type: type[KeySwitchKey] | type[PublicKey]) -> None:
    """A ``key_type`` of the engine's context and layout, on its device, under ``ct``'s secret
    (``ct`` None: a public key encrypting for its owner, whatever secret the engine holds)."""
    if not isinstance(key, key_type) or (key_type is KeySwitchKey and type(key) is not KeySwitchKey):
        raise StateMismatchError(f"{op} needs a {key_type.__name__}, got {type(key).__name__}")
    if key.context_id != engine.context.context_id:
        raise ForeignContextError(
            f"{op}: key belongs to context {key.context_id}, the engine to {engine.context.context_id}"
        )
    if ct is not None and key.key_id != ct.key_id:
        raise ForeignKeyError(f"{op}: key is for secret {key.key_id} but the ciphertext is under {ct.key_id}")
    check_key_layout(engine.context, key, op)
    _residency(engine, key, op)


def check_product_scale(engine, ct, scale: float, op: str) -> float:
    """``scale`` (a product's) below the modulus of ``ct``'s level, else a message times it
    wraps mod Q and decrypts to garbage (a 2^60 scale over one 40-bit prime did, with no
    error). The bound is SEAL's (scale bits below the modulus bits), a necessary condition
    only: a slot value ``m`` decrypts right while ``|m| * scale`` stays below half the
    modulus, which no check of the scales alone can see; returns ``scale``."""
    bits = engine.context.level_modulus_bits[ct.level]
    if not (0 < scale < math.inf):  # a product of tiny (huge) scales under- (over-)flows
        raise StateMismatchError(f"{op}: the product's scale {scale!r} is not a positive finite number")
    if not math.log2(scale) < bits:
        raise StateMismatchError(
            f"{op}: the product's scale 2^{math.log2(scale):.1f} does not fit the modulus of level {ct.level} "
            f"(2^{bits:.1f}); rescale an operand first (rescale_to_next_level) or encode at a smaller scale"
        )
    return scale


def check_not_capturing(backend, op: str) -> None:
    """ExecutionError when ``op``, which draws fresh randomness on the host, is called while
    the backend's stream records a CUDA graph: a replay would reuse the recorded randomness
    (one encryption mask for every replay's ciphertext), and the host work cannot be
    recorded anyway."""
    if backend.is_capturing():
        raise ExecutionError(
            f"{op} draws fresh randomness on the host and cannot run inside a CUDA Graph capture (every replay "
            "would reuse the same random values); run it outside the graph and pass its result in as an input"
        )
