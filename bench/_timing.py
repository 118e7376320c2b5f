"""Timing helpers shared by the bench scripts: host clocks, CUDA events, robust summaries.

Every measurement warms up first, then takes ``runs`` samples and reports the median
(with min, max, mean, p10, p90). Two clocks:

* host: ``time.perf_counter`` around the call. With ``synchronize`` the device is drained
  before the clock stops (end-to-end latency); without it the number is the host cost of
  *issuing* the work (the device queue is drained, untimed, between samples so each
  sample starts from an idle queue).
* device: a pair of CUDA events recorded on the stream the work runs on, read after a
  synchronize (GPU time between the first and last enqueued operation).

A host-bound call's time follows the speed of the CPU the process runs on, and on a shared
host that speed changes (the H200 machines' vCPUs run the same Python loop in ~0.95 or ~1.7 ms,
and a process can move between them: `bench/results/2026-11-30-s19/host_mode/`). So a ratio
of a host-bound call to a device-bound one is measured paired (``paired_ratio``: both timed
in each round, a Python loop timed beside them), not from two timings minutes apart. Calls
compared side by side take their order from ``alternated_rounds`` (every other round reversed,
so no call always runs first).

CuPy and torch are imported lazily; on a machine without CUDA only host timing works.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = [
    "alternated_rounds",
    "cuda_sync",
    "device_median_us",
    "host_loop_us",
    "paired_ratio",
    "summarize",
    "summarize_us",
    "time_device_cupy",
    "time_device_torch",
    "time_host",
    "time_host_pipelined",
]

T = TypeVar("T")


def summarize(samples_s: list[float]) -> dict[str, Any]:
    """Summary of samples in seconds, reported in milliseconds (``None`` fields when empty)."""
    if not samples_s:
        return {"runs": 0, "median_ms": None, "mean_ms": None, "min_ms": None, "max_ms": None, "p10_ms": None, "p90_ms": None}
    ms = sorted(s * 1e3 for s in samples_s)

    def quantile(q: float) -> float:
        return ms[min(len(ms) - 1, max(0, round(q * (len(ms) - 1))))]

    return {
        "runs": len(ms),
        "median_ms": statistics.median(ms),
        "mean_ms": statistics.fmean(ms),
        "min_ms": ms[0],
        "max_ms": ms[-1],
        "p10_ms": quantile(0.1),
        "p90_ms": quantile(0.9),
    }


def _check_runs(runs: int, what: str) -> None:
    if runs < 1:
        raise ValueError(f"{what}: runs must be >= 1, got {runs}")


def summarize_us(samples_us: list[float]) -> dict[str, Any]:
    """``runs``, ``median_us``, ``p10_us``, ``p90_us``, ``mean_us`` of samples in µs (at least one)."""
    _check_runs(len(samples_us), "summarize_us")
    ordered = sorted(samples_us)
    n = len(ordered)
    return {
        "runs": n,
        "median_us": statistics.median(ordered),
        "p10_us": ordered[int(0.1 * (n - 1))],
        "p90_us": ordered[int(0.9 * (n - 1))],
        "mean_us": statistics.fmean(ordered),
    }


def time_host_pipelined(
    fn: Callable[[], Any],
    *,
    runs: int,
    warmup: int,
    drain: Callable[[], None],
    every: int = 64,
    before: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Host µs per call of ``fn()`` issued back to back, as a pipelined caller does.

    No synchronize in the timed region; ``drain`` runs untimed every ``every`` calls so the
    launch queue never fills (a full queue would make the host wait and hide the real
    cost); ``before`` runs untimed before each call. Returns ``summarize_us``.
    """
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    drain()
    samples = []
    clock = time.perf_counter
    for i in range(runs):
        if i and i % every == 0:
            drain()
        if before is not None:
            before()
        start = clock()
        fn()
        samples.append((clock() - start) * 1e6)
    drain()
    return summarize_us(samples)


def host_loop_us(*, runs: int = 9) -> float:
    """Median µs of a fixed pure-Python loop (the sum of i * i for i < 20000): how fast this
    process's CPU runs the interpreter now, printed beside host-bound timings."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        sum(i * i for i in range(20000))
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def alternated_rounds(items: Sequence[T], rounds: int) -> Iterator[Sequence[T]]:
    """The order to run ``items`` in, one per round for ``rounds`` rounds: ``items`` itself in
    the first, third, ... round, ``items[::-1]`` in the second, fourth, ... (nothing when
    ``rounds`` <= 0). ``paired_ratio`` and ``bench._example18.alternate`` take their order from it."""
    for r in range(rounds):
        yield items if r % 2 == 0 else items[::-1]


def paired_ratio(
    slow: Callable[[], Any],
    fast: Callable[[], Any],
    *,
    rounds: int,
    runs: int,
    synchronize: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """``slow`` / ``fast`` latency ratio measured side by side: in each of ``rounds`` rounds,
    ``host_loop_us()``, then the median latency (``time_host``, ``runs`` samples after one
    warmup) of both, every other round in reverse order (``alternated_rounds``: ``slow``
    first in the first round).

    Returns ``{"rounds": [{"host_loop_us", "slow_ms", "fast_ms", "ratio"}, ...], "median_ratio",
    "min_ratio", "max_ratio"}``.
    """
    if rounds < 1 or runs < 1:
        raise ValueError(f"paired_ratio: rounds and runs must be >= 1, got {rounds} and {runs}")
    table = []
    for order in alternated_rounds((("slow", slow), ("fast", fast)), rounds):
        loop = host_loop_us()
        medians = {}
        for name, fn in order:
            medians[name] = time_host(fn, runs=runs, warmup=1, synchronize=synchronize)["median_ms"]
        table.append({"host_loop_us": loop, "slow_ms": medians["slow"], "fast_ms": medians["fast"],
                      "ratio": medians["slow"] / medians["fast"]})
    ratios = sorted(row["ratio"] for row in table)
    return {"rounds": table, "median_ratio": statistics.median(ratios), "min_ratio": ratios[0], "max_ratio": ratios[-1]}


def cuda_sync() -> None:
    """Synchronize the current CuPy device if CuPy is importable and sees a GPU; else nothing."""
    try:
        import cupy
    except Exception:
        return
    if cupy.cuda.is_available():
        cupy.cuda.runtime.deviceSynchronize()


def time_host(
    fn: Callable[[], Any],
    *,
    runs: int,
    warmup: int,
    synchronize: Callable[[], None] | None = None,
    sync_inside: bool = True,
    before: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Host wall time of ``fn()``.

    Args:
        fn: the work; called ``warmup + runs`` times.
        synchronize: drains the device (``None`` on CPU).
        sync_inside: True times call + synchronize (latency); False times the call only
            (host issue cost, each call on a drained device) and synchronizes untimed after
            each sample.
        before: runs untimed before each call, after the drain (e.g. a prepared input copy
            that ``fn`` consumes).
    """
    sync = synchronize or (lambda: None)
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
        sync()
    samples = []
    for _ in range(runs):
        sync()
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        if sync_inside:
            sync()
        samples.append(time.perf_counter() - start)
        if not sync_inside:
            sync()
    return summarize(samples)


def time_device_cupy(fn: Callable[[], Any], *, runs: int, warmup: int, stream: Any = None) -> dict[str, Any]:
    """GPU time of ``fn()`` from CuPy events on ``stream`` (default: CuPy's current stream)."""
    _check_runs(runs, "time_device_cupy")
    import cupy

    stream = stream if stream is not None else cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    samples = []
    for _ in range(runs):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return summarize(samples)


def device_median_us(fn: Callable[[], Any], *, runs: int, warmup: int = 0, stream: Any = None) -> float:
    """Median GPU µs of ``fn()`` (``time_device_cupy``)."""
    return float(time_device_cupy(fn, runs=runs, warmup=warmup, stream=stream)["median_ms"]) * 1e3


def time_device_torch(fn: Callable[[], Any], *, runs: int, warmup: int, stream: Any = None) -> dict[str, Any]:
    """GPU time of ``fn()`` from torch CUDA events on ``stream`` (default: torch's current stream)."""
    _check_runs(runs, "time_device_torch")
    import torch

    stream = stream if stream is not None else torch.cuda.current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    samples = []
    for _ in range(runs):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / 1e3)
    return summarize(samples)
