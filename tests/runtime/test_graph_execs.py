"""The driver-built executables of ``runtime._graph_execs`` on a fake driver: the replay input
copies as memcpy nodes (the graph they build, the updates a replay issues, failures) and the
single root of a graph with several (``RootedGraph``), and the program's use of both."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fhelium_cupy.runtime import _graph_execs
from fhelium_cupy.runtime._graph_execs import DriverError, InputCopyGraph, RootedGraph
from tests.helpers.fake_cupy import FakeArray, build_program, install
from tests.helpers.fake_driver import FakeDriver

GRAPH = 0xABC0
# (leaf index, target low address, low offset, bytes), as ReusableValueBuffer's copy plan
PLAN = ((0, 0x10000, 0, 256), (2, 0x20000, 64, 512))


class _Leaf:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def _pointer(leaf: _Leaf, index: int) -> int | None:
    return leaf.ptr if index == 0 else None


def _built(drv: FakeDriver, plan=PLAN) -> InputCopyGraph:
    nodes = InputCopyGraph.build(SimpleNamespace(graph=GRAPH), plan, 0, _pointer, drv=drv)
    assert nodes is not None
    return nodes


EXECS = InputCopyGraph.EXECUTABLES


def _execs(drv: FakeDriver) -> list[int]:
    return [entry[1] for entry in drv.log if entry[0] == "cuGraphInstantiateWithFlags"]


def test_the_copies_are_a_chain_of_memcpy_nodes_ahead_of_the_captured_graph():
    drv = FakeDriver()
    nodes = _built(drv)
    names = [entry[0] for entry in drv.log]
    assert names == ["cuCtxGetCurrent", "cuGraphCreate", "cuGraphAddMemcpyNode", "cuGraphAddMemcpyNode",
                     "cuGraphAddChildGraphNode"] + ["cuGraphInstantiateWithFlags"] * EXECS
    top = drv.log[1][1]
    first, second, child = drv.log[2], drv.log[3], drv.log[4]
    assert first[2:] == (top, [], (0x10000, 0x10000, 256), FakeDriver.CONTEXT)  # a self-copy until a replay
    assert second[2:] == (top, [first[1]], (0x20000, 0x20000, 512), FakeDriver.CONTEXT)  # after the first
    assert child[2:] == (top, [second[1]], GRAPH)  # the captured graph after the last copy: one root
    assert all(entry[2] == top for entry in drv.log[5:])
    assert len(drv.alive) == 1 + EXECS  # the top graph and its executables
    del nodes  # a dropped object destroys them too (its finalizer)
    assert not drv.alive


def test_a_replay_takes_the_executable_holding_its_sources_else_updates_the_least_recent():
    drv = FakeDriver()
    nodes = _built(drv)
    node_ids = [drv.log[2][1], drv.log[3][1]]
    execs = _execs(drv)
    first = [_Leaf(0x9000), None, _Leaf(0x7040)]
    drv.log.clear()
    nodes.launch(nodes.device_sources(first), 0x55)  # every executable is new: the last one gets the sources
    assert drv.log == [
        ("cuGraphExecMemcpyNodeSetParams", execs[-1], node_ids[0], (0x10000, 0x9000, 256), FakeDriver.CONTEXT),
        ("cuGraphExecMemcpyNodeSetParams", execs[-1], node_ids[1], (0x20000, 0x7000, 512), FakeDriver.CONTEXT),
        ("cuGraphLaunch", execs[-1], 0x55),
    ]
    drv.log.clear()
    nodes.launch(nodes.device_sources([_Leaf(0x9000), None, _Leaf(0x7040)]), 0x55)  # the same addresses: the launch alone
    assert drv.log == [("cuGraphLaunch", execs[-1], 0x55)]
    second = [_Leaf(0x9000), None, _Leaf(0x8040)]
    drv.log.clear()
    nodes.launch(nodes.device_sources(second), 0)  # new addresses: the least recently used executable, both its nodes set
    assert [entry[:3] for entry in drv.log] == [("cuGraphExecMemcpyNodeSetParams", execs[-2], node_ids[0]),
                                                ("cuGraphExecMemcpyNodeSetParams", execs[-2], node_ids[1]),
                                                ("cuGraphLaunch", execs[-2], 0)]
    assert nodes.updates == 4
    drv.log.clear()
    for _ in range(3):  # two arrays alternating: each has its executable, no update
        nodes.launch(nodes.device_sources(first), 0)
        nodes.launch(nodes.device_sources(second), 0)
    assert drv.log == [("cuGraphLaunch", execs[-1], 0), ("cuGraphLaunch", execs[-2], 0)] * 3
    assert nodes.updates == 4


def test_sources_elsewhere_than_the_graphs_device_are_left_to_the_caller():
    drv = FakeDriver()
    nodes = InputCopyGraph.build(SimpleNamespace(graph=GRAPH), PLAN, 1, _pointer, drv=drv)  # (_pointer: device 0)
    assert nodes is not None
    assert nodes.device_sources([_Leaf(0x9000), None, _Leaf(0x7040)]) is None
    nodes.close()


def test_more_source_sets_than_executables_update_the_least_recently_used():
    drv = FakeDriver()
    nodes = _built(drv, plan=PLAN[:1])
    execs = _execs(drv)
    sets = [[_Leaf(0x1000 * (k + 1))] for k in range(EXECS + 1)]
    launched = []
    for leaves in sets * 2:
        drv.log.clear()
        nodes.launch(nodes.device_sources(leaves), 0)
        launched.append(drv.log[-1][1])
    assert nodes.updates == 2 * len(sets)  # one set more than executables: every launch updates (LRU)
    assert launched[:EXECS] == execs[::-1] and launched[EXECS] == execs[-1]


def test_a_refused_update_launches_nothing_and_is_retried_next_time():
    drv = FakeDriver()
    nodes = _built(drv)
    leaves = [_Leaf(0x9000), None, _Leaf(0x7040)]
    drv.fail["cuGraphExecMemcpyNodeSetParams"] = 1
    drv.log.clear()
    with pytest.raises(DriverError, match="cuGraphExecMemcpyNodeSetParams"):
        nodes.launch(nodes.device_sources(leaves), 0)
    assert [entry[0] for entry in drv.log] == ["cuGraphExecMemcpyNodeSetParams"]
    del drv.fail["cuGraphExecMemcpyNodeSetParams"]
    drv.log.clear()
    nodes.launch(nodes.device_sources(leaves), 0)
    assert [entry[0] for entry in drv.log] == ["cuGraphExecMemcpyNodeSetParams"] * 2 + ["cuGraphLaunch"]


def test_close_destroys_the_executables_then_their_graph_once():
    drv = FakeDriver()
    nodes = _built(drv)
    top, execs = drv.log[1][1], _execs(drv)
    drv.log.clear()
    nodes.close()
    nodes.close()
    assert drv.log == [("cuGraphExecDestroy", e) for e in execs] + [("cuGraphDestroy", top)]
    assert not drv.alive


@pytest.mark.parametrize("step", ["cuGraphAddMemcpyNode", "cuGraphAddChildGraphNode", "cuGraphInstantiateWithFlags"])
def test_a_refused_build_step_leaves_nothing_behind(step):
    drv = FakeDriver()
    drv.fail[step] = 700
    assert InputCopyGraph.build(SimpleNamespace(graph=GRAPH), PLAN, 0, _pointer, drv=drv) is None
    assert not drv.alive


def test_no_nodes_when_switched_off_nothing_to_copy_no_graph_handle_or_no_driver(monkeypatch):
    drv = FakeDriver()
    graph = SimpleNamespace(graph=GRAPH)
    assert InputCopyGraph.build(graph, (), 0, _pointer, drv=drv) is None
    assert InputCopyGraph.build(SimpleNamespace(), PLAN, 0, _pointer, drv=drv) is None
    assert InputCopyGraph.build(SimpleNamespace(graph=0), PLAN, 0, _pointer, drv=drv) is None
    monkeypatch.setenv(_graph_execs.ENV_SWITCH, "0")
    assert InputCopyGraph.build(graph, PLAN, 0, _pointer, drv=drv) is None
    monkeypatch.delenv(_graph_execs.ENV_SWITCH)
    monkeypatch.setattr(_graph_execs, "driver", lambda: None)
    assert InputCopyGraph.build(graph, PLAN, 0, _pointer) is None
    assert drv.log == []


def test_the_copy_params_are_a_one_dimensional_device_copy():
    p = _graph_execs.copy_params(0x100, 0x200, 48)
    assert (p.dstDevice, p.srcDevice, p.WidthInBytes, p.Height, p.Depth) == (0x100, 0x200, 48, 1, 1)
    assert p.srcMemoryType == p.dstMemoryType == 2  # CU_MEMORYTYPE_DEVICE
    assert (p.srcPitch, p.dstPitch, p.srcHeight, p.dstHeight) == (48, 48, 1, 1)


# -- the root of a graph with several ----------------------------------------------------


def test_a_graph_with_several_roots_gets_one_memcpy_root_ahead_of_it():
    drv = FakeDriver()
    drv.roots = 7
    rooted = RootedGraph.build(SimpleNamespace(graph=GRAPH), drv=drv)
    assert rooted is not None
    names = [entry[0] for entry in drv.log]
    assert names == ["cuGraphGetRootNodes", "cuCtxGetCurrent", "cuMemAlloc", "cuGraphCreate", "cuGraphAddMemcpyNode",
                     "cuGraphAddChildGraphNode", "cuGraphInstantiateWithFlags"]
    scratch, top = drv.log[2][1], drv.log[3][1]
    assert drv.log[2][2] == 16
    memcpy, child, instantiated = drv.log[4], drv.log[5], drv.log[6]
    assert memcpy[2:] == (top, [], (scratch + 8, scratch, 8), FakeDriver.CONTEXT)  # 8 bytes within its own 16
    assert child[2:] == (top, [memcpy[1]], GRAPH)  # the captured graph after it: one root
    assert instantiated[2] == top
    drv.log.clear()
    rooted.launch(SimpleNamespace(ptr=0x55))
    rooted.launch(SimpleNamespace(ptr=0x55))
    assert drv.log == [("cuGraphLaunch", instantiated[1], 0x55)] * 2
    drv.log.clear()
    rooted.close()
    rooted.close()
    assert drv.log == [("cuGraphExecDestroy", instantiated[1]), ("cuGraphDestroy", top), ("cuMemFree", scratch)]
    assert not drv.alive


def test_no_root_of_its_own_for_one_root_the_switch_off_or_no_driver(monkeypatch):
    drv = FakeDriver()
    graph = SimpleNamespace(graph=GRAPH)
    assert RootedGraph.build(graph, drv=drv) is None  # one root already
    drv.roots = 0
    assert RootedGraph.build(graph, drv=drv) is None
    assert [entry[0] for entry in drv.log] == ["cuGraphGetRootNodes"] * 2
    drv.roots = 3
    drv.log.clear()
    assert RootedGraph.build(SimpleNamespace(), drv=drv) is None
    assert RootedGraph.build(SimpleNamespace(graph=0), drv=drv) is None
    monkeypatch.setenv(_graph_execs.ROOT_SWITCH, "0")
    assert RootedGraph.build(graph, drv=drv) is None
    monkeypatch.delenv(_graph_execs.ROOT_SWITCH)
    monkeypatch.setattr(_graph_execs, "driver", lambda: None)
    assert RootedGraph.build(graph) is None
    assert drv.log == [] and not drv.alive


@pytest.mark.parametrize("step", ["cuGraphGetRootNodes", "cuMemAlloc", "cuGraphCreate", "cuGraphAddMemcpyNode",
                                  "cuGraphAddChildGraphNode", "cuGraphInstantiateWithFlags"])
def test_a_refused_root_step_leaves_nothing_behind(step):
    drv = FakeDriver()
    drv.roots = 2
    drv.fail[step] = 700
    assert RootedGraph.build(SimpleNamespace(graph=GRAPH), drv=drv) is None
    assert not drv.alive


def test_a_refused_root_launch_raises_the_driver_error():
    drv = FakeDriver()
    drv.roots = 2
    rooted = RootedGraph.build(SimpleNamespace(graph=GRAPH), drv=drv)
    assert rooted is not None
    drv.fail["cuGraphLaunch"] = 719
    with pytest.raises(DriverError, match="cuGraphLaunch"):
        rooted.launch(SimpleNamespace(ptr=0))
    del rooted  # a dropped object releases everything too (its finalizer)
    assert not drv.alive


# -- the program's replay path ------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch.setattr)


@pytest.fixture
def driver(fake, monkeypatch):
    drv = FakeDriver(sink=lambda entry: fake.log.append(entry) if fake.log is not None else None)
    monkeypatch.setattr(_graph_execs, "driver", lambda: drv)
    return drv


def _double(x):
    return FakeArray(x.shape, x.dtype)


def _names(calls):
    return [call[0] for call in calls]


def test_replay_of_device_sources_points_the_nodes_and_copies_nothing_itself(fake, driver):
    program = build_program(fake, _double, (FakeArray((4, 8), np.uint64),), graph_handle=GRAPH)
    assert program._input_nodes is not None
    source = FakeArray((4, 8), np.uint64)
    calls = fake.calls(lambda: program.replay(source))
    assert _names(calls) == ["getDevice", "cuGraphExecMemcpyNodeSetParams", "graphLaunch", "eventRecord"]
    (_, low, offset, span), = program._buffer.copy_plan()
    assert calls[1][3] == (low, source.data.ptr - offset, span)
    calls = fake.calls(lambda: program.replay(source))  # the same source again: no driver call but the launch
    assert _names(calls) == ["getDevice", "graphLaunch", "eventRecord"]
    program.close()
    assert not driver.alive


def test_host_sources_and_prepared_replays_take_the_captured_graph(fake, driver):
    program = build_program(fake, _double, (FakeArray((4, 8), np.uint64),), graph_handle=GRAPH)
    host = np.zeros((4, 8), dtype=np.uint64)
    assert _names(fake.calls(lambda: program.replay(host))) == ["getDevice", "memcpyAsync", "graphLaunch", "eventRecord"]
    assert "graphLaunch" in _names(fake.calls(lambda: program.replay_prepared()))
    other_device = FakeArray((4, 8), np.uint64)
    other_device.data.device_id = 1
    assert "memcpyAsync" in _names(fake.calls(lambda: program.replay(other_device)))
    program.close()


def test_a_refused_update_falls_back_to_copies_for_good(fake, driver):
    program = build_program(fake, _double, (FakeArray((4, 8), np.uint64),), graph_handle=GRAPH)
    driver.fail["cuGraphExecMemcpyNodeSetParams"] = 1
    source = FakeArray((4, 8), np.uint64)
    calls = fake.calls(lambda: program.replay(source))
    assert _names(calls) == ["getDevice", "cuGraphExecMemcpyNodeSetParams"] + ["cuGraphExecDestroy"] * EXECS + [
        "cuGraphDestroy", "memcpyAsync", "graphLaunch", "eventRecord"]
    assert program._input_nodes is None and not driver.alive
    assert _names(fake.calls(lambda: program.replay(source))) == ["getDevice", "memcpyAsync", "graphLaunch",
                                                                 "eventRecord"]
    program.close()


def test_a_program_of_a_graph_with_several_roots_launches_it_behind_the_root(fake, driver):
    driver.roots = 4
    program = build_program(fake, _double, (FakeArray((4, 8), np.uint64),), graph_handle=GRAPH)
    assert program._rooted is not None
    rooted = _names(fake.calls(lambda: program.replay_prepared()))
    calls = fake.calls(lambda: program.replay_prepared())
    assert rooted == _names(calls) == ["getDevice", "graphLaunch", "eventRecord"]
    executable = calls[1][2]  # (CuPy's runtime.graphLaunch of the rooted executable's handle)
    host = np.zeros((4, 8), dtype=np.uint64)
    calls = fake.calls(lambda: program.replay(host))
    assert _names(calls) == ["getDevice", "memcpyAsync", "graphLaunch", "eventRecord"] and calls[2][2] == executable
    source = FakeArray((4, 8), np.uint64)  # device sources: the input-copy executables (their first copy the root)
    calls = fake.calls(lambda: program.replay(source))
    assert _names(calls) == ["getDevice", "cuGraphExecMemcpyNodeSetParams", "graphLaunch", "eventRecord"]
    assert calls[2][2] not in (executable, None)
    program.close()
    program.close()
    assert program._rooted is None and not driver.alive


def test_a_refused_root_leaves_the_program_on_the_captured_graph(fake, driver):
    driver.roots = 4
    driver.fail["cuMemAlloc"] = 2  # (CUDA_ERROR_OUT_OF_MEMORY)
    program = build_program(fake, _double, (FakeArray((4, 8), np.uint64),), graph_handle=GRAPH)
    assert program._rooted is None and program._input_nodes is not None
    calls = fake.calls(lambda: program.replay_prepared())
    assert _names(calls) == ["getDevice", "graphLaunch", "eventRecord"] and len(calls[1]) == 2  # the captured graph
    program.close()
    assert not driver.alive
