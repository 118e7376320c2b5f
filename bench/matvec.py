"""Encrypted matrix-vector product: eager vs our CuPy graph replay vs torch.cuda.graph, one process.

For each matrix size n (cyclic-diagonal schedule, n-1 rotations, one plaintext multiply,
one rescale) at one preset:

* eager: end-to-end latency (host clock, synchronized) and device time (CUDA events);
  kernel launches per call when the backend counts them;
* graph (``CudaGraphProgram``): capture stats; replay latency and device time; host
  overhead of ``replay()`` and of ``replay_prepared()`` (host clock, no synchronize);
  the eager / replay ratio measured paired, round by round, beside a pure-Python loop's time
  (the eager call is host-bound, and the CPU's speed changes: ``bench._timing``);
  graph-private scratch vs the eager peak working set;
* torch graph: the same Python schedule captured with ``torch.cuda.graph`` on torch's
  stream (CuPy launching on it, temporaries from a private arena), inputs staged through
  the same ``ReusableValueBuffer``; skipped with the reason when torch has no CUDA or
  capture fails;
* pool sharing (once per preset): 8 programs in one ``CudaGraphPool`` vs 8 standalone.

On a CPU machine only the eager rows run (NumPy engine); the others record why not.
Run: ``python bench/matvec.py --device cpu --preset test-n4096-scale40 --insecure --sizes 4``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import emit_json, exit_without_gpu, non_negative_int, positive_int, size_list
from bench._timing import (
    cuda_sync,
    host_loop_us,
    paired_ratio,
    time_device_cupy,
    time_device_torch,
    time_host,
)
from fhelium_cupy._demo import MatvecWorkload, launch_counter

__all__ = ["bench_matvec_size", "bench_pool_sharing", "bench_variant_size", "main"]

POOL_PROGRAMS = 8
PAIRED_ROUNDS = 6  # eager / replay ratio rounds (bench._timing.paired_ratio)


def _device_used_bytes() -> int | None:
    try:
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        return int(total - free)
    except Exception:
        return None


def _settle() -> None:
    """Collect garbage, drain the device and return CuPy's unused cached blocks to the driver.

    Safe: graph memory lives in private arenas, never in CuPy's default pool,
    and blocks still in use are not freed. Makes device-memory deltas comparable.
    """
    gc.collect()
    cuda_sync()
    try:
        import cupy

        if cupy.cuda.is_available():
            cupy.get_default_memory_pool().free_all_blocks()
    except Exception:
        pass


def _launches_per_call(workload: MatvecWorkload, fn) -> int | None:
    counter = launch_counter(workload.engine)
    before = counter()
    if before is None:
        return None
    fn()
    workload.synchronize()
    after = counter()
    return None if after is None else after - before


def _eager_memory(workload: MatvecWorkload, source: Any) -> dict[str, int | None]:
    """One eager call (temporaries + output) through a fresh CuPy MemoryPool:
    ``eager_peak_bytes``, the bytes the pool reserved (the sizes it asked ``cudaMalloc`` for),
    and ``eager_device_bytes``, the device memory those allocations took (``cudaMemGetInfo``
    before and after: the driver rounds every allocation up to 2 MiB, measured on the H200,
    ``2026-11-30-s17/arena/arena.log``). The graph arena's chunks are 2 MiB multiples, so its
    reserved bytes are its device memory: ``eager_device_bytes`` is the like-for-like
    comparison."""
    if workload.device != "cuda":
        return {"eager_peak_bytes": None, "eager_device_bytes": None}
    import cupy

    pool = cupy.cuda.MemoryPool()
    cupy.cuda.Device().synchronize()
    free_before = cupy.cuda.runtime.memGetInfo()[0]
    with cupy.cuda.using_allocator(pool.malloc):
        out = workload.schedule(source)
        cupy.cuda.get_current_stream().synchronize()
        peak = int(pool.total_bytes())
    device = free_before - cupy.cuda.runtime.memGetInfo()[0]
    del out
    gc.collect()
    pool.free_all_blocks()
    return {"eager_peak_bytes": peak, "eager_device_bytes": int(device)}


def _graph_variant(workload: MatvecWorkload, source: Any, *, runs: int, warmup: int) -> dict[str, Any]:
    import cupy

    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    result: dict[str, Any] = {}
    _settle()
    used_before = _device_used_bytes()
    start = time.perf_counter()
    program = CudaGraphProgram.capture(workload.schedule, example_inputs=(source,))
    try:
        result["capture_total_s"] = time.perf_counter() - start
        _settle()
        used_after = _device_used_bytes()
        stats = program.stats
        arena = getattr(program, "_arena", None)
        result["stats"] = {
            "warmup_iterations": stats.warmup_iterations,
            "warmup_seconds": stats.warmup_seconds,
            "capture_seconds": stats.capture_seconds,
            "first_replay_seconds": stats.first_replay_seconds,
            "memory_allocated_bytes": stats.memory_allocated_bytes,
            "memory_reserved_bytes": stats.memory_reserved_bytes,
        }
        result["memory"] = {
            "arena_reserved_bytes": getattr(arena, "reserved_bytes", None),
            "arena_peak_bytes": getattr(arena, "peak_bytes", None),
            "input_nbytes": program.input_nbytes,
            "device_used_delta_bytes": None if used_before is None or used_after is None else used_after - used_before,
        }
        x, ciphertext = workload.new_input()
        out = program.replay(ciphertext, copy_output=True, synchronize=True)
        result["max_abs_error"] = workload.max_error(x, out)
        del out
        sync = workload.synchronize
        result["latency"] = time_host(lambda: program.replay(ciphertext), runs=runs, warmup=warmup, synchronize=sync)
        result["device"] = time_device_cupy(lambda: program.replay(ciphertext), runs=runs, warmup=warmup)
        result["host_loop_us"] = host_loop_us()  # the CPU's speed beside the host-overhead rows
        result["host_replay"] = time_host(lambda: program.replay(ciphertext), runs=runs, warmup=warmup,
                                          synchronize=sync, sync_inside=False)
        # eager / replay side by side, with the CPU's speed beside each round (the eager call is host-bound)
        result["paired"] = paired_ratio(lambda: workload.schedule(ciphertext), lambda: program.replay(ciphertext),
                                        rounds=PAIRED_ROUNDS, runs=max(3, runs // 2), synchronize=sync)
        # replay_prepared: the copy is issued (untimed) on a transfer stream before each sample
        transfer = cupy.cuda.Stream(non_blocking=True)
        handles = []

        def prepared_copy() -> None:
            handles.append(program.copy_inputs_from(ciphertext, stream=transfer))
            transfer.synchronize()

        result["host_replay_prepared"] = time_host(lambda: program.replay_prepared(copy_handle=handles.pop()),
                                                   runs=runs, warmup=warmup, synchronize=sync, sync_inside=False,
                                                   before=prepared_copy)
        # the program's bare graph launch on the same stream (Graph.launch, or its RootedGraph's
        # where the captured graph has several roots): replay overhead = host_replay - host_graph_launch
        launch_graph = program._launch
        result["host_graph_launch"] = time_host(lambda: launch_graph(cupy.cuda.get_current_stream()), runs=runs,
                                                warmup=warmup, synchronize=sync, sync_inside=False)
        result["graph_roots_wrapped"] = program._rooted is not None
        counter = launch_counter(workload.engine)
        before = counter()
        program.replay(ciphertext, synchronize=True)
        after = counter()
        result["launches_per_replay"] = None if before is None else after - before  # 0 expected: no Python launches
    finally:
        program.close()
    return result


def _torch_graph_variant(workload: MatvecWorkload, source: Any, *, runs: int, warmup: int) -> dict[str, Any]:
    """Capture the same schedule with ``torch.cuda.graph``; inputs staged like ours."""
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"skipped": f"torch {torch.__version__} has no CUDA device"}
    import cupy

    from fhelium_cupy.interop.devices import as_device
    from fhelium_cupy.runtime.arena import GraphArena
    from fhelium_cupy.runtime.buffer import ReusableValueBuffer

    device = as_device("cuda")
    buffer = ReusableValueBuffer.like(source, device=device)
    arena = GraphArena(device)
    graph = torch.cuda.CUDAGraph()
    stage = "warmup"
    result: dict[str, Any] = {"torch": torch.__version__, "capture_error_mode": "relaxed"}
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        t0 = time.perf_counter()
        with torch.cuda.stream(side), cupy.cuda.ExternalStream(side.cuda_stream):
            for _ in range(3):
                workload.schedule(buffer.value)
        side.synchronize()
        t1 = time.perf_counter()
        stage = "capture"
        # relaxed: CuPy may cudaMalloc a new arena chunk mid-capture, which "global" forbids
        with torch.cuda.graph(graph, capture_error_mode="relaxed"):
            capture_stream = torch.cuda.current_stream()
            with cupy.cuda.ExternalStream(capture_stream.cuda_stream), cupy.cuda.using_allocator(arena.malloc):
                static_out = workload.schedule(buffer.value)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        result.update(warmup_seconds=t1 - t0, capture_seconds=t2 - t1, arena_reserved_bytes=arena.reserved_bytes)
        stage = "replay"
        stream = torch.cuda.current_stream()

        def replay(ct: Any) -> Any:
            buffer.copy_from(ct, stream=stream)
            graph.replay()
            return static_out

        x, ciphertext = workload.new_input()
        replay(ciphertext)
        torch.cuda.synchronize()
        result["max_abs_error"] = workload.max_error(x, static_out)
        result["latency"] = time_host(lambda: replay(ciphertext), runs=runs, warmup=warmup, synchronize=torch.cuda.synchronize)
        result["device"] = time_device_torch(lambda: replay(ciphertext), runs=runs, warmup=warmup, stream=stream)
        result["host_replay"] = time_host(lambda: replay(ciphertext), runs=runs, warmup=warmup,
                                          synchronize=torch.cuda.synchronize, sync_inside=False)
    except Exception as error:  # recorded, never fatal: this is the comparison, not our product
        result = {"skipped": f"torch.cuda.graph {stage} failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}"}
    finally:
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
            graph.reset()  # release the graph before the arena it writes to
        with contextlib.suppress(Exception):
            buffer.close()
            arena.close()
    return result


def _eager_entry(workload: MatvecWorkload, *, runs: int, warmup: int) -> tuple[dict[str, Any], Any]:
    """The measurements every evaluator shares: accuracy, launches and eager latency."""
    entry: dict[str, Any] = {"size": workload.size, "rotation_keys": len(workload.rotation_keys)}
    x, source = workload.new_input()
    out = workload.schedule(source)
    workload.synchronize()
    entry["max_abs_error"] = workload.max_error(x, out)
    del out
    entry["launches_per_call"] = _launches_per_call(workload, lambda: workload.schedule(source))
    before = host_loop_us()
    latency = time_host(lambda: workload.schedule(source), runs=runs, warmup=warmup, synchronize=workload.synchronize)
    entry["eager"] = {"latency": latency, "host_loop_us": [before, host_loop_us()]}
    return entry, source


def bench_matvec_size(
    workload: MatvecWorkload, *, runs: int, warmup: int, torch_graph: bool = True
) -> dict[str, Any]:
    """All measurements for one workload (one preset, one size)."""
    entry, source = _eager_entry(workload, runs=runs, warmup=warmup)
    entry["keygen_seconds"] = workload.keygen_seconds
    sync = workload.synchronize
    if workload.device != "cuda":
        reason = "CUDA Graph capture needs a CUDA GPU (this run used the CPU engine)"
        entry["eager"]["device"] = None
        entry["graph"] = {"skipped": reason}
        entry["torch_graph"] = {"skipped": reason}
        entry["memory"] = {"eager_peak_bytes": None, "eager_device_bytes": None}
        return entry
    entry["eager"]["device"] = time_device_cupy(lambda: workload.schedule(source), runs=runs, warmup=warmup)
    entry["eager"]["host_issue"] = time_host(lambda: workload.schedule(source), runs=max(3, runs // 2), warmup=0,
                                             synchronize=sync, sync_inside=False)
    entry["memory"] = _eager_memory(workload, source)
    try:
        entry["graph"] = _graph_variant(workload, source, runs=runs, warmup=warmup)
    except Exception as error:
        cuda_sync()
        entry["graph"] = {"skipped": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}
    entry["torch_graph"] = (
        _torch_graph_variant(workload, source, runs=runs, warmup=warmup) if torch_graph else {"skipped": "--no-torch"}
    )
    _settle()
    return entry


def bench_variant_size(workload: MatvecWorkload, *, runs: int, warmup: int) -> dict[str, Any]:
    """Another evaluator (``hoisted`` or ``bsgs``): eager latency and, on CUDA, graph replay latency."""
    entry, source = _eager_entry(workload, runs=runs, warmup=warmup)
    entry["method"] = workload.method
    sync = workload.synchronize
    if workload.device != "cuda":
        entry["graph"] = {"skipped": "CUDA Graph capture needs a CUDA GPU (this run used the CPU engine)"}
        return entry
    entry["eager"]["device"] = time_device_cupy(lambda: workload.schedule(source), runs=runs, warmup=warmup)
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

    try:
        program = CudaGraphProgram.capture(workload.schedule, example_inputs=(source,))
    except Exception as error:
        cuda_sync()
        entry["graph"] = {"skipped": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}
        return entry
    try:
        x, ciphertext = workload.new_input()
        out = program.replay(ciphertext, copy_output=True, synchronize=True)
        entry["graph"] = {
            "max_abs_error": workload.max_error(x, out),
            "latency": time_host(lambda: program.replay(ciphertext), runs=runs, warmup=warmup, synchronize=sync),
            "device": time_device_cupy(lambda: program.replay(ciphertext), runs=runs, warmup=warmup),
        }
        del out
    finally:
        program.close()
    _settle()
    return entry


def bench_pool_sharing(workload: MatvecWorkload, *, programs: int = POOL_PROGRAMS) -> dict[str, Any]:
    """Device memory of ``programs`` captures of the schedule: standalone vs one CudaGraphPool."""
    if workload.device != "cuda":
        return {"skipped": "CudaGraphPool needs a CUDA GPU"}
    from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram
    from fhelium_cupy.runtime.pool import CudaGraphPool

    _, source = workload.new_input()
    result: dict[str, Any] = {"programs": programs, "size": workload.size}
    for mode in ("standalone", "pool"):
        _settle()
        before = _device_used_bytes()
        pool = CudaGraphPool("cuda") if mode == "pool" else None
        members = []
        try:
            for _ in range(programs):
                members.append(CudaGraphProgram.capture(workload.schedule, example_inputs=(source,), warmup=1, pool=pool))
            _settle()
            after = _device_used_bytes()
            # replay every member once, in reverse order, to show they all still work
            for program in reversed(members):
                program.replay(source)
            cuda_sync()
            scratch = (
                pool.scratch_reserved_bytes if pool is not None
                else sum(getattr(getattr(p, "_arena", None), "reserved_bytes", 0) or 0 for p in members)
            )
            result[mode] = {
                "device_used_delta_bytes": None if before is None or after is None else after - before,
                "scratch_reserved_bytes": scratch,
                "sum_stats_reserved_bytes": sum(p.stats.memory_reserved_bytes for p in members),
            }
        finally:
            for program in members:
                program.close()
            if pool is not None:
                pool.close()
            del members
    s, p = result["standalone"]["device_used_delta_bytes"], result["pool"]["device_used_delta_bytes"]
    result["saving_ratio"] = (s / p) if s and p else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--preset", default="slots8192-scale40-depth7")
    parser.add_argument("--sizes", type=size_list, default=(8, 16, 32))
    parser.add_argument("--runs", type=positive_int, default=20)
    parser.add_argument("--warmup", type=non_negative_int, default=3)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda":
        exit_without_gpu("bench/matvec.py")
    from fhelium_cupy.ckks import CkksEngine

    engine = CkksEngine(args.preset, device=args.device, insecure=args.insecure)
    rows = []
    for size in args.sizes:
        workload = MatvecWorkload.build(preset=args.preset, device=args.device, size=size, insecure=args.insecure, engine=engine)
        rows.append(bench_matvec_size(workload, runs=args.runs, warmup=args.warmup, torch_graph=not args.no_torch))
    emit_json(rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
