"""Change 53b side by side, sample by sample (its first form, ``root_ab2.py``, ran at 1eab593
without the ``ctypes`` program): example 18's program as the code captures it (``runtime``: the branches are the graph's roots, launched
behind the program's ``RootedGraph``; its executables launched with CuPy's
``runtime.graphLaunch``), the same with both driver-built executables rebuilt to launch through
``ctypes`` (``ctypes``: ``_input_nodes.driver_launch``, change 51 and 53's first form), and
``kernel`` (a no-op kernel ahead of the schedule, one kernel root, launched as captured with
``Graph.launch``: the code before change 53). Each host sample of one program is followed by
one of each other (the order rotated every sample), so drifts of a noisy vCPU fall on all alike. Cold samples (each
after a synchronize): the program's bare launch (``program._launch``) and
``replay_prepared(copy_handle=h)`` (the copy on a transfer stream, untimed, as
``bench/matvec.py``); pipelined: ``replay(ct)`` in blocks of 8 per program, drained between
blocks. 600 samples a form after 20 warmups; medians and the median of the paired
differences, with the host loop before and after.

Usage, from the repository root:
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s22/root_ab2.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from bench._example18 import example18  # noqa: E402
from bench._timing import host_loop_us  # noqa: E402
from fhelium_cupy.runtime import _input_nodes  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402

NOOP = cupy.RawKernel('extern "C" __global__ void noop() {}', "noop")
RUNS, WARMUP = 600, 20


def main():
    engine, _, ct, fn, want = example18()

    def with_kernel_root(x):
        NOOP((1,), (1,), ())
        return fn(x)

    programs = {"runtime": CudaGraphProgram.capture(fn, example_inputs=(ct,)),
                "ctypes": CudaGraphProgram.capture(fn, example_inputs=(ct,)),
                "kernel": CudaGraphProgram.capture(with_kernel_root, example_inputs=(ct,))}
    slow = programs["ctypes"]  # its two executables rebuilt with the ctypes launch
    slow._input_nodes.close()
    slow._rooted.close()
    slow._input_nodes = _input_nodes.InputCopyGraph.build(slow.cuda_graph, slow._buffer._copy_plan, slow._device_index)
    slow._rooted = _input_nodes.RootedGraph.build(slow.cuda_graph)
    slow._launch = slow._rooted.launch
    for name, program in programs.items():
        assert np.array_equal(program.replay(ct, copy_output=True, synchronize=True).data.get(), want), name
    assert programs["runtime"]._rooted is not None and programs["kernel"]._rooted is None
    assert programs["runtime"]._rooted._launch is not slow._rooted._launch
    stream = cupy.cuda.get_current_stream()
    transfer = cupy.cuda.Stream(non_blocking=True)
    clock = time.perf_counter

    def launch_cold(program):
        stream.synchronize()
        t0 = clock()
        program._launch(stream)
        return clock() - t0

    def prepared_cold(program):
        handle = program.copy_inputs_from(ct, stream=transfer)
        transfer.synchronize()
        stream.synchronize()
        t0 = clock()
        program.replay_prepared(copy_handle=handle)
        t1 = clock()
        return t1 - t0

    def replay_block(program):
        stream.synchronize()
        samples = []
        for _ in range(8):
            t0 = clock()
            program.replay(ct)
            samples.append(clock() - t0)
        return statistics.median(samples)

    names = list(programs)
    print(f"host loop before: {host_loop_us():.0f} us", flush=True)
    for label, sample in (("bare launch, cold", launch_cold), ("replay_prepared(copy_handle), cold", prepared_cold),
                          ("replay(), pipelined (median of 8)", replay_block)):
        values = {name: [] for name in names}
        for i in range(WARMUP + RUNS):
            k = i % len(names)
            order = (names[k:] + names[:k]) if i % 2 == 0 else (names[k:] + names[:k])[::-1]
            got = {name: sample(programs[name]) * 1e6 for name in order}
            if i >= WARMUP:
                for name in names:
                    values[name].append(got[name])
        stream.synchronize()
        medians = "  ".join(f"{name} {statistics.median(values[name]):6.2f}" for name in names)
        diffs = "  ".join(
            f"{name} - kernel {statistics.median([a - b for a, b in zip(values[name], values['kernel'])]):+.2f}"
            for name in names[:-1])
        print(f"{label:<38} {medians} us; paired: {diffs} us", flush=True)
    print(f"host loop after: {host_loop_us():.0f} us", flush=True)
    for program in programs.values():
        program.close()


if __name__ == "__main__":
    main()
