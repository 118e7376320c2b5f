"""The exception hierarchy of fhelium_cupy: one place, each class also a builtin."""

from __future__ import annotations

__all__ = [
    "CkksError",
    "ConfigurationError",
    "CudaGraphCaptureError",
    "CudaGraphInputError",
    "CudaGraphOutputError",
    "CudaUnavailableError",
    "ExecutionError",
    "ExecutionInputError",
    "FHEliumError",
    "ForeignContextError",
    "ForeignKeyError",
    "InsecureParametersError",
    "SerializationError",
    "StateMismatchError",
]


class FHEliumError(Exception):
    """Base class of every error raised on purpose by fhelium_cupy."""


class ExecutionError(FHEliumError, RuntimeError):
    """An execution object (buffer, graph program, pool) cannot do what was asked.

    Raised, for example, by any method of a closed ``ReusableValueBuffer`` or
    ``CudaGraphProgram``.
    """


class ExecutionInputError(ExecutionError):
    """An input tree does not match the signature of a buffer or program.

    Raised before the first byte moves: the target is unchanged.
    """


class CudaGraphInputError(ExecutionInputError):
    """Replay input differs from capture, or a ``replay_prepared`` handle rule is broken."""


class CudaGraphCaptureError(ExecutionError):
    """Warmup, capture, output validation or the first replay of a CUDA Graph failed.

    Attributes:
        stage: ``"warmup"``, ``"capture"`` or ``"first replay"``.
        function_name: qualified name of the captured callable.
        detail: text of the original error (also chained as ``__cause__``).
    """

    def __init__(self, *, stage: str, function_name: str, detail: str) -> None:
        self.stage = stage
        self.function_name = function_name
        self.detail = detail
        super().__init__(f"CUDA Graph {stage} failed for {function_name}: {detail}")

    def __reduce__(self):  # keep pickling working with keyword-only arguments
        return (_rebuild_capture_error, (self.stage, self.function_name, self.detail))


def _rebuild_capture_error(stage: str, function_name: str, detail: str) -> CudaGraphCaptureError:
    return CudaGraphCaptureError(stage=stage, function_name=function_name, detail=detail)


class CudaGraphOutputError(CudaGraphCaptureError, TypeError):
    """The captured callable's output is unsupported: a leaf or container that is not an
    array, registered value, list, tuple, dict or None; an array off the capture device; a
    value without arrays; or a pool member's output that changed between warmup and capture.

    A ``CudaGraphCaptureError`` (with ``stage``) that is also a ``TypeError``: the spec's
    ``capture`` raises ``TypeError`` for an unsupported output leaf and ``CudaGraphCaptureError``
    when output validation fails.
    """

    def __reduce__(self):
        return (_rebuild_output_error, (self.stage, self.function_name, self.detail))


def _rebuild_output_error(stage: str, function_name: str, detail: str) -> CudaGraphOutputError:
    return CudaGraphOutputError(stage=stage, function_name=function_name, detail=detail)


class CudaUnavailableError(FHEliumError, RuntimeError):
    """A CUDA path was requested but a piece it needs (CuPy, a GPU, NVRTC) is missing.

    The message names the missing piece and how to install it.
    """


class ConfigurationError(FHEliumError, ValueError):
    """Parameters or options are invalid."""


class InsecureParametersError(ConfigurationError):
    """A parameter set exceeds the 128-bit HE-standard bound and insecure use was not opted in."""


class CkksError(FHEliumError):
    """Base class of CKKS engine errors."""


class StateMismatchError(CkksError, ValueError):
    """CKKS operands disagree in level, scale, domain, basis, shape or representation."""


class ForeignContextError(CkksError, ValueError):
    """A value was made under another parameter set (context identity differs)."""


class ForeignKeyError(CkksError, ValueError):
    """A value or key belongs to another secret key (key identity differs)."""


class SerializationError(CkksError, ValueError):
    """A saved value has a bad schema, unknown type or foreign identity."""
