"""Probe for a one-call ``replay_prepared()``: can an executable of the top-level graph
[event-wait node on the program's copy event] -> [captured graph as a child] -> [event-record
node of the replay-complete event] replace the stream wait, the launch and the event record?

Part 1, semantics (raw driver, spin kernels so the order shows in wall time):
  a. the wait node binds to the event's record current when the graph is *launched* (~T1) or
     when the node *executes* (~T2)? The copy stream re-records the event after the launch.
  b. a ``cudaStreamWaitEvent`` enqueued after the launch on the record node's event waits for
     that launch's record (~T1), not the record before it (~0)?
Part 2, host us on example 18's program (N=2^14 8x8 matvec), each call issued cold after a
synchronize, as ``bench/matvec.py`` times ``replay_prepared(copy_handle=h)``, and pipelined:
the API call, its three raw calls, the bare launch, and the driver-built executables.

Usage, from the repository root:
    taskset -c "$(python3 bench/quiet_cpu.py --count 2)" python3 bench/results/2026-11-30-s22/prepared_exec.py
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, example18  # noqa: E402
from bench._timing import host_loop_us, time_host, time_host_pipelined  # noqa: E402
from fhelium_cupy.runtime import _input_nodes  # noqa: E402
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram  # noqa: E402

SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void mark(int* flag) { *flag = 1; }
""", "spin")
MARK = cupy.RawModule(code=SPIN.code).get_function("mark")
CLOCK_HZ = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"] * 1e3
vp = ctypes.c_void_p


def spin(stream, seconds):
    SPIN((1,), (1,), (cupy.int64(int(seconds * CLOCK_HZ)),), stream=stream)


def build(drv, child_graph, wait_event=None, record_event=None):
    """An executable of [wait wait_event] -> [child child_graph] -> [record record_event]."""
    top = vp()
    drv.check(drv.graph_create(ctypes.byref(top), 0), "create")
    deps: list = []
    if wait_event is not None:
        node = vp()
        drv.check(drv.add_event_wait_node(ctypes.byref(node), top, None, 0, vp(wait_event.ptr)), "wait node")
        deps = [node]
    child = vp()
    arr = (vp * max(1, len(deps)))(*deps)
    drv.check(drv.add_child_graph_node(ctypes.byref(child), top, arr, len(deps), vp(child_graph.graph)), "child")
    if record_event is not None:
        node = vp()
        drv.check(drv.add_event_record_node(ctypes.byref(node), top, (vp * 1)(child), 1, vp(record_event.ptr)),
                  "record node")
    exe = vp()
    drv.check(drv.instantiate(ctypes.byref(exe), top, 0), "instantiate")
    return exe


def semantics(drv):
    flag = cupy.zeros(1, dtype=cupy.int32)
    s_a, s_b, s_c = (cupy.cuda.Stream(non_blocking=True) for _ in range(3))
    with s_a:
        s_a.begin_capture()
        MARK((1,), (1,), (flag,), stream=s_a)
        tiny = s_a.end_capture()
    event = cupy.cuda.Event(block=False, disable_timing=True)
    done = cupy.cuda.Event(block=False, disable_timing=True)
    event.record(s_b)
    cupy.cuda.Device().synchronize()
    exe = build(drv, tiny, wait_event=event, record_event=done)
    t1, t2 = 0.3, 0.8
    # a: launch, then the event re-recorded later on another stream
    spin(s_a, t1)
    drv.check(drv.launch(exe, vp(s_a.ptr)), "launch")
    spin(s_b, t2)
    event.record(s_b)
    start = time.perf_counter()
    done.synchronize()
    a = time.perf_counter() - start
    cupy.cuda.Device().synchronize()
    print(f"a. wait node, event re-recorded after the launch: graph done after {a * 1e3:.0f} ms "
          f"({'bound at launch' if a < (t1 + t2) / 2 else 'bound at execution'}; T1 {t1 * 1e3:.0f}, T2 {t2 * 1e3:.0f})",
          flush=True)
    # b: a stream wait enqueued after the launch on the record node's event
    spin(s_a, t1)
    drv.check(drv.launch(exe, vp(s_a.ptr)), "launch")
    cupy.cuda.runtime.streamWaitEvent(s_c.ptr, done.ptr, 0)
    after = cupy.cuda.Event(block=False, disable_timing=True)
    after.record(s_c)
    start = time.perf_counter()
    after.synchronize()
    b = time.perf_counter() - start
    cupy.cuda.Device().synchronize()
    print(f"b. stream wait on the record node's event after the launch: released after {b * 1e3:.0f} ms "
          f"({'waits for this launch' if b > t1 / 2 else 'took the record before it'})", flush=True)
    drv.exec_destroy(exe)
    return a < (t1 + t2) / 2 and b > t1 / 2


def timings(drv):
    engine, _, ct, fn, want = example18()
    program = CudaGraphProgram.capture(fn, example_inputs=(ct,))
    graph = program.cuda_graph
    stream = cupy.cuda.get_current_stream()
    transfer = cupy.cuda.Stream(non_blocking=True)
    fixed = cupy.cuda.Event(block=False, disable_timing=True)
    done = cupy.cuda.Event(block=False, disable_timing=True)
    rt = cupy.cuda.runtime
    execs = {
        "exec wait+child+record": build(drv, graph, fixed, done),
        "exec child+record": build(drv, graph, None, done),
        "exec child": build(drv, graph),
    }
    # the driver-built executable computes what the program does
    program.copy_inputs_from(ct, stream=transfer)
    fixed.record(transfer)
    program._latest_copy = None  # (the probe consumes it through the raw executable)
    drv.check(drv.launch(execs["exec wait+child+record"], vp(stream.ptr)), "launch")
    done.synchronize()
    assert (program.output.data.get() == want).all()
    print("exec wait+child+record: output bit-identical to the eager call", flush=True)

    handles = []

    def copy():  # untimed, before each sample
        handles.append(program.copy_inputs_from(ct, stream=transfer))
        fixed.record(transfer)

    def api():
        program.replay_prepared(copy_handle=handles.pop())

    def raw_three():
        h = handles.pop()
        program._latest_copy = None
        rt.streamWaitEvent(stream.ptr, h.event.ptr, 0)
        graph.launch(stream)
        done.record(stream)

    def bare():
        handles.pop()
        program._latest_copy = None
        graph.launch(stream)

    def via(exe):
        arg = vp(exe.value)
        sarg = vp(stream.ptr)
        launch = drv.launch

        def call():
            handles.pop()
            program._latest_copy = None
            launch(arg, sarg)
        return call

    calls = {"replay_prepared(copy_handle)": api, "wait+launch+record (3 calls)": raw_three,
             "Graph.launch": bare, **{name: via(exe) for name, exe in execs.items()}}

    def untimed_consume():
        if program._latest_copy is not None:
            program._latest_copy = None

    def cold(call, runs=200, warmup=10):  # each call on a drained stream, its copy complete
        value = time_host(call, runs=runs, warmup=warmup, synchronize=stream.synchronize, sync_inside=False,
                          before=lambda: (copy(), transfer.synchronize()))["median_ms"] * 1e3
        untimed_consume()
        return value

    def measure(key):
        if key == "host loop":
            return host_loop_us()
        name, mode = key.rsplit(" ", 1)
        if mode == "cold":
            return cold(calls[name])
        value = time_host_pipelined(calls[name], runs=512, warmup=32, drain=stream.synchronize, every=8,
                                    before=copy)["median_us"]
        untimed_consume()
        return value

    keys = [f"{name} cold" for name in calls] + [f"{name} piped" for name in calls] + ["host loop"]
    alternate(keys, 4, measure, digits=2)
    stream.synchronize()
    for exe in execs.values():
        drv.exec_destroy(exe)
    program.close()


def main():
    drv = _input_nodes.driver()
    assert drv is not None
    # the event nodes' entry points (the product's _Driver has no use for them)
    drv.add_event_wait_node = drv._fn("cuGraphAddEventWaitNode", [ctypes.POINTER(vp), vp, ctypes.POINTER(vp),
                                                                   ctypes.c_size_t, vp])
    drv.add_event_record_node = drv._fn("cuGraphAddEventRecordNode", [ctypes.POINTER(vp), vp, ctypes.POINTER(vp),
                                                                       ctypes.c_size_t, vp])
    ok = semantics(drv)
    print("semantics as needed:", ok, flush=True)
    timings(drv)


if __name__ == "__main__":
    main()
