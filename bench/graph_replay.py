"""Host overhead and device time of CudaGraphProgram replay, against the bare Graph.launch.

Questions answered (design target: ``replay()`` for one ciphertext input should add
well under 20 µs of host time over ``Graph.launch``, ``replay_prepared()`` under 8 µs):

* host cost of issuing ``graph.launch(stream)``, ``program.replay(x)``,
  ``program.replay_prepared()`` and ``program.replay_prepared(copy_handle=h)`` (the copy
  issued untimed just before), each timed per call with ``perf_counter`` and *no*
  synchronize; the queue is drained, untimed, every ``--sync-every`` calls so it never
  fills (a full launch queue would make the host wait and hide the real cost);
* device time per replay and per bare launch (CUDA events around each);
* eager host time of the same Python function, for scale.

Workloads: a synthetic 300-kernel graph (RawKernel on 4096 elements, ping-pong between
two arrays, as in the design notes' measurement) and a single-array "ciphertext" input
(``--ct-shape``, uint64) with one element-wise kernel, where the input copy dominates.
``bench_program(program, inputs, ...)`` is reusable for other programs (the matvec).

Run on a GPU: ``python bench/graph_replay.py --json "$OUT/graph_replay.json"``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu, non_negative_int, positive_int  # noqa: E402

__all__ = ["bench_program", "ciphertext_program", "main", "synthetic_program", "torch_stream_host"]

_STEP = r"""
extern "C" __global__ void step_f32(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] * 0.5f + 1.0f;
    }
}
"""


def _device_us(fn: Callable[[], Any], *, runs: int, warmup: int, stream: Any) -> dict[str, Any]:
    """CUDA-event device time of ``fn()`` on ``stream`` (bench._timing), in microseconds."""
    from bench._timing import time_device_cupy

    stats = time_device_cupy(fn, runs=runs, warmup=warmup, stream=stream)
    return {"runs": runs, "median_us": stats["median_ms"] * 1e3, "min_us": stats["min_ms"] * 1e3,
            "max_us": stats["max_ms"] * 1e3}


def bench_program(
    program: Any,
    inputs: Sequence[Any],
    *,
    function: Callable[..., Any] | None = None,
    runs: int = 2000,
    warmup: int = 100,
    device_runs: int = 200,
    sync_every: int = 64,
) -> dict[str, Any]:
    """Measure one captured program; ``inputs`` are replay sources matching its signature.

    Host timings are taken on CuPy's current stream; ``function`` (optional) is timed
    eagerly on ``inputs`` for comparison. Returns a JSON-ready dict (µs).
    """
    import cupy

    stream = cupy.cuda.get_current_stream()
    graph = program.cuda_graph
    sync = stream.synchronize
    inputs = tuple(inputs)
    from bench._timing import time_host_pipelined as _host_us

    common = {"runs": runs, "warmup": warmup, "drain": sync, "every": sync_every}
    result: dict[str, Any] = {
        "input_nbytes": program.input_nbytes,
        "stats": {k: getattr(program.stats, k) for k in program.stats.__dataclass_fields__},
    }
    result["host_graph_launch"] = _host_us(lambda: graph.launch(stream), **common)
    result["host_replay"] = _host_us(lambda: program.replay(*inputs), **common)
    result["host_replay_prepared"] = _host_us(lambda: program.replay_prepared(), **common)
    pending: list[Any] = []

    def issue_copy() -> None:
        pending.append(program.copy_inputs_from(*inputs))

    result["host_replay_prepared_with_handle"] = _host_us(lambda: program.replay_prepared(copy_handle=pending.pop()), before=issue_copy, **common)
    result["host_copy_inputs_from"] = _host_us(lambda: program.copy_inputs_from(*inputs), **common)
    program.replay_prepared(copy_handle=program.copy_inputs_from(*inputs), synchronize=True)  # consume the last handle
    launch = result["host_graph_launch"]["median_us"]
    result["overhead_replay_us"] = result["host_replay"]["median_us"] - launch
    result["overhead_replay_prepared_us"] = result["host_replay_prepared"]["median_us"] - launch
    result["overhead_replay_prepared_with_handle_us"] = result["host_replay_prepared_with_handle"]["median_us"] - launch
    result["targets_us"] = {"replay": 20.0, "replay_prepared": 8.0}
    result["device_replay"] = _device_us(lambda: program.replay(*inputs), runs=device_runs, warmup=10, stream=stream)
    result["device_graph_launch"] = _device_us(lambda: graph.launch(stream), runs=device_runs, warmup=10, stream=stream)
    if function is not None:
        result["host_eager_synchronized"] = _host_us(lambda: (function(*inputs), sync()), runs=max(20, runs // 20), warmup=5, drain=sync, every=sync_every)
    return result


def torch_stream_host(program: Any, inputs: Sequence[Any], *, runs: int = 2000, warmup: int = 100,
                      sync_every: int = 64) -> dict[str, Any] | None:
    """Host time of ``replay()`` and ``replay_prepared()`` with a torch stream current (``with
    torch.cuda.stream(s):``, FHElium's torch API), where the runtime replays on torch's current
    stream through its cached CuPy view; None without a CUDA torch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from bench._timing import time_host_pipelined as _host_us

    side = torch.cuda.Stream()
    common = {"runs": runs, "warmup": warmup, "drain": side.synchronize, "every": sync_every}
    inputs = tuple(inputs)
    with torch.cuda.stream(side):
        return {"host_replay": _host_us(lambda: program.replay(*inputs), **common),
                "host_replay_prepared": _host_us(lambda: program.replay_prepared(), **common)}


def synthetic_program(kernels: int = 300, n: int = 4096) -> tuple[Any, tuple[Any, ...], Callable[..., Any]]:
    """A graph of ``kernels`` RawKernel launches on ``n`` float32 elements, one array input."""
    import cupy
    import numpy as np

    from fhelium_cupy.runtime import CudaGraphProgram

    step = cupy.RawKernel(_STEP, "step_f32")
    grid, block = ((n + 255) // 256,), (256,)

    def chain(x: Any) -> Any:
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        step(grid, block, (x, a, np.int64(n)))
        for _ in range(kernels - 1):
            step(grid, block, (a, b, np.int64(n)))
            a, b = b, a
        return a

    source = cupy.ones(n, dtype=cupy.float32)
    return CudaGraphProgram.capture(chain, example_inputs=(source,)), (cupy.full(n, 2.0, dtype=cupy.float32),), chain


def ciphertext_program(shape: tuple[int, ...] = (2, 8, 16384)) -> tuple[Any, tuple[Any, ...], Callable[..., Any]]:
    """One uint64 array of ciphertext size in, one element-wise kernel: the copy dominates."""
    import cupy

    from fhelium_cupy.runtime import CudaGraphProgram

    def bump(x: Any) -> Any:
        return x + cupy.uint64(1)

    source = cupy.zeros(shape, dtype=cupy.uint64)
    return CudaGraphProgram.capture(bump, example_inputs=(source,)), (cupy.ones(shape, dtype=cupy.uint64),), bump


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--runs", type=positive_int, default=2000)
    parser.add_argument("--warmup", type=non_negative_int, default=100)
    parser.add_argument("--kernels", type=int, default=300)
    parser.add_argument("--ct-shape", default="2,8,16384", help="ciphertext-like input shape (uint64)")
    parser.add_argument("--sync-every", type=int, default=64, help="drain the queue (untimed) every this many calls")
    args = parser.parse_args(argv)
    exit_without_gpu("bench/graph_replay.py")

    import cupy

    results: dict[str, Any] = {"cupy": cupy.__version__, "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    program, inputs, function = synthetic_program(args.kernels)
    results["synthetic"] = {"kernels": args.kernels, **bench_program(program, inputs, function=function, runs=args.runs, warmup=args.warmup, sync_every=args.sync_every)}
    program.close()
    shape = tuple(int(s) for s in args.ct_shape.split(",") if s)
    program, inputs, function = ciphertext_program(shape)
    results["ciphertext"] = {"shape": shape, **bench_program(program, inputs, function=function, runs=args.runs, warmup=args.warmup, sync_every=args.sync_every)}
    results["ciphertext_torch_stream"] = torch_stream_host(program, inputs, runs=args.runs, warmup=args.warmup,
                                                           sync_every=args.sync_every)
    # the same ciphertext program fed from pinned host memory (H2D in the replay)
    from fhelium_cupy.runtime import pin_value_tree

    pinned = (pin_value_tree(cupy.asnumpy(inputs[0])),)
    results["ciphertext_pinned_source"] = {"shape": shape, **bench_program(program, pinned, runs=max(200, args.runs // 10), warmup=20, sync_every=args.sync_every)}
    program.close()
    from bench._report import emit_json

    emit_json(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
