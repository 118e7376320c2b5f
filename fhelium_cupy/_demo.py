"""The encrypted matrix-vector workload behind ``fhelium-cupy demo`` and the bench suite.

Composes the public API only: a :class:`~fhelium_cupy.ckks.CkksEngine`, the cyclic-diagonal
evaluator of :mod:`fhelium_cupy.ckks.linalg` and, on CUDA, a captured
:class:`~fhelium_cupy.runtime.cuda_graph.CudaGraphProgram` replayed with new encrypted
inputs. Cleartext matrices and vectors come from a seeded NumPy generator (they are
public test data, not secrets; the engine draws its own randomness from the OS).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigurationError

__all__ = [
    "DEFAULT_CPU_PRESET",
    "DEFAULT_CUDA_PRESET",
    "MatvecWorkload",
    "ReplayResult",
    "launch_counter",
    "run_demo",
]

DEFAULT_CPU_PRESET = "slots8192-scale40-depth7"  # 128-bit as on the GPU (no implicit insecure opt-in): ~5 s on NumPy
DEFAULT_CUDA_PRESET = "slots8192-scale40-depth7"  # N=2^14: FHElium example 18's preset


# --------------------------------------------------------------------------- engine adapters


def _counter_of(owner: Any) -> Callable[[], int | None]:
    def count() -> int | None:
        return int(owner.launch_count)

    return count


def launch_counter(engine: Any) -> Callable[[], int | None]:
    """A callable returning the backend's cumulative kernel-launch count, or ``None``.

    The CuPy backend counts its ``RawKernel`` launches (``launch_count``); the NumPy
    backend launches nothing and has no counter.
    """
    for owner in (engine, getattr(engine, "backend", None), getattr(engine, "_backend", None)):
        if owner is not None and isinstance(getattr(owner, "launch_count", None), int):
            return _counter_of(owner)

    def no_count() -> int | None:
        return None

    return no_count


def _nothing() -> None:
    return None


def _device_synchronizer(device: str) -> Callable[[], None]:
    if device != "cuda":
        return _nothing
    from .interop.capabilities import require_cupy

    cupy = require_cupy("synchronize")

    def synchronize() -> None:
        cupy.cuda.get_current_stream().synchronize()

    return synchronize


def _to_host(array: Any) -> np.ndarray:
    if hasattr(array, "get") and not isinstance(array, np.ndarray):
        array = array.get()
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    return np.asarray(array)


@dataclass
class MatvecWorkload:
    """One engine, a random n x n matrix encoded as diagonals, its rotation keys, a schedule.

    ``schedule(source)`` is the eager evaluator (``functools.partial`` of
    ``linalg.matrix_vector`` with the static keys and diagonals bound), exactly what
    ``CudaGraphProgram.capture`` captures.
    """

    engine: Any
    preset: str
    device: str
    size: int
    matrix: np.ndarray
    diagonals: Any
    rotation_keys: Any
    schedule: Callable[[Any], Any]
    keygen_seconds: float
    setup_seconds: float
    rng: np.random.Generator = field(repr=False)
    method: str = "diagonal"

    @classmethod
    def build(
        cls,
        *,
        preset: str,
        device: str,
        size: int,
        insecure: bool,
        seed: int = 2026,
        engine: Any = None,
        show_progress: bool | None = None,
        method: str = "diagonal",
    ) -> MatvecWorkload:
        """Create the engine (unless given), the matrix, its diagonals and rotation keys.

        ``method``: ``"diagonal"`` (``linalg.matrix_vector(..., hoisted=False)``: FHElium
        example 18's n-1 independent rotations), ``"hoisted"`` (``matrix_vector``'s default:
        double hoisting, one shared ModUp and one ModDown) or ``"bsgs"`` (``linalg.matrix_vector_bsgs``,
        hoisted baby steps + giant steps).

        Raises:
            ConfigurationError: ``size`` is not a positive divisor of the slot count.
            InsecureParametersError: a test preset without ``insecure=True``.
            CudaUnavailableError: ``device="cuda"`` without a usable GPU.
        """
        if not isinstance(size, int) or size <= 0:
            raise ConfigurationError(f"--size must be a positive integer, got {size!r}")
        if method not in ("diagonal", "hoisted", "bsgs"):
            raise ConfigurationError(f"method must be 'diagonal', 'hoisted' or 'bsgs', got {method!r}")
        from .ckks import CkksEngine, linalg

        start = time.perf_counter()
        if engine is None:
            engine = CkksEngine(preset, device=device, insecure=insecure)
        slots = int(engine.num_slots)
        if size > slots or slots % size:
            raise ConfigurationError(
                f"matrix size {size} must divide the preset's {slots} slots (a power of two up to {slots})"
            )
        bsgs = method == "bsgs"
        steps = list(linalg.required_rotation_steps_bsgs(size) if bsgs else linalg.required_rotation_steps(size))
        key_start = time.perf_counter()
        keys = engine.rotation_keys(steps, progress=show_progress)  # secret and public key first, on first use
        keygen = time.perf_counter() - key_start
        rng = np.random.default_rng(seed + size)
        matrix = rng.uniform(-1.0, 1.0, size=(size, size)) / size
        diagonals = (linalg.encode_bsgs_diagonals if bsgs else linalg.encode_diagonals)(engine, matrix)
        evaluator = linalg.matrix_vector_bsgs if bsgs else linalg.matrix_vector
        # "diagonal" is FHElium example 18's schedule (independent rotations); "hoisted" is
        # linalg.matrix_vector's default (double hoisting: one ModUp, the diagonal products
        # summed before one ModDown)
        extra: dict[str, Any] = {} if bsgs else {"hoisted": method == "hoisted"}
        schedule: Callable[[Any], Any] = functools.partial(
            evaluator, engine=engine, diagonals=diagonals, rotation_keys=keys, **extra
        )
        return cls(
            engine=engine, preset=preset, device=device, size=size, matrix=matrix, diagonals=diagonals,
            rotation_keys=keys, schedule=schedule, keygen_seconds=keygen,
            setup_seconds=time.perf_counter() - start, rng=rng, method=method,
        )

    @property
    def synchronize(self) -> Callable[[], None]:
        return _device_synchronizer(self.device)

    def new_input(self) -> tuple[np.ndarray, Any]:
        """A fresh cleartext vector and its encryption (periodic, period ``size``)."""
        from .ckks import linalg

        x = self.rng.uniform(-1.0, 1.0, size=self.size)
        return x, self.engine.encrypt_message(linalg.periodic_message(x, int(self.engine.num_slots)))

    def max_error(self, x: np.ndarray, output: Any) -> float:
        """Max abs error of the first ``size`` decrypted slots against ``matrix @ x``."""
        decrypted = _to_host(self.engine.decrypt_message(output))
        got = np.real(decrypted[: self.size])
        return float(np.max(np.abs(got - self.matrix @ x)))


# --------------------------------------------------------------------------- demo


@dataclass
class ReplayResult:
    label: str
    max_abs_error: float
    latency_ms: float


def _ms(seconds: float) -> float:
    return seconds * 1e3


def _time_call(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, float]:
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def _median(values: Iterable[float]) -> float:
    return float(np.median(list(values)))


def run_demo(
    *,
    device: str,
    preset: str,
    size: int,
    insecure: bool,
    replays: int,
    out: Any = None,
    show_progress: bool | None = None,
    method: str = "hoisted",
) -> dict[str, Any]:
    """Encrypt, evaluate eagerly (and as a replayed CUDA Graph on CUDA), decrypt, report.

    ``method`` picks the evaluator: ``"hoisted"`` (``linalg.matrix_vector``'s default),
    ``"diagonal"`` (FHElium example 18's independent rotations) or ``"bsgs"``.
    ``show_progress``: the rotation keys' progress bar (None: when stderr is a terminal).

    Returns the numbers it printed (errors, latencies, capture stats) as a dict.
    """
    out = out or sys.stdout

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    if replays < 0:
        raise ConfigurationError(f"--replays must be >= 0, got {replays}")
    from .ckks import CkksEngine

    start = time.perf_counter()
    engine = CkksEngine(preset, device=device, insecure=insecure)
    slots = int(engine.num_slots)
    say(f"engine      {preset} on {device}: N={2 * slots}, {slots} slots{' (INSECURE test parameters)' if insecure else ''} "
        f"in {time.perf_counter() - start:.2f} s")
    workload = MatvecWorkload.build(preset=preset, device=device, size=size, insecure=insecure, engine=engine,
                                    show_progress=show_progress, method=method)
    say(f"matrix      {size}x{size} ({method} evaluator), secret/public + {len(workload.rotation_keys)} rotation keys in {workload.keygen_seconds:.2f} s "
        f"(setup {workload.setup_seconds:.2f} s)")
    sync = workload.synchronize
    report: dict[str, Any] = {"device": device, "preset": preset, "size": size, "slots": slots, "runs": []}

    x0, source = workload.new_input()
    output, first = _time_call(lambda: workload.schedule(source), sync)
    error = workload.max_error(x0, output)
    eager_times = [first]
    for _ in range(2):  # a couple more eager runs for a steadier latency (first one may compile)
        eager_times.append(_time_call(lambda: workload.schedule(source), sync)[1])
    eager_ms = _ms(_median(eager_times[1:]))
    report["runs"].append({"mode": "eager", "input": 0, "max_abs_error": error, "latency_ms": eager_ms})
    say(f"eager       input 0: max abs error {error:.3e}   latency {eager_ms:.3f} ms "
        f"(first call {_ms(first):.3f} ms)")
    report["eager_ms"] = eager_ms

    if device != "cuda":
        from .interop.capabilities import cuda_unavailable_reason

        reason = cuda_unavailable_reason() or "the demo ran with --device cpu"
        say(f"graph       skipped: CUDA Graph capture needs a CUDA GPU ({reason}); "
            "run `fhelium-cupy demo --device cuda` on a GPU machine")
        report["graph"] = {"skipped": reason}
        return report

    from .runtime.cuda_graph import CudaGraphProgram

    capture_start = time.perf_counter()
    program = CudaGraphProgram.capture(workload.schedule, example_inputs=(source,))
    capture_s = time.perf_counter() - capture_start
    stats = program.stats
    say(f"capture     {capture_s:.3f} s (warmup {stats.warmup_seconds:.3f} s, capture {stats.capture_seconds:.3f} s, "
        f"first replay {_ms(stats.first_replay_seconds):.3f} ms)")
    replay_times = []
    try:
        for index in range(1, replays + 1):
            x, ciphertext = workload.new_input()
            result, seconds = _time_call(functools.partial(program.replay, ciphertext, copy_output=True), sync)
            replay_times.append(seconds)
            error = workload.max_error(x, result)
            report["runs"].append({"mode": "replay", "input": index, "max_abs_error": error, "latency_ms": _ms(seconds)})
            say(f"replay      input {index}: max abs error {error:.3e}   latency {_ms(seconds):.3f} ms")
        if replay_times:
            # steady-state latency: same input, borrowed output, no decrypt in between
            steady = [_time_call(lambda: program.replay(source), sync)[1] for _ in range(max(5, replays))]
            replay_ms = _ms(_median(steady))
            report["replay_ms"] = replay_ms
            say(f"latency     eager {eager_ms:.3f} ms vs graph replay {replay_ms:.3f} ms "
                f"({eager_ms / replay_ms:.2f}x)")
        report["graph"] = {
            "capture_seconds": capture_s,
            "warmup_seconds": stats.warmup_seconds,
            "first_replay_seconds": stats.first_replay_seconds,
        }
    finally:
        program.close()
    return report

