"""Change 53 side by side: example 18's program (8x8 matvec at N=2^14, seven rotations on
parallel branches) captured as the code does it now (``runtime``: no kernel of the backend
before the fork, the graph's roots are the branches, the program launches it behind its
``RootedGraph``'s memcpy root) and as the code before did (``kernel``: a no-op kernel on the
caller's stream ahead of the schedule, as ``graph_fork_root`` was: one kernel root, launched
as captured). Host us of ``replay(ct)`` issued back to back and of
``replay_prepared(copy_handle=h)`` cold (each after a synchronize, the copy on a transfer
stream untimed, as ``bench/matvec.py``), device us of both (CUDA events); four rounds
alternated, both programs checked bit-identical to the eager call first.

Usage, from the repository root:
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s22/root_ab.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from bench._example18 import alternate, example18  # noqa: E402
from bench._timing import device_median_us, host_loop_us, time_host, time_host_pipelined  # noqa: E402
from fhelium_cupy.runtime import _input_nodes  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402

NOOP = cupy.RawKernel('extern "C" __global__ void noop() {}', "noop")


def main():
    engine, _, ct, fn, want = example18()

    def with_kernel_root(x):
        NOOP((1,), (1,), ())
        return fn(x)

    programs = {"runtime": CudaGraphProgram.capture(fn, example_inputs=(ct,)),
                "kernel": CudaGraphProgram.capture(with_kernel_root, example_inputs=(ct,))}
    drv = _input_nodes.driver()
    for name, program in programs.items():
        out = program.replay(ct, copy_output=True, synchronize=True)
        assert np.array_equal(out.data.get(), want), name
        roots = _input_nodes.root_count(drv, program.cuda_graph.graph)
        print(f"{name}: {roots} root(s), rooted executable {program._rooted is not None}; bit-identical", flush=True)
    stream = cupy.cuda.get_current_stream()
    transfer = cupy.cuda.Stream(non_blocking=True)

    def prepared_cold(program, runs=200, warmup=10):  # each call on a drained stream, its copy complete
        handles = []

        def copy():
            handles.append(program.copy_inputs_from(ct, stream=transfer))
            transfer.synchronize()

        return time_host(lambda: program.replay_prepared(copy_handle=handles.pop()), runs=runs, warmup=warmup,
                         synchronize=stream.synchronize, sync_inside=False, before=copy)["median_ms"] * 1e3

    def measure(key):
        if key == "host loop":
            return host_loop_us()
        name, what = key.split(" ", 1)
        program = programs[name]
        if what == "replay()":
            return time_host_pipelined(lambda: program.replay(ct), runs=512, warmup=32, drain=stream.synchronize,
                                       every=8)["median_us"]
        if what == "replay_prepared() cold":
            return prepared_cold(program)
        if what == "replay() device":
            return device_median_us(lambda: program.replay(ct), runs=40, warmup=3, stream=stream)
        return device_median_us(lambda: program.replay_prepared(), runs=40, warmup=3, stream=stream)

    keys = [f"{name} {what}" for what in ("replay()", "replay_prepared() cold", "replay() device",
                                          "replay_prepared() device") for name in programs] + ["host loop"]
    alternate(keys, 4, measure, digits=2)
    for program in programs.values():
        program.close()


if __name__ == "__main__":
    main()
