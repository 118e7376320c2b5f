"""Change 51 side by side: example 18's program (8x8 matvec, N=2^14, ``hoisted=False``) captured
twice in one process, with the input copy as a memcpy node of the graph (``nodes``: the code,
``runtime._input_nodes``) and with the ``cudaMemcpyAsync`` before the launch (``memcpy``:
``FHELIUM_CUPY_GRAPH_INPUT_NODES=0`` at its capture). Host us of ``replay(ct)`` issued back to
back (``time_host_pipelined``, drained every 8, 512 runs after 32 warmups) from one source, and
from two sources alternating (every replay points the node at a new address), with
``replay_prepared()`` beside them; device us of ``replay(ct)`` (CUDA events); four rounds
alternated; both programs' eager calls and replays checked equal to the eager call first
(``bench._example18.capture_checked``; it ran with its own copy of that check). A Python loop
(``host_loop_us``) gives the vCPU's speed.

Usage, from the repository root (pinned, as the other probes):
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s21/replay_nodes.py
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, capture_checked, example18  # noqa: E402
from bench._timing import device_median_us, host_loop_us, time_host_pipelined  # noqa: E402
from fhelium_cupy.runtime import _input_nodes  # noqa: E402


def main() -> None:
    engine, _, ct, fn, want = example18()
    other = engine.encrypt_message(np.zeros(engine.num_slots))  # a second source at another address
    def use(name: str) -> None:  # the switch is read at capture
        os.environ[_input_nodes.ENV_SWITCH] = "1" if name == "nodes" else "0"

    programs = capture_checked(["nodes", "memcpy"], use, lambda: os.environ.pop(_input_nodes.ENV_SWITCH, None),
                               fn, ct, want)
    assert programs["nodes"]._input_nodes is not None and programs["memcpy"]._input_nodes is None
    start = time.perf_counter()
    extra = _input_nodes.InputCopyGraph.build(programs["nodes"].cuda_graph, programs["nodes"]._buffer._copy_plan,
                                              programs["nodes"]._device_index)
    print(f"InputCopyGraph.build ({_input_nodes.InputCopyGraph.EXECUTABLES} executables): "
          f"{(time.perf_counter() - start) * 1e3:.2f} ms", flush=True)
    extra.close()
    stream = cupy.cuda.get_current_stream()

    def two_sources(program):
        sources = itertools.cycle((ct, other))
        return lambda: program.replay(next(sources))

    steps = {}
    for name, program in programs.items():
        steps[f"{name} replay()"] = (lambda p: lambda: p.replay(ct))(program)
        steps[f"{name} replay(), 2 sources"] = two_sources(program)
        steps[f"{name} replay_prepared()"] = program.replay_prepared

    def measure(name: str) -> float:
        if name == "host loop":
            return host_loop_us()
        if name.endswith("device us"):
            program = programs[name.split()[0]]
            return device_median_us(lambda: program.replay(ct), runs=40, warmup=3, stream=stream)
        return time_host_pipelined(steps[name], runs=512, warmup=32, drain=stream.synchronize, every=8)["median_us"]

    alternate(list(steps) + ["nodes device us", "memcpy device us", "host loop"], 4, measure, digits=2)
    print("node updates:", programs["nodes"]._input_nodes.updates, flush=True)
    for program in programs.values():
        program.close()


if __name__ == "__main__":
    main()
