"""Host cost of the CudaGraphProgram replay path on the CPU, with a fake CUDA runtime.

Runs the real ``replay()`` / ``replay_prepared()`` / ``copy_inputs_from()`` Python code
with ``tests.helpers.fake_cupy`` standing in for CuPy: every CUDA call is a Python no-op,
so the numbers are the library's own Python overhead (plus a few tens of ns per fake
call), not what the H200 host measures. Use it to compare before/after a change and to
count CUDA API calls per replay; ``bench/replay_host_breakdown.py`` is the GPU
counterpart.

Workloads: ``ciphertext`` (one CKKS ``Ciphertext`` [2, 8, 16384] uint64 in, one out) and
``array`` (one raw array of that shape in and out).

Run: ``python bench/replay_host_cpu.py [--runs N] [--profile replay] [--import-torch]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import emit_json, positive_int  # noqa: E402  (after the sys.path entry above)
from bench._timing import time_host_pipelined  # noqa: E402

__all__ = ["main", "measure"]

SHAPE = (2, 8, 16384)


def _workloads(fake: Any) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    import numpy as np

    from fhelium_cupy.ckks.values import Ciphertext
    from tests.helpers.fake_cupy import FakeArray, build_program

    def ciphertext(level: int = 0) -> Ciphertext:
        return Ciphertext(
            FakeArray(SHAPE, np.uint64), level=level, scale=2.0**40, prime_ids=tuple(range(SHAPE[1])),
            polynomial_domain="ntt", context_id="ctx-bench", key_id="key-bench",
        )

    def add(ct: Ciphertext) -> Ciphertext:
        return ct._with_data(FakeArray(ct.data.shape, ct.data.dtype))

    def bump(x: Any) -> Any:
        return FakeArray(x.shape, x.dtype)

    return {
        "ciphertext": (build_program(fake, add, (ciphertext(),)), (ciphertext(),)),
        "array": (build_program(fake, bump, (FakeArray(SHAPE, np.uint64),)), (FakeArray(SHAPE, np.uint64),)),
    }


def _time_ns(fn: Callable[[], Any], *, runs: int, drain: Callable[[], None], before: Callable[[], Any] | None = None) -> float:
    """Median ns per call, pipelined as on the GPU bench (``bench._timing.time_host_pipelined``)."""
    stats = time_host_pipelined(fn, runs=runs, warmup=min(runs, 200), drain=drain, before=before)
    return float(stats["median_us"]) * 1e3


def _calls_per_call(fake: Any, fn: Callable[[], Any], before: Callable[[], Any] | None, *, batches: int = 8, every: int = 64) -> dict[str, float]:
    """Average fake CUDA calls per ``fn()`` over ``batches`` drained batches (``before`` excluded)."""
    counts: dict[str, int] = {}
    for _ in range(batches):
        fake.current_stream.synchronize()
        for _ in range(every):
            if before is not None:
                before()
            for call in fake.calls(fn):
                counts[call[0]] = counts.get(call[0], 0) + 1
    fake.current_stream.synchronize()
    return {name: round(n / (batches * every), 2) for name, n in sorted(counts.items())}


def _operations(program: Any, inputs: tuple[Any, ...], stream: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]]:
    graph = program.cuda_graph
    pending: list[Any] = []

    def issue_copy() -> None:
        pending.append(program.copy_inputs_from(*inputs))

    def consume() -> None:
        if program._latest_copy is not None:
            program.replay_prepared(copy_handle=program._latest_copy)

    return {
        "graph_launch": (lambda: graph.launch(stream), None),
        "replay": (lambda: program.replay(*inputs), None),
        "replay_prepared": (lambda: program.replay_prepared(), consume),
        "replay_prepared_handle": (lambda: program.replay_prepared(copy_handle=pending.pop()), issue_copy),
        "copy_inputs_from": (lambda: program.copy_inputs_from(*inputs), None),
    }


def measure(runs: int = 20000, profile: str | None = None) -> dict[str, Any]:
    """Median host ns and fake CUDA calls per operation, for every workload."""
    from tests.helpers.fake_cupy import install

    fake = install()
    stream = fake.current_stream
    results: dict[str, Any] = {}
    for name, (program, inputs) in _workloads(fake).items():
        entry: dict[str, Any] = {}
        for op, (fn, before) in _operations(program, inputs, stream).items():
            entry[op] = {
                "median_ns": _time_ns(fn, runs=runs, drain=stream.synchronize, before=before),
                "cuda_calls_per_call": _calls_per_call(fake, fn, before),
            }
            if op == "copy_inputs_from":
                program.replay_prepared(copy_handle=program._latest_copy)
            if profile == op and name == "ciphertext":
                profiler = cProfile.Profile()
                for _ in range(runs):
                    if before is not None:
                        before()
                    profiler.runcall(fn)
                    if op == "copy_inputs_from":
                        stream.synchronize()
                stats = pstats.Stats(profiler)
                stats.sort_stats("tottime").print_stats(25)
        results[name] = entry
        program.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=positive_int, default=20000)
    parser.add_argument("--profile", default=None,
                        choices=("graph_launch", "replay", "replay_prepared", "replay_prepared_handle", "copy_inputs_from"),
                        help="cProfile this operation of the ciphertext workload")
    parser.add_argument("--import-torch", action="store_true", help="import torch first (it is then in sys.modules)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.import_torch:
        import torch  # noqa: F401

    results = measure(args.runs, args.profile)
    for name, entry in results.items():
        print(f"{name}:")
        for op, row in entry.items():
            calls = row["cuda_calls_per_call"]
            listed = " ".join(f"{name}x{n:g}" for name, n in calls.items())
            print(f"  {op:24s} {row['median_ns'] / 1000:7.2f} us  {sum(calls.values()):5.2f} CUDA calls: {listed}")
    if args.json:
        emit_json(results, args.json, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
