"""Host time of every CudaGraphProgram replay entry point for one CKKS Ciphertext input (GPU).

Issue #5 targets (H200): ``replay(ct)`` under 20 µs and ``replay_prepared()`` under 8 µs
of host time, for a program whose single input and output are ``Ciphertext`` values
(data uint64 [2, 8, 16384] with the default preset).

Programs: ``add`` (``engine.add(ct, ct)``, a short graph) and ``matvec`` (the encrypted
matrix-vector product of ``bench/matvec.py``, size ``--matvec-size``). For each one:

* ``warm``: median host µs per call of ``Graph.launch``, ``replay(ct)``,
  ``replay_prepared()``, ``replay_prepared(copy_handle=h)`` (copy issued untimed just
  before) and ``copy_inputs_from(ct)``; no synchronize in the timed region, the queue is
  drained untimed every ``--sync-every`` calls (as ``bench/graph_replay.py``);
* ``cold``: ``replay(ct)``, ``replay_prepared(copy_handle=h)`` (copy on a transfer
  stream) and ``Graph.launch`` with the device drained before every sample (as
  ``bench/matvec.py`` and ``fhelium-cupy bench`` measure);
* ``parts``: the pieces of one replay timed alone (compiled input check, stream lookup,
  ``getDevice``, the input copy, ``Event.record``, ``Event.done``, the borrowed output);
* ``checks``: the graph output equals eager evaluation bit for bit, a mismatching input
  raises ``CudaGraphInputError``, and the borrowed Ciphertext output is one shared object.

Every measurement is guarded: a failure is recorded as ``{"error": ...}`` and the rest
still runs; the JSON is written even when a program fails.

Run (repo root): ``PYTHONPATH=$PWD python bench/replay_host_breakdown.py --json "$OUT/replay_host_breakdown.json"``.
``--fake`` runs the same measurement code on the CPU with ``tests.helpers.fake_cupy``
(no engine, no capture) to check the script itself.
"""

from __future__ import annotations

import argparse
import functools
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import emit_json, exit_without_gpu, non_negative_int, positive_int  # noqa: E402  (after the sys.path entry above)
from bench._timing import summarize_us  # noqa: E402
from bench._timing import time_host_pipelined as _warm_us  # noqa: E402

__all__ = ["main", "measure_program"]

TARGETS_US = {"replay": 20.0, "replay_prepared": 8.0}


def _cold_us(fn: Callable[[], Any], *, runs: int, warmup: int, drain: Callable[[], None], before: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Per-call host µs with the device drained before every sample."""
    samples = []
    clock = time.perf_counter
    for i in range(warmup + runs):
        if before is not None:
            before()
        drain()
        start = clock()
        fn()
        elapsed = clock() - start
        drain()
        if i >= warmup:
            samples.append(elapsed * 1e6)
    return summarize_us(samples)


def _guarded(results: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    try:
        results[name] = fn()
    except Exception as error:  # one failed measurement must not end the run
        results[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=6)}


def measure_program(program: Any, ct: Any, cupy: Any, *, runs: int, warmup: int, sync_every: int, cold_runs: int) -> dict[str, Any]:
    """Warm, cold and per-part host timings of one captured program fed ``ct``."""

    stream = cupy.cuda.get_current_stream()
    drain = stream.synchronize
    graph = program.cuda_graph
    out: dict[str, Any] = {"input_nbytes": program.input_nbytes}
    pending: list[Any] = []

    def issue_copy() -> None:
        pending.append(program.copy_inputs_from(ct))

    def consume_latest() -> None:  # replay_prepared() without a handle needs no copy outstanding
        if program._latest_copy is not None:
            program.replay_prepared(copy_handle=program._latest_copy)

    def settle() -> None:
        consume_latest()
        pending.clear()
        drain()

    warm: dict[str, Any] = {}
    common: dict[str, Any] = {"runs": runs, "warmup": warmup, "drain": drain, "every": sync_every}
    _guarded(warm, "graph_launch", lambda: _warm_us(lambda: graph.launch(stream), **common))
    settle()
    _guarded(warm, "replay", lambda: _warm_us(lambda: program.replay(ct), **common))
    settle()
    _guarded(warm, "replay_prepared", lambda: _warm_us(lambda: program.replay_prepared(), before=consume_latest, **common))
    settle()
    _guarded(warm, "replay_prepared_handle", lambda: _warm_us(lambda: program.replay_prepared(copy_handle=pending.pop()), before=issue_copy, **common))
    settle()
    _guarded(warm, "copy_inputs_from", lambda: _warm_us(lambda: program.copy_inputs_from(ct), **common))
    settle()
    out["warm"] = warm

    cold: dict[str, Any] = {}
    transfer = cupy.cuda.Stream(non_blocking=True)

    def issue_transfer_copy() -> None:
        pending.append(program.copy_inputs_from(ct, stream=transfer))

    cold_common: dict[str, Any] = {"runs": cold_runs, "warmup": min(warmup, 20), "drain": lambda: (transfer.synchronize(), drain())}
    _guarded(cold, "graph_launch", lambda: _cold_us(lambda: graph.launch(stream), **cold_common))
    settle()
    _guarded(cold, "replay", lambda: _cold_us(lambda: program.replay(ct), **cold_common))
    settle()
    _guarded(cold, "replay_prepared_handle", lambda: _cold_us(lambda: program.replay_prepared(copy_handle=pending.pop()), before=issue_transfer_copy, **cold_common))
    settle()
    out["cold"] = cold

    parts: dict[str, Any] = {}
    runtime = cupy.cuda.runtime
    leaves = program._collect((ct,))

    def copy_inputs() -> None:  # exactly the copies replay() issues
        program._buffer._enqueue_copies(leaves, stream.ptr, runtime.memcpyAsync)

    event = cupy.cuda.Event(block=False, disable_timing=True)
    _guarded(parts, "validate_collect", lambda: _warm_us(lambda: program._collect((ct,)), **common))
    _guarded(parts, "current_stream", lambda: _warm_us(program._current_stream, **common))
    _guarded(parts, "get_device", lambda: _warm_us(runtime.getDevice, **common))
    _guarded(parts, "input_copy", lambda: _warm_us(copy_inputs, **common))
    _guarded(parts, "event_record", lambda: _warm_us(lambda: event.record(stream), **common))
    _guarded(parts, "event_done", lambda: _warm_us(lambda: event.done, **common))
    _guarded(parts, "borrowed_output", lambda: _warm_us(lambda: program.output, **common))
    settle()
    # the same raw CUDA calls with the device drained first: tells a driver effect on an idle
    # GPU (the cold replay of a long graph) from the library's own Python work
    _guarded(cold, "raw_input_copy", lambda: _cold_us(copy_inputs, **cold_common))
    _guarded(cold, "raw_copy_then_launch", lambda: _cold_us(lambda: (copy_inputs(), graph.launch(stream)), **cold_common))
    settle()
    out["parts"] = parts

    medians = {k: v.get("median_us") for k, v in warm.items()}
    launch = medians.get("graph_launch")
    if isinstance(launch, float):
        out["overhead_over_launch_us"] = {k: v - launch for k, v in medians.items() if isinstance(v, float) and k != "graph_launch"}
    out["meets_targets"] = {
        name: isinstance(medians.get(name), float) and medians[name] < target for name, target in TARGETS_US.items()
    }
    return out


def _checks(program: Any, ct: Any, other: Any, eager: Callable[[Any], Any] | None, cupy: Any) -> dict[str, Any]:
    from fhelium_cupy.errors import CudaGraphInputError

    checks: dict[str, Any] = {}

    def bit_exact() -> bool:
        owned = program.replay(ct, copy_output=True, synchronize=True)
        return bool(cupy.array_equal(owned.data, eager(ct).data))  # type: ignore[misc]

    def rejects_mismatch() -> bool:
        try:
            program.replay(other)
        except CudaGraphInputError:
            return True
        return False

    def shared_output() -> bool:
        first = program.replay(ct)
        return first is program.replay_prepared() is program.output

    if eager is not None:
        _guarded(checks, "output_equals_eager", bit_exact)
    if other is not None:
        _guarded(checks, "mismatch_rejected", rejects_mismatch)
    _guarded(checks, "borrowed_output_shared", shared_output)
    cupy.cuda.get_current_stream().synchronize()
    return checks


def _twice(op: Callable[[Any, Any], Any], x: Any) -> Any:
    return op(x, x)


def _run_gpu(args: argparse.Namespace, results: dict[str, Any]) -> None:
    import cupy
    import numpy as np

    from fhelium_cupy.ckks import CkksEngine
    from fhelium_cupy.runtime import CudaGraphProgram

    results["cupy"] = cupy.__version__
    results["device"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    engine = CkksEngine(args.preset, device="cuda", insecure=args.insecure)
    rng = np.random.default_rng(5)
    slots = int(engine.num_slots)
    ct = engine.encrypt_message(rng.uniform(-1, 1, slots))
    other = engine.encrypt_message(rng.uniform(-1, 1, slots), level=1)  # another level: must be rejected
    results["ciphertext"] = {"shape": list(ct.data.shape), "dtype": str(ct.data.dtype), "level": ct.level}
    timing = {"runs": args.runs, "warmup": args.warmup, "sync_every": args.sync_every, "cold_runs": args.cold_runs}
    programs = [p for p in args.programs.split(",") if p]

    for name in programs:
        entry: dict[str, Any] = {}
        results["programs"][name] = entry
        program = None
        function: Callable[[Any], Any]
        try:
            if name == "add":
                function = functools.partial(_twice, engine.add)
            elif name == "matvec":
                from fhelium_cupy._demo import MatvecWorkload

                workload = MatvecWorkload.build(
                    preset=args.preset, device="cuda", size=args.matvec_size, insecure=args.insecure,
                    engine=engine, show_progress=False,
                )
                function = workload.schedule
                entry["matvec"] = {"size": args.matvec_size, "method": workload.method}
            else:
                raise ValueError(f"unknown program {name!r} (choose add, matvec)")
            start = time.perf_counter()
            program = CudaGraphProgram.capture(function, example_inputs=(ct,))
            entry["capture_total_s"] = time.perf_counter() - start
            entry["checks"] = _checks(program, ct, other, function, cupy)
            entry.update(measure_program(program, ct, cupy, **timing))
        except Exception as error:
            entry["error"] = f"{type(error).__name__}: {error}"
            entry["traceback"] = traceback.format_exc(limit=8)
        finally:
            if program is not None:
                try:
                    program.close()
                except Exception as error:
                    entry["close_error"] = f"{type(error).__name__}: {error}"


def _run_fake(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """The measurement code on the CPU: fake CuPy, a fake graph, a Ciphertext around a fake array."""
    import numpy as np

    from fhelium_cupy.ckks.values import Ciphertext
    from tests.helpers.fake_cupy import FakeArray, build_program, install

    fake = install()
    results["device"] = "fake (CPU)"

    def ciphertext(level: int = 0) -> Ciphertext:
        return Ciphertext(FakeArray((2, 8, 16384), np.uint64), level=level, scale=2.0**40, prime_ids=tuple(range(8)),
                          context_id="ctx", key_id="key")

    def add(x: Ciphertext) -> Ciphertext:
        return x._with_data(FakeArray(x.data.shape, x.data.dtype))

    entry: dict[str, Any] = {}
    results["programs"]["add"] = entry
    program = build_program(fake, add, (ciphertext(),))
    try:
        ct = ciphertext()
        entry["checks"] = _checks(program, ct, ciphertext(level=1), None, fake)
        entry.update(measure_program(program, ct, fake, runs=args.runs, warmup=args.warmup, sync_every=args.sync_every, cold_runs=args.cold_runs))
    finally:
        program.close()


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except Exception:
        return None


def _print_table(results: dict[str, Any]) -> None:
    for name, entry in results.get("programs", {}).items():
        print(f"{name}:")
        for mode in ("warm", "cold", "parts"):
            for op, row in entry.get(mode, {}).items():
                value = row.get("median_us")
                shown = f"{value:8.2f} us" if isinstance(value, float) else f"  {row.get('error')}"
                print(f"  {mode:5s} {op:24s} {shown}")
        if "checks" in entry:
            print(f"  checks {entry['checks']}")
        if "error" in entry:
            print(f"  error {entry['error']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--preset", default="slots8192-scale40-depth7")
    parser.add_argument("--insecure", action="store_true", help="allow the preset's insecure test parameters")
    parser.add_argument("--programs", default="add,matvec", help="comma-separated: add, matvec")
    parser.add_argument("--matvec-size", type=int, default=8)
    parser.add_argument("--runs", type=positive_int, default=2000)
    parser.add_argument("--warmup", type=non_negative_int, default=100)
    parser.add_argument("--sync-every", type=int, default=64)
    parser.add_argument("--cold-runs", type=int, default=300)
    parser.add_argument("--fake", action="store_true", help="check the script on the CPU with a fake CuPy")
    args = parser.parse_args(argv)
    if not args.fake:
        exit_without_gpu("bench/replay_host_breakdown.py")

    results: dict[str, Any] = {
        "python": platform.python_version(),
        "commit": _git_commit(),
        "targets_us": TARGETS_US,
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "programs": {},
    }
    try:
        (_run_fake if args.fake else _run_gpu)(args, results)
    except Exception as error:
        results["error"] = f"{type(error).__name__}: {error}"
        results["traceback"] = traceback.format_exc(limit=8)
    finally:
        emit_json(results, args.json, echo=False)
        _print_table(results)
        if "error" in results:
            print(f"error: {results['error']}\n{results.get('traceback', '')}")
    return 0 if "error" not in results else 1


if __name__ == "__main__":
    raise SystemExit(main())
