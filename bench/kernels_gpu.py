"""Kernel benchmark of CupyBackend primitives with CUDA events, beside the bandwidth floor.

Usage: PYTHONPATH=$PWD python3 bench/kernels_gpu.py [OUT_DIR] [--reps 50] [--sets n14,n16] [--ops modup,ntt]
Writes kernels_gpu.json and kernels_gpu.md into OUT_DIR (default $OUT or ./bench_out; never the committed bench/results).

For each primitive: median time (eager: Python launches timed with events; graph: the op
captured once in a CUDA graph, replay timed with events), kernel launches per op, the
minimal bytes moved (inputs read once + outputs written once; HRot floor for the rotation)
and that traffic's time at 4.3 TB/s (the device-to-device copy rate measured on the H200).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from unittest import mock

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import exit_without_gpu, positive_int  # noqa: E402
from bench._timing import device_median_us  # noqa: E402  (after the sys.path entry above)

BANDWIDTH = 4.3e12
FHELIUM_Q = (1099510054913, 1099515691009, 1099508121601, 1099515789313,
             1099507695617, 1099516280833, 1099506515969, 1099521949697)
FHELIUM_P = (1152921504606748673,)




def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected integers >= 0, got {text!r}")
    return values


def _choice_list(choices: tuple[str, ...]):
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        unknown = [v for v in values if v not in choices]
        if not values or unknown:
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(choices)}, got {text!r}")
        return values

    return parse


def _context(n: int, q: tuple[int, int], p: tuple[int, int], dnum: int):
    """The ring context of ``q = (bits, count)`` and ``p = (bits, count)`` NTT primes for N = ``n``."""
    from tests.helpers import ring_oracle as ro

    return ro.make_context(n, ro.ntt_primes(q[0], q[1], n), ro.ntt_primes(p[0], p[1], n), dnum=dnum)


def _fhelium_context():
    from tests.helpers import ring_oracle as ro

    return ro.make_context(1 << 14, FHELIUM_Q, FHELIUM_P, dnum=8)


# key -> (label, builder): --sets is checked against the keys before any GPU work, and only
# the sets asked for are built
SETS = {
    "n14": ("N=2^14, 8 Q + 1 P, dnum 8", _fhelium_context),
    "n15": ("N=2^15, 17 Q (40-bit) + 2 P (60-bit), dnum 6", lambda: _context(1 << 15, (40, 17), (60, 2), 6)),
    "n16": ("N=2^16, 35 Q (40-bit) + 4 P (60-bit), dnum 9", lambda: _context(1 << 16, (40, 35), (60, 4), 9)),
    "n16d4": ("N=2^16, 34 Q (40-bit) + 6 P (60-bit), dnum 4", lambda: _context(1 << 16, (40, 34), (60, 6), 4)),
    # every prime below 2^45, so every NTT row takes the float64 arithmetic (P = 369 bits
    # covers a digit's 9 x 40 bits; log QP = 1729, under the 1772 of 128-bit security at N=2^16)
    "n16p41": ("N=2^16, 34 Q (40-bit) + 9 P (41-bit), dnum 4", lambda: _context(1 << 16, (40, 34), (41, 9), 4)),
}


def make_sets(keys=None):
    """``{key: (label, context)}`` for ``keys`` (default: every set of ``SETS``)."""
    return {key: (SETS[key][0], SETS[key][1]()) for key in (SETS if keys is None else keys)}


def capture_private(cp, fn, stream) -> tuple:
    """``fn()`` captured on ``stream`` into a ``cupy.cuda.Graph`` with its allocations from a
    pool of its own (graph-internal blocks are never handed to eager code): ``(graph, pool)``;
    keep the pool as long as the graph."""
    pool = cp.cuda.MemoryPool()
    with stream, cp.cuda.using_allocator(pool.malloc):
        stream.begin_capture()
        fn()
        graph = stream.end_capture()
    return graph, pool


_USE_NODE_PRIORITY = 8  # CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
_ATTRIBUTE_PRIORITY = 8  # CU_LAUNCH_ATTRIBUTE_PRIORITY
_NODE_KERNEL = 0  # CU_GRAPH_NODE_TYPE_KERNEL


def kernel_node_priorities(graph_handle: int) -> list[int]:
    """The priority attribute of every kernel node of the ``cudaGraph_t`` ``graph_handle``
    (what stream capture recorded from each launch's stream), in the driver's node order."""
    import ctypes

    from fhelium_cupy.runtime._graph_execs import driver

    drv = driver()
    lib, vp, sz = drv._lib, ctypes.c_void_p, ctypes.c_size_t
    count = sz()
    drv.check(lib.cuGraphGetNodes(vp(graph_handle), None, ctypes.byref(count)), "cuGraphGetNodes")
    nodes = (vp * count.value)()
    drv.check(lib.cuGraphGetNodes(vp(graph_handle), nodes, ctypes.byref(count)), "cuGraphGetNodes")
    priorities = []
    for node in nodes:
        kind = ctypes.c_int()
        drv.check(lib.cuGraphNodeGetType(vp(node), ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value == _NODE_KERNEL:
            value = (ctypes.c_int * 16)()  # CUlaunchAttributeValue (64 bytes); priority: the first int
            drv.check(lib.cuGraphKernelNodeGetAttribute(vp(node), _ATTRIBUTE_PRIORITY, value),
                      "cuGraphKernelNodeGetAttribute")
            priorities.append(value[0])
    return priorities


def node_priority_launcher(cp, graph, stream):
    """``graph`` (a captured ``cupy.cuda.Graph``) instantiated again with
    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: ``(launch, destroy)``; the executable runs
    each kernel node at its own priority attribute instead of the launch stream's."""
    import ctypes

    from fhelium_cupy.runtime._graph_execs import driver

    drv = driver()
    handle = ctypes.c_void_p()
    drv.check(drv.instantiate(ctypes.byref(handle), ctypes.c_void_p(graph.graph), _USE_NODE_PRIORITY),
              "cuGraphInstantiateWithFlags")
    exec_handle = int(handle.value or 0)
    return (lambda: cp.cuda.runtime.graphLaunch(exec_handle, stream.ptr),
            lambda: drv.exec_destroy(ctypes.c_void_p(exec_handle)))


def bench_op(cp, backend, fn, reps: int, node_priority: bool = False) -> dict:
    """Eager and graph-replay medians of ``fn`` (CUDA events on a stream of the lowest
    priority). ``node_priority``: replay an executable instantiated with node priorities."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(3):
            fn()
        stream.synchronize()
        before = backend.launch_count
        fn()
        launches = backend.launch_count - before
        eager = device_median_us(fn, runs=reps)
        graph, pool = capture_private(cp, fn, stream)
        launch, destroy = (node_priority_launcher(cp, graph, stream) if node_priority
                           else (lambda: graph.launch(stream), lambda: None))
        priorities = kernel_node_priorities(graph.graph) if node_priority else []
        launch()
        stream.synchronize()
        replay = device_median_us(launch, runs=reps)
        stream.synchronize()
        destroy()
    return {"launches": launches, "eager_us": eager, "graph_us": replay, "_pool": pool, "_graph": graph,
            "priorities": sorted(set(priorities))}


def parse_variants(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """``"name=-DA=1 -DB=2;other=..."`` -> [(name, NVRTC defines)]; empty text -> the build default."""
    variants = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, flags = item.partition("=")
        variants.append((name.strip(), tuple(flags.split())))
    return variants or [("default", ())]


def random_rows(be, ctx, rng, lead: tuple[int, ...], rows) -> object:
    """Uniform residues ``lead + [len(rows), N]`` over ``rows``, on the backend's device."""
    n = ctx.ring_degree
    return be.asarray(np.stack([rng.integers(0, ctx.moduli[r], lead + (n,), dtype=np.uint64) for r in rows], axis=-2))


def variant_outputs(cp, be, ctx) -> list:
    """Forward and inverse NTT, ModUp, one key switch, a 3-key linear transform (plain and
    with ``rescale=True`` in both domains), the NTT-domain rescale and the relinearize-and-rescale division
    (both domains) of fixed random inputs: the exactness check of a kernel variant against
    the first one (every variant, and every ``--lt-parts``, must be bit-identical)."""
    L, K, n = ctx.q_count, ctx.p_count, ctx.ring_degree
    rows, qp = tuple(range(L)), tuple(range(L + K))
    rng = np.random.default_rng(7)
    ct = random_rows(be, ctx, rng, (2,), rows)
    keys = [random_rows(be, ctx, rng, (len(ctx.digits), 2), qp) for _ in range(3)]
    weights = random_rows(be, ctx, rng, (4,), qp)
    gs = [5, pow(5, 3, 2 * n), 2 * n - 1]
    digits = be.modup(ct[1], rows)
    outputs = (be.ntt_forward(ct, rows), be.ntt_inverse(ct, rows), digits,
               be.keyswitch_from_digits(digits, keys[0], rows),
               be.keyswitch_linear_transform(digits, keys, rows, gs, weights, ct),
               be.keyswitch_linear_transform(digits, keys, rows, gs, weights, ct, rescale=True),
               be.keyswitch_linear_transform(digits, keys, rows, gs, weights, ct, rescale=True, domain="ntt"),
               be.rescale(ct, rows, domain="ntt"),
               be.keyswitch_add_rescale(digits, keys[1], rows, ct, domain="ntt"),
               be.keyswitch_add_rescale(digits, keys[1], rows, ct, domain="coefficient"))
    return [cp.asnumpy(x) for x in outputs]


def run_set(cp, label: str, ctx, reps: int, l2_group_bytes: int, only: tuple[str, ...] = (), tile: int = 0,
            fill: int = 1056, variant: tuple[str, tuple[str, ...]] = ("default", ()),
            reference: list | None = None, lt_parts: int = 0, priority: bool = False) -> list[dict]:
    from fhelium_cupy.ckks.backends.cupy_backend import CupyBackend, active_digits
    from fhelium_cupy.runtime.kernels import KernelOptions

    be = CupyBackend(ctx, l2_group_bytes=l2_group_bytes, base_convert_tile=tile, ntt_fill_blocks=fill,
                     linear_transform_parts=lt_parts, kernel_options=KernelOptions(extra=variant[1]))
    if priority:  # the overlapped ModDown's side stream at the device's greatest priority
        greatest = -(1 << 16)  # lower is higher; the driver clamps it to the device's greatest
        be._branches.moddown = ([cp.cuda.Stream(non_blocking=True, priority=greatest)],
                                cp.cuda.Event(disable_timing=True), [cp.cuda.Event(disable_timing=True)])
    outputs = variant_outputs(cp, be, ctx)
    if reference is not None and not reference:
        reference.extend(outputs)
    exact = reference is None or all(np.array_equal(a, b) for a, b in zip(outputs, reference))
    n, L, K = ctx.ring_degree, ctx.q_count, ctx.p_count
    rows = tuple(range(L))
    D = len(active_digits(ctx, rows))
    limb = n * 8
    rng = np.random.default_rng(0)

    def rand(lead, rws):
        return random_rows(be, ctx, rng, lead, rws)

    ct = rand((2,), rows)
    ct_b = rand((2,), rows)
    out = cp.empty_like(ct)
    qp = tuple(range(L + K))
    key = rand((len(ctx.digits), 2), qp)
    # seven distinct keys for the 7-key ops: one key seven times would sit in L2 after its first
    # read (an N=2^14 key is 18 MiB), which a real linear transform's keys do not
    keys7 = [key] + [rand((len(ctx.digits), 2), qp) for _ in range(6)]
    galois7 = [pow(5, i + 1, 2 * n) for i in range(7)]
    digits = be.modup(ct[1], rows)
    ct_ntt = be.ntt_forward(ct, rows)
    weights = rand((8,), qp)
    g = 5

    def rotation():
        rot = be.automorphism(ct, g, rows, domain="coefficient")
        y = be.keyswitch_from_digits(be.modup(rot[1], rows), key, rows)
        return be.add(rot[0], y[0], rows), y[1]

    def rotation_ntt():
        """NTT-domain ciphertext in and out (the engine's rotate_with_key(output_domain="ntt"))."""
        rot = be.automorphism(ct, g, rows, domain="ntt")
        y = be.keyswitch_from_digits(be.modup(be.ntt_inverse(rot[1], rows), rows), key, rows, domain="ntt")
        return be.add(rot[0], y[0], rows, out=y[0]), y[1]

    def rotation_hoisted():
        """The engine's rotate_with_key on an NTT-domain ciphertext: inverse NTT of c1, ModUp
        with the NTT hint, one-key switch with the permutation and rotated c0 inside."""
        c1 = be.ntt_inverse(ct_ntt[1], rows)
        d = be.modup(c1, rows, c_ntt=ct_ntt[1])
        return be.keyswitch_from_digits_many(d, [key], rows, [g], c0=ct_ntt[0], domain="ntt")

    c3 = rand((3,), rows)  # an NTT-domain CT3 (a product before relinearization)
    c3_01 = c3[:2]

    def relinearize_two_roundings(domain: str):
        """The engine's relinearize(output_domain=domain) then rescale_to_next_level."""
        def run():
            d = be.modup(be.ntt_inverse(c3[2], rows), rows, c_ntt=c3[2])
            y = be.keyswitch_from_digits(d, key, rows, domain=domain)
            c01 = c3_01 if domain == "ntt" else be.ntt_inverse(c3_01, rows)
            return be.rescale(be.add(c01, y, rows, out=y), rows, domain=domain)
        return run

    def relinearize_fused(domain: str):
        """The engine's relinearize(output_domain=domain, rescale=True)."""
        def run():
            d = be.modup(be.ntt_inverse(c3[2], rows), rows, c_ntt=c3[2])
            return be.keyswitch_add_rescale(d, key, rows, c3_01, domain=domain)
        return run

    relin_limbs = 3 * L + 2 * D * (L + K) + 2 * (L - 1)  # read CT3 and the key, write CT2 one level down

    def recorded_launch(call, accept):
        """The first launch ``call()`` makes whose kernel name passes ``accept``, recorded from
        ``_launch`` (same kernel, grid, block, arguments and shared memory), as a replayable
        call; None when there is none."""
        recorded: list = []
        with mock.patch.object(be, "_launch", new=lambda *a, **k: recorded.append((a, k))):
            call()
        found = [(a, k) for a, k in recorded if accept(a[0])]
        if not found:
            return None
        a, k = found[0]
        return lambda: be._launch(*a, **k)

    def ntt_part(part: str):
        """One of the two forward-NTT kernels alone, as ``ntt_forward(ct)`` launches it (None for
        N <= chunk: one chunk kernel does every stage)."""
        want = "ntt_forward_column_stages" if part == "column" else "ntt_forward_chunk_stages"
        return recorded_launch(lambda: be.ntt_forward(ct, rows, out=out),
                               lambda name: name in (want, want + "_v4", want + "_x2"))

    def modup_conversion():
        """ModUp's base conversion launch alone (keyswitch_base_convert_s* or _bytes_mma), as
        ``modup(c1)`` makes it."""
        return recorded_launch(lambda: be.modup(ct[1], rows), lambda name: name.startswith("keyswitch_base_convert"))

    ops = {
        "ntt_forward column kernel only": (ntt_part("column"), 2 * 2 * L),
        "modup conversion kernel only": (modup_conversion(), L + D * (L + K)),
        "ntt_forward chunk kernel only": (ntt_part("chunk"), 2 * 2 * L),
        "ntt_forward(ct)": (lambda: be.ntt_forward(ct, rows, out=out), 2 * 2 * L),
        "ntt_inverse(ct)": (lambda: be.ntt_inverse(ct, rows, out=out), 2 * 2 * L),
        "rescale(ct, ntt)": (lambda: be.rescale(ct, rows, domain="ntt"), 2 * L + 2 * (L - 1)),
        "rescale(ct, coefficient)": (lambda: be.rescale(ct, rows, domain="coefficient"), 2 * L + 2 * (L - 1)),
        "tensor_product": (lambda: be.tensor_product(ct, ct_b, rows), 4 * L + 3 * L),
        "mul_montgomery(ct, pt)": (lambda: be.mul_montgomery(ct, ct_b[0], rows, out=out), 2 * L + L + 2 * L),
        "automorphism(ct, ntt)": (lambda: be.automorphism(ct, g, rows, domain="ntt"), 4 * L),
        "modup(c1)": (lambda: be.modup(ct[1], rows), L + D * (L + K)),
        "modup with NTT hint (c1; own rows not transformed)": (
            lambda: be.modup(ct[1], rows, c_ntt=ct_ntt[1]), 2 * L + D * (L + K)),
        "ntt_forward_and_modup(ct) (the NTT of ct and the ModUp of c1)": (
            lambda: be.ntt_forward_and_modup(ct, rows), 2 * L + 2 * L + D * (L + K)),
        "keyswitch_from_digits": (lambda: be.keyswitch_from_digits(digits, key, rows), 3 * D * (L + K) + 2 * L),
        "rotation (automorphism+modup+keyswitch+add)": (rotation, 4 * L + 2 * D * (L + K)),
        "rotation ntt->ntt (+intt c1, ntt-domain moddown)": (rotation_ntt, 4 * L + 2 * D * (L + K)),
        "rotation hoisted ntt->ntt (engine rotate_with_key)": (rotation_hoisted, 4 * L + 2 * D * (L + K)),
        "keyswitch_from_digits ntt-domain": (lambda: be.keyswitch_from_digits(digits, key, rows, domain="ntt"),
                                             3 * D * (L + K) + 2 * L),
        "keyswitch_from_digits_many (7 keys)": (
            lambda: be.keyswitch_from_digits_many(digits, keys7, rows, galois7),
            D * (L + K) + 7 * (2 * D * (L + K) + 2 * L)),
        "keyswitch_linear_transform (7 keys, double hoisting)": (
            lambda: be.keyswitch_linear_transform(digits, keys7, rows, galois7, weights, ct),
            7 * 2 * D * (L + K) + D * (L + K) + 8 * (L + K) + 2 * L + 2 * L),
        "keyswitch_linear_transform, inverse NTT and rescale (7 keys)": (
            lambda: be.rescale(be.ntt_inverse(be.keyswitch_linear_transform(digits, keys7, rows, galois7, weights, ct),
                                              rows), rows, domain="coefficient"),
            7 * 2 * D * (L + K) + D * (L + K) + 8 * (L + K) + 2 * L + 2 * (L - 1)),
        "keyswitch_linear_transform rescale=True (7 keys, one division by P q_0)": (
            lambda: be.keyswitch_linear_transform(digits, keys7, rows, galois7, weights, ct, rescale=True),
            7 * 2 * D * (L + K) + D * (L + K) + 8 * (L + K) + 2 * L + 2 * (L - 1)),
        "keyswitch_linear_transform rescale=True, then ntt_forward (7 keys)": (
            lambda: be.ntt_forward(be.keyswitch_linear_transform(digits, keys7, rows, galois7, weights, ct,
                                                                 rescale=True), rows[1:]),
            7 * 2 * D * (L + K) + D * (L + K) + 8 * (L + K) + 2 * L + 2 * (L - 1)),
        "keyswitch_linear_transform rescale=True domain=ntt (7 keys)": (
            lambda: be.keyswitch_linear_transform(digits, keys7, rows, galois7, weights, ct, rescale=True,
                                                  domain="ntt"),
            7 * 2 * D * (L + K) + D * (L + K) + 8 * (L + K) + 2 * L + 2 * (L - 1)),
        "relinearize and rescale ntt->ntt (two roundings)": (relinearize_two_roundings("ntt"), relin_limbs),
        "relinearize rescale=True ntt->ntt (keyswitch_add_rescale)": (relinearize_fused("ntt"), relin_limbs),
        "relinearize and rescale ntt->coefficient (two roundings)": (
            relinearize_two_roundings("coefficient"), relin_limbs),
        "relinearize rescale=True ntt->coefficient (keyswitch_add_rescale)": (
            relinearize_fused("coefficient"), relin_limbs),
        "keyswitch_from_digits_many ntt-domain (7 keys)": (
            lambda: be.keyswitch_from_digits_many(digits, keys7, rows, galois7, domain="ntt"),
            D * (L + K) + 7 * (2 * D * (L + K) + 2 * L)),
    }
    results = []
    for name, (fn, limbs_moved) in ops.items():
        if fn is None or (only and not any(name.startswith(o) for o in only)):
            continue
        r = bench_op(cp, be, fn, reps, node_priority=priority)
        floor_us = limbs_moved * limb / BANDWIDTH * 1e6
        results.append({
            "set": label, "op": name, "l2_group_bytes": l2_group_bytes, "tile": tile, "fill": fill,
            "lt_parts": lt_parts,
            "variant": variant[0] + ("+prio" if priority else ""), "defines": list(variant[1]),
            "matches_first_variant": exact, "kernel_node_priorities": r["priorities"],
            "launches": r["launches"],
            "eager_us": round(r["eager_us"], 2), "graph_us": round(r["graph_us"], 2),
            "bytes_floor": limbs_moved * limb, "floor_us": round(floor_us, 2),
            "graph_over_floor": round(r["graph_us"] / floor_us, 2),
        })
        print(f"{label:>4} g={l2_group_bytes >> 20:>2}MiB t={tile:>2} f={fill:>4} p={lt_parts} "
              f"v={variant[0]}{'+prio' + str(r['priorities']) if priority else ''}{'' if exact else ' MISMATCH'} "
              f"{name:<46} launches {r['launches']:>3}  eager "
              f"{r['eager_us']:9.1f} us  graph {r['graph_us']:9.1f} us  floor {floor_us:8.1f} us  "
              f"x{r['graph_us'] / floor_us:5.2f}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", nargs="?", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--reps", type=positive_int, default=50)
    parser.add_argument("--sets", type=_choice_list(tuple(SETS)), default=("n14", "n16"))
    parser.add_argument("--ops", default="", help="comma list of op-name prefixes to run (default: all)")
    parser.add_argument("--l2-group-mib", type=_int_list, default=(0, 16), help="comma list of NTT L2 group sizes (0 = off)")
    parser.add_argument("--tiles", type=_int_list, default=(0,), help="comma list of base-conversion target tiles (0 = all)")
    parser.add_argument("--fill", type=_int_list, default=(1056,), help="comma list of NTT fill-block thresholds (CupyBackend)")
    parser.add_argument("--lt-parts", type=_int_list, default=(0,),
                        help="comma list of CupyBackend(linear_transform_parts=) values (0 = the host's choice)")
    parser.add_argument("--ntt-variants", default="",
                        help='kernel builds to compare, "name=-DFLAG=V ...;name2=..." (ntt.cu macros; '
                             "every variant's NTTs, ModUp, key switch and linear transforms are checked bit-exact against the "
                             "first)")
    parser.add_argument("--priority", type=_choice_list(("off", "on")), default=("off",),
                        help="comma list of off/on: on = the overlapped ModDown's side stream at the greatest "
                             "priority and the graphs instantiated with node priorities (probe)")
    args = parser.parse_args()
    try:
        variants = parse_variants(args.ntt_variants)
    except ValueError as error:
        parser.error(str(error))
    exit_without_gpu("bench/kernels_gpu.py")
    from fhelium_cupy.runtime.kernels import require_cuda

    cp = require_cuda()
    sets = make_sets(args.sets)
    results = []
    for key in args.sets:
        label, ctx = sets[key]
        print(f"# {label}", flush=True)
        reference: list = []
        for variant in variants:
            for mib in args.l2_group_mib:
                for tile in args.tiles:
                    for fill in args.fill:
                        for parts in args.lt_parts:
                            for prio in args.priority:
                                results += run_set(cp, key, ctx, args.reps, mib << 20,
                                                   tuple(o for o in args.ops.split(",") if o), tile, fill,
                                                   variant, reference, parts, prio == "on")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "bandwidth_Bps": BANDWIDTH,
            "sets": {k: v[0] for k, v in SETS.items()}, "reps": args.reps}
    (out_dir / "kernels_gpu.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [f"# CupyBackend kernels on {meta['device']} (median of {args.reps}, CUDA events)", "",
             "| set | kernel variant | L2 group MiB | base-convert tile | NTT fill | op | launches | eager us | graph us | "
             "floor us (4.3 TB/s) | graph/floor |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        variant = (r["variant"] + (f", {r['lt_parts']} parts" if r.get("lt_parts") else "")
                   + ("" if r["matches_first_variant"] else " (MISMATCH)"))
        lines.append(f"| {r['set']} | {variant} | {r['l2_group_bytes'] >> 20} | {r['tile']} | {r['fill']} | {r['op']} | "
                     f"{r['launches']} | {r['eager_us']} | "
                     f"{r['graph_us']} | {r['floor_us']} | {r['graph_over_floor']} |")
    (out_dir / "kernels_gpu.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'kernels_gpu.json'} and {out_dir / 'kernels_gpu.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
