"""Where ``replay(ct)``'s host time goes: example 18's program (8x8 matvec, N=2^14,
``hoisted=False``) and each step of its replay path timed alone, issued back to back
(``time_host_pipelined``: the stream drained every 8 calls, untimed; 512 runs after 32
warmups, medians in us), with ``replay()`` and ``replay_prepared()`` whole beside them and a
Python loop (``host_loop_us``) for the vCPU's speed. Steps: the compiled signature check
(``_collect``), the caller's-stream lookup, the input copy's ``cudaMemcpyAsync`` calls
(``_enqueue_copies``), ``Graph.launch``, the replay-complete event (``_record``) and the
borrowed output (``_borrow``). Three rounds alternated in one process.

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s20/replay_steps.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, example18  # noqa: E402
from bench._timing import host_loop_us, time_host_pipelined  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402


def main() -> None:
    _, _, ct, fn, _ = example18()
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    stream = cupy.cuda.get_current_stream()
    sptr = stream.ptr
    leaves = program._collect((ct,))
    steps = {
        "replay()": lambda: program.replay(ct),
        "replay_prepared()": program.replay_prepared,
        "_collect": lambda: program._collect((ct,)),
        "_current_stream": program._current_stream,
        "_enqueue_copies": lambda: program._enqueue_copies(leaves, sptr, program._memcpy_async),
        "Graph.launch": lambda: program._launch(stream),
        "_record": lambda: program._record(stream, leaves),
        "_borrow": program._borrow,
    }

    def measure(name: str) -> float:
        if name == "host loop":
            return host_loop_us()
        return time_host_pipelined(steps[name], runs=512, warmup=32, drain=stream.synchronize, every=8)["median_us"]

    alternate(list(steps) + ["host loop"], 3, measure, digits=2)
    program.close()


if __name__ == "__main__":
    main()
