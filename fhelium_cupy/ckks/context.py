"""The CKKS context: validated parameters, a stable identity and precomputed constants.

``CkksContext`` satisfies ``backends.base.RingContext`` (plain Python integers only) and
adds what the engine needs on the host: the identity hash, level -> prime ids, and the
mixed-radix (Garner) constants used to reconstruct centred integers when decoding.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cached_property

from ..errors import InsecureParametersError
from .params import Parameters
from .primes import primitive_root_2n

__all__ = ["CkksContext"]


class CkksContext:
    """Ring and modulus-chain description shared by an engine, its backend and its values.

    Args:
        parameters: a validated ``Parameters``.

    Raises:
        TypeError: ``parameters`` is not a ``Parameters``.
        InsecureParametersError: the set is below 128-bit security but not marked insecure
            (an object changed after validation, e.g. through ``object.__setattr__``).

    Attributes:
        context_id: first 16 hex digits of the sha256 of the canonical parameter
            description; values carry it and are refused by other contexts.
    """

    def __init__(self, parameters: Parameters) -> None:
        if not isinstance(parameters, Parameters):
            raise TypeError(f"CkksContext needs validated Parameters, got {type(parameters).__name__}")
        issue = parameters.security_issue()  # again: a copy or unpickled object skipped __post_init__
        if issue is not None and not parameters.insecure:
            raise InsecureParametersError(
                f"parameters {parameters.name!r} are marked secure, but {issue}; build them with "
                "Parameters.from_literal(..., insecure=True) for testing only"
            )
        self.parameters = parameters
        self._psi = tuple(primitive_root_2n(q, parameters.ring_degree) for q in parameters.moduli)
        text = json.dumps(parameters.describe(), sort_keys=True, separators=(",", ":"))
        self.context_id = hashlib.sha256(text.encode()).hexdigest()[:16]

    # --- RingContext ---------------------------------------------------------------
    @property
    def ring_degree(self) -> int:
        return self.parameters.ring_degree

    @property
    def moduli(self) -> tuple[int, ...]:
        return self.parameters.moduli

    @property
    def psi(self) -> tuple[int, ...]:
        return self._psi

    @property
    def q_count(self) -> int:
        return len(self.parameters.q_moduli)

    @property
    def p_count(self) -> int:
        return len(self.parameters.p_moduli)

    @property
    def digits(self) -> tuple[tuple[int, ...], ...]:
        return self.parameters.digits

    # --- host helpers -----------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return self.parameters.num_slots

    @property
    def max_level(self) -> int:
        return self.q_count - 1

    @property
    def p_ids(self) -> tuple[int, ...]:
        """Prime ids of the special primes."""
        return tuple(range(self.q_count, self.q_count + self.p_count))

    @cached_property
    def level_modulus_bits(self) -> tuple[float, ...]:
        """log2 of the product of the active Q primes, by level (what a scale must stay below)."""
        q = self.parameters.q_moduli
        return tuple(sum(math.log2(m) for m in q[level:]) for level in range(len(q)))

    def prime_ids(self, level: int) -> tuple[int, ...]:
        """Active Q prime ids at ``level`` (0 = full chain)."""
        if not 0 <= level <= self.max_level:
            raise ValueError(f"level must be in [0, {self.max_level}], got {level}")
        return tuple(range(level, self.q_count))

    def level_of(self, prime_ids: tuple[int, ...]) -> int:
        return prime_ids[0]

    @cached_property
    def qp_ids(self) -> tuple[int, ...]:
        return tuple(range(self.q_count + self.p_count))

    def __repr__(self) -> str:
        p = self.parameters
        return (
            f"CkksContext(name={p.name!r}, N={p.ring_degree}, q_count={self.q_count}, p_count={self.p_count}, "
            f"dnum={p.dnum}, log2_qp={p.log2_qp:.1f}, context_id={self.context_id!r})"
        )
