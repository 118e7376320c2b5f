"""Device names normalized: ``int | "cpu" | "cuda" | "cuda:N" | cupy.cuda.Device | torch.device``."""

from __future__ import annotations

from typing import Literal

from .capabilities import require_cupy

__all__ = ["Device", "as_device", "current_cuda_index", "is_unindexed_cuda"]


class Device(str):
    """A resolved device: ``Device("cpu")`` or ``Device("cuda", index)`` with a concrete index.

    It *is* the string ``"cpu"`` or ``"cuda:N"`` (a ``str`` subclass), so torch accepts it
    wherever it takes a device (``tensor.to(program.device)``, ``torch.zeros(..., device=)``),
    and it compares equal to that string and to the equal ``torch.device`` (either way
    round), as the spec's ``torch.device``-typed properties promise; ``.type`` and
    ``.index`` read as on a ``torch.device``. Immutable. It hashes as its string, so do not
    mix ``Device`` and ``torch.device`` keys in one dict or set (use ``str(device)``).

    Unlike FHElium 0.30.0 (bug 7.1), an unindexed ``"cuda"`` is always resolved to the
    current CUDA device when normalized, so device comparisons never fail spuriously.
    """

    type: Literal["cpu", "cuda"]
    index: int | None  # type: ignore[assignment]  # shadows str.index, as torch.device.index reads

    def __new__(cls, type: str, index: int | None = None) -> Device:  # noqa: A002 - torch.device's name
        if type == "cpu":
            if index is not None:
                raise ValueError("a CPU device has no index")
            name = "cpu"
        elif type == "cuda":
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"a CUDA device needs a non-negative index, got {index!r}")
            index = int(index)
            name = f"cuda:{index}"
        else:
            raise ValueError(f"device type must be 'cpu' or 'cuda', got {type!r}")
        self = super().__new__(cls, name)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Device is immutable")

    def __eq__(self, other: object) -> bool:
        kind = type(other)
        if kind.__name__ == "device" and kind.__module__.startswith("torch"):
            other = str(other)  # torch.device("cuda", 0) reads "cuda:0"
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __reduce__(self):  # the string alone would not rebuild (type, index)
        return (Device, (self.type, self.index))

    @property
    def is_cuda(self) -> bool:
        return self.type == "cuda"

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Device({str.__str__(self)!r})"


CPU = Device("cpu")


def current_cuda_index() -> int:
    """CuPy's current device index (needs CuPy and a GPU)."""
    cupy = require_cupy("resolving the current CUDA device")
    return int(cupy.cuda.runtime.getDevice())


def is_unindexed_cuda(spec: object) -> bool:
    """``"cuda"`` or ``torch.device("cuda")``: a CUDA device without an index, which
    ``as_device`` resolves to the current one."""
    if isinstance(spec, str):
        return spec.strip().lower() == "cuda"
    return type(spec).__module__.startswith("torch") and getattr(spec, "type", None) == "cuda" and spec.index is None  # type: ignore[attr-defined]


def as_device(spec: object) -> Device:
    """Normalize a device description.

    Accepts ``Device``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a non-negative ``int`` (CUDA
    index), a ``cupy.cuda.Device`` and a ``torch.device``. An unindexed CUDA device is
    resolved to the current CuPy device.

    Raises:
        TypeError: for other types.
        ValueError: for malformed strings or negative indices.
        CudaUnavailableError: when ``"cuda"`` must be resolved without CuPy/GPU.
    """
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, bool):
        raise TypeError("a device cannot be a bool")
    if isinstance(spec, int):
        if spec < 0:
            raise ValueError(f"CUDA device index must be non-negative, got {spec}")
        return Device("cuda", spec)
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "cpu":
            return CPU
        if text == "cuda":
            return Device("cuda", current_cuda_index())
        if text.startswith("cuda:"):
            tail = text[5:]
            if tail.isdigit():
                return Device("cuda", int(tail))
        raise ValueError(f"unknown device {spec!r}; use 'cpu', 'cuda' or 'cuda:N'")
    module = type(spec).__module__
    if module.startswith("torch") and type(spec).__name__ == "device":
        kind = spec.type  # type: ignore[attr-defined]
        index = spec.index  # type: ignore[attr-defined]
        if kind == "cpu":
            return CPU
        if kind == "cuda":
            return Device("cuda", current_cuda_index() if index is None else int(index))
        raise ValueError(f"unsupported torch device type {kind!r}; use cpu or cuda")
    if module.startswith("cupy") and hasattr(spec, "id"):
        return Device("cuda", int(spec.id))  # type: ignore[attr-defined]
    raise TypeError(
        f"cannot interpret {type(spec).__name__} as a device; use 'cpu', 'cuda', 'cuda:N', an int, "
        "a cupy.cuda.Device or a torch.device"
    )
