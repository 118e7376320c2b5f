"""A minimal registered value type for runtime tests (no CKKS needed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fhelium_cupy.values import register_value_type

__all__ = ["ToyValue"]


@dataclass(eq=False)
class ToyValue:
    """Two named arrays plus CKKS-like metadata."""

    data: Any
    level: int = 0
    scale: float = 2.0**40
    context_id: str = "ctx-a"
    key_id: str | None = "key-a"
    prime_ids: tuple[int, ...] = (0, 1)
    aux: Any = None
    extras: dict = field(default_factory=dict)

    def value_metadata(self) -> Mapping[str, object]:
        return {
            "level": self.level,
            "scale": self.scale,
            "context_id": self.context_id,
            "key_id": self.key_id,
            "prime_ids": self.prime_ids,
            "has_aux": self.aux is not None,
            "extras": self.extras,
        }

    def value_tensors(self) -> Mapping[str, Any]:
        out = {"data": self.data}
        if self.aux is not None:
            out["aux"] = self.aux
        return out

    def with_value_tensors(self, tensors: Mapping[str, Any]) -> ToyValue:
        return replace(self, data=tensors["data"], aux=tensors.get("aux"))


register_value_type(ToyValue, type_name="ToyValue", schema_version=1)
