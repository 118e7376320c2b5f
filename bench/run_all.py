"""One entry point for the whole suite: ops + matvec per preset -> JSON, Markdown, PNGs, a table.

GPU (one call, everything into one directory)::

    python bench/run_all.py --out "$OUT" \\
        --preset slots8192-scale40-depth7:8,16,32,64 --preset slots32768-scale40-depth34:8

CPU smoke check (NumPy engine, eager only, seconds)::

    python bench/run_all.py --device cpu --preset test-n4096-scale40:4 --insecure --runs 2 --out /tmp/bench

Writes ``results.json`` (environment, config, per-preset rows), ``results.md`` and up to
four PNGs. The JSON is rewritten after every measured size, so a run cut short by a time
limit still leaves its finished rows; ``--budget-s`` stops starting new work in time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import size_list
from bench.env_report import environment
from bench.matvec import bench_matvec_size, bench_pool_sharing, bench_variant_size
from bench.ops import H200_BANDWIDTH, bench_ops, floor_bytes, parameter_summary

__all__ = [
    "DEFAULT_CPU_PRESET", "DEFAULT_CUDA_PRESET", "main", "markdown", "merge_plan", "outcome", "parse_preset", "print_table",
    "run",
]

DEFAULT_CUDA_PRESET = "slots8192-scale40-depth7"
DEFAULT_CPU_PRESET = "slots8192-scale40-depth7"  # 128-bit: test presets need --insecure, never implied
SCHEMA = "fhelium-cupy-bench/1"


def parse_preset(spec: str | None, device: str, sizes: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """``NAME[:8,16]`` -> (name, sizes); ``None`` -> the device's default preset."""
    if spec is None:
        return (DEFAULT_CUDA_PRESET if device == "cuda" else DEFAULT_CPU_PRESET), tuple(sizes)
    name, colon, own = spec.partition(":")
    if not colon:
        return name, tuple(sizes)
    try:  # the sizes rule of --sizes and of the fhelium-cupy command (one parser)
        return name, size_list(own)
    except argparse.ArgumentTypeError as error:
        raise ValueError(f"sizes in {spec!r} must be positive integers like NAME:8,16 ({error})") from None


def merge_plan(plan: list[tuple[str, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...]]]:
    """One entry per preset name, in first-seen order, with the sizes of every repeat (in
    order, each once): results are keyed by preset name, so a repeated name would have
    replaced the earlier one's rows."""
    merged: dict[str, list[int]] = {}
    for name, sizes in plan:
        seen = merged.setdefault(name, [])
        seen += [n for n in sizes if n not in seen]
    return [(name, tuple(sizes)) for name, sizes in merged.items()]


def outcome(results: dict[str, Any]) -> tuple[bool, str | None]:
    """``(measured, plots_error)``: whether any preset has matvec or ops rows, and why the
    plots were not written (None when they were, or were not asked for)."""
    measured = any(p.get("matvec") or p.get("ops") for p in results.get("presets", {}).values())
    plots = results.get("plots")
    return measured, (plots.get("skipped") if isinstance(plots, dict) else None)


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


def run(
    *,
    device: str,
    presets: list[str | None],
    sizes: tuple[int, ...] = (8, 16, 32),
    runs: int = 20,
    warmup: int = 3,
    insecure: bool = False,
    budget_s: float | None = None,
    torch_graph: bool = True,
    ops: bool = True,
    bsgs: bool = True,
    show_progress: bool | None = None,
    json_path: str | Path | None = None,
    plots_dir: str | Path | None = None,
    md_path: str | Path | None = None,
) -> dict[str, Any]:
    """Run the suite and write the requested outputs; returns the results dict.

    Raises:
        ConfigurationError / InsecureParametersError: a bad preset or a test preset
            without ``insecure`` (before any measurement).
    """
    from fhelium_cupy._demo import MatvecWorkload
    from fhelium_cupy.ckks import CkksEngine
    from fhelium_cupy.ckks.params import Parameters

    start = time.perf_counter()
    plan = merge_plan([parse_preset(spec, device, tuple(sizes)) for spec in presets])
    for name, _ in plan:
        Parameters.preset(name, insecure=insecure)  # validate every preset before measuring anything
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "environment": environment(),
        "config": {"device": device, "plan": [{"preset": n, "sizes": list(s)} for n, s in plan], "runs": runs,
                   "warmup": warmup, "insecure": insecure, "budget_s": budget_s, "torch_graph": torch_graph,
                   "bsgs": bsgs},
        "bandwidth_bytes_per_s": H200_BANDWIDTH,
        "presets": {},
    }

    def over_budget() -> bool:
        return budget_s is not None and time.perf_counter() - start > budget_s

    def checkpoint() -> None:
        results["elapsed_s"] = time.perf_counter() - start
        if json_path:
            Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            Path(json_path).write_text(json.dumps(results, indent=2, default=str) + "\n")

    for name, preset_sizes in plan:
        entry: dict[str, Any] = {"parameters": parameter_summary(name), "matvec": [], "hoisted": [], "bsgs": [],
                                 "ops": [], "skipped": []}
        results["presets"][name] = entry
        if over_budget():
            entry["skipped"].append("time budget exhausted before this preset")
            continue
        t0 = time.perf_counter()
        engine = CkksEngine(name, device=device, insecure=insecure)
        entry["engine_seconds"] = time.perf_counter() - t0
        entry["matvec_floor_ms"] = {
            str(n): floor_bytes(entry["parameters"], "matvec", size=n) / H200_BANDWIDTH * 1e3 for n in preset_sizes
        }
        for index, size in enumerate(sorted(preset_sizes)):
            if over_budget():
                entry["skipped"].append(f"size {size}: time budget exhausted")
                continue
            try:
                workload = MatvecWorkload.build(preset=name, device=device, size=size, insecure=insecure,
                                                engine=engine, show_progress=show_progress)
                if index == 0 and ops:
                    try:
                        entry["ops"] = bench_ops(workload, runs=runs, warmup=warmup)
                    except Exception as error:
                        entry["skipped"].append(f"ops: {_reason(error)}")
                entry["matvec"].append(bench_matvec_size(workload, runs=runs, warmup=warmup, torch_graph=torch_graph))
                checkpoint()
                for method in ("hoisted", "bsgs") if bsgs and size > 1 else ():
                    if over_budget():
                        entry["skipped"].append(f"{method} size {size}: time budget exhausted")
                        continue
                    try:
                        variant = MatvecWorkload.build(preset=name, device=device, size=size, insecure=insecure,
                                                       engine=engine, show_progress=show_progress, method=method)
                        entry[method].append(bench_variant_size(variant, runs=runs, warmup=warmup))
                    except Exception as error:
                        entry["skipped"].append(f"{method} size {size}: {_reason(error)}")
                if index == 0 and device == "cuda" and not over_budget():
                    try:
                        entry["pool"] = bench_pool_sharing(workload)
                    except Exception as error:
                        entry["pool"] = {"skipped": _reason(error)}
            except Exception as error:
                entry["skipped"].append(f"size {size}: {_reason(error)}")
            checkpoint()
        del engine
    checkpoint()
    if plots_dir:
        from bench.plots import write_plots

        try:
            results["plots"] = write_plots(results, plots_dir)
        except Exception as error:  # a plot must never lose the measurements
            hint = " (pip install 'fhelium-cupy[bench]')" if isinstance(error, ImportError) else ""
            results["plots"] = {"skipped": _reason(error) + hint}
        checkpoint()
    if md_path:
        Path(md_path).parent.mkdir(parents=True, exist_ok=True)
        Path(md_path).write_text(markdown(results))
    return results


# ----------------------------------------------------------------------------- reporting


def _med(stats: Any) -> float | None:
    return stats.get("median_ms") if isinstance(stats, dict) else None


def _fmt(value: Any, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 1e4:
            return f"{value:.0f}{unit}"
        return f"{value:.{digits}g}{unit}" if abs(value) < 1e-3 else f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _paired(paired: dict[str, Any] | None) -> str:
    """``median (min-max)x @ loop µs``: matvec.py's paired eager / replay rounds, "-" without them."""
    if not paired or not paired.get("rounds"):
        return "-"
    loops = sorted(row["host_loop_us"] for row in paired["rounds"])
    return (f"{paired['median_ratio']:.2f}x ({paired['min_ratio']:.2f}-{paired['max_ratio']:.2f}) "
            f"@ {loops[0]:.0f}-{loops[-1]:.0f}")


def _mib(value: Any) -> str:
    return "-" if value is None else f"{value / (1 << 20):.1f}"


def summary_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """One compact row per (preset, size): the numbers the README table wants."""
    rows = []
    for name, preset in results["presets"].items():
        bsgs = {b["size"]: b for b in preset.get("bsgs", [])}
        hoisted = {h["size"]: h for h in preset.get("hoisted", [])}
        for r in preset.get("matvec", []):
            b = bsgs.get(r["size"], {})
            h = hoisted.get(r["size"], {})
            eager = _med(r.get("eager", {}).get("latency"))
            graph = _med(r.get("graph", {}).get("latency"))
            torch_graph = _med(r.get("torch_graph", {}).get("latency"))
            rows.append({
                "preset": name,
                "n": str(r["size"]),
                "eager ms": _fmt(eager),
                "graph ms": _fmt(graph) if graph is not None else "skipped",
                "speed-up": _fmt(eager / graph, "x", 2) if eager and graph else "-",
                "paired speed-up (host loop µs)": _paired(r.get("graph", {}).get("paired")),
                "torch graph ms": _fmt(torch_graph) if torch_graph is not None else "skipped",
                "replay() µs": _fmt((_med(r.get("graph", {}).get("host_replay")) or 0) * 1e3 or None, "", 1),
                "replay_prepared() µs": _fmt((_med(r.get("graph", {}).get("host_replay_prepared")) or 0) * 1e3 or None, "", 1),
                "graph launch µs": _fmt((_med(r.get("graph", {}).get("host_graph_launch")) or 0) * 1e3 or None, "", 1),
                "host loop µs": _fmt(r.get("graph", {}).get("host_loop_us"), "", 0),
                "max abs err": f"{r['max_abs_error']:.2e}",
                "launches": _fmt(r.get("launches_per_call")),
                "double-hoisted eager / graph ms": (f"{_fmt(_med(h.get('eager', {}).get('latency')))} / "
                                                    f"{_fmt(_med((h.get('graph') or {}).get('latency')))}") if h else "-",
                "bsgs eager / graph ms": (f"{_fmt(_med(b.get('eager', {}).get('latency')))} / "
                                          f"{_fmt(_med((b.get('graph') or {}).get('latency')))}") if b else "-",
            })
    return rows


def op_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for name, preset in results["presets"].items():
        for r in preset.get("ops", []):
            measured = _med(r.get("device")) or _med(r.get("latency"))
            rows.append({
                "preset": name,
                "op": r["op"] + (f" n={r['size']}" if r.get("size") else ""),
                "eager ms": _fmt(measured) if "skipped" not in r else "skipped",
                "floor µs": _fmt(r["floor_ms"] * 1e3, "", 2),
                "x floor": "-" if r.get("x_floor") is None else (f"{r['x_floor']:.0f}x" if r["x_floor"] >= 10 else f"{r['x_floor']:.2f}x"),
                "launches": _fmt(r.get("launches")),
            })
    return rows


def _md_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "_none_\n"
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(r[h] for h in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    parts = [
        "# fhelium-cupy benchmark\n",
        f"GPU: {env.get('gpu') or 'none'}; driver {env.get('driver') or env.get('cuda_driver') or '-'}; "
        f"CUDA runtime {env.get('cuda_runtime') or '-'}; CuPy {env.get('cupy') or '-'}; torch {env.get('torch') or '-'}; "
        f"NumPy {env.get('numpy')}; Python {env.get('python')}; {env.get('date')}.\n",
        f"Device `{results['config']['device']}`, median of {results['config']['runs']} runs after "
        f"{results['config']['warmup']} warmups; floors at the H200's measured copy rate, {results['bandwidth_bytes_per_s']:.2g} B/s, "
        "on any device; "
        f"elapsed {results.get('elapsed_s', 0):.0f} s.\n",
        "## Matrix-vector product (eager vs CUDA Graph replay)\n",
        _md_table(summary_rows(results)),
        "\n## Single operations vs bandwidth floor\n",
        _md_table(op_rows(results)),
        "\n## Memory\n",
        "eager peak: the bytes a fresh CuPy pool asked `cudaMalloc` for in one eager call; eager device: "
        "the device memory those allocations took (the driver rounds each up to 2 MiB); graph scratch: "
        "the graph arena's chunks, 2 MiB multiples, so its device memory.\n",
    ]
    mem_rows = []
    for name, preset in results["presets"].items():
        for r in preset.get("matvec", []):
            g = r.get("graph", {}) or {}
            gm = g.get("memory") or {}
            memory = r.get("memory") or {}
            device, scratch = memory.get("eager_device_bytes"), gm.get("arena_reserved_bytes")
            mem_rows.append({
                "preset": name, "n": str(r["size"]),
                "eager peak MiB": _mib(memory.get("eager_peak_bytes")),
                "eager device MiB": _mib(device),
                "graph scratch MiB": _mib(scratch),
                "scratch / eager device": f"{scratch / device:.2f}x" if scratch and device else "-",
                "graph reserved MiB (stats)": _mib((g.get("stats") or {}).get("memory_reserved_bytes")),
                "capture s": _fmt(g.get("capture_total_s")),
            })
        pool = preset.get("pool") or {}
        if "standalone" in pool:
            parts_pool = (f"{name}: {pool['programs']} programs (n={pool['size']}): standalone "
                          f"{_mib(pool['standalone']['device_used_delta_bytes'])} MiB device delta, one CudaGraphPool "
                          f"{_mib(pool['pool']['device_used_delta_bytes'])} MiB (scratch "
                          f"{_mib(pool['standalone']['scratch_reserved_bytes'])} -> {_mib(pool['pool']['scratch_reserved_bytes'])} MiB)")
            mem_rows.append({"preset": parts_pool, "n": "", "eager peak MiB": "", "eager device MiB": "",
                             "graph scratch MiB": "", "scratch / eager device": "",
                             "graph reserved MiB (stats)": "", "capture s": ""})
    parts.append(_md_table(mem_rows))
    skipped = skipped_lines(results)
    parts += ["\n## Skipped\n", "\n".join(skipped) + "\n" if skipped else "_nothing_\n"]
    return "\n".join(parts)


def skipped_lines(results: dict[str, Any]) -> list[str]:
    """One ``- what: why`` line per measurement or plot that did not happen."""
    skipped = []
    for name, preset in results["presets"].items():
        skipped += [f"- {name}: {s}" for s in preset.get("skipped", [])]
        for r in preset.get("matvec", []):
            for key in ("graph", "torch_graph"):
                if isinstance(r.get(key), dict) and "skipped" in r[key]:
                    skipped.append(f"- {name} n={r['size']} {key}: {r[key]['skipped']}")
        for r in preset.get("ops", []):
            if "skipped" in r:
                skipped.append(f"- {name} op {r['op']}: {r['skipped']}")
        if isinstance(preset.get("pool"), dict) and "skipped" in preset["pool"]:
            skipped.append(f"- {name} pool: {preset['pool']['skipped']}")
    plots = results.get("plots")
    if isinstance(plots, dict) and "skipped" in plots:
        skipped.append(f"- plots: {plots['skipped']}")
    return skipped


def print_table(results: dict[str, Any], file: Any = None) -> None:
    """Compact rich tables (plain text when rich is missing)."""
    file = file or sys.stdout
    tables = [("matvec: eager vs CUDA Graph replay", summary_rows(results)), ("operations vs bandwidth floor", op_rows(results))]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for title, rows in tables:
            print(title, file=file)
            print(_md_table(rows), file=file)
        _print_skipped(results, file)
        return
    console = Console(file=file, width=200)
    for title, rows in tables:
        if not rows:
            continue
        table = Table(title=title, title_justify="left")
        for head in rows[0]:
            table.add_column(head, justify="left" if head in ("preset", "op") else "right")
        for r in rows:
            table.add_row(*r.values())
        console.print(table)
    _print_skipped(results, file)


def _print_skipped(results: dict[str, Any], file: Any) -> None:
    skipped = skipped_lines(results)
    if skipped:
        print("skipped:", file=file)
        print("\n".join(skipped), file=file)


def main(argv: list[str] | None = None) -> int:
    from bench._report import exit_without_gpu, non_negative_int, positive_int, positive_seconds
    from fhelium_cupy.errors import FHEliumError

    parser = argparse.ArgumentParser(description="Run the fhelium-cupy benchmark suite into one directory.")
    parser.add_argument("--out", required=True, help="output directory (results.json, results.md, PNGs)")
    parser.add_argument("--from-json", default=None, metavar="PATH",
                        help="measure nothing: redraw the PNGs, Markdown and table from an earlier results.json")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto (default): cuda when CuPy sees a GPU, else cpu")
    parser.add_argument("--preset", action="append", default=None, metavar="NAME[:SIZES]")
    parser.add_argument("--sizes", type=size_list, default=(8, 16, 32))
    parser.add_argument("--runs", type=positive_int, default=20)
    parser.add_argument("--warmup", type=non_negative_int, default=3)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--budget-s", type=positive_seconds, default=480.0,
                        help="stop starting new work after this (default 480 s)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-ops", action="store_true")
    parser.add_argument("--no-bsgs", action="store_true", help="skip the hoisted and BSGS evaluator variants")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.from_json:
        try:
            results = json.loads(Path(args.from_json).read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--from-json: {_reason(error)}")
        try:
            from bench.plots import write_plots
        except ImportError as error:
            parser.error(f"--from-json redraws plots, which need matplotlib: {_reason(error)}")

        out.mkdir(parents=True, exist_ok=True)
        results["plots"] = write_plots(results, out)
        (out / "results.md").write_text(markdown(results))
        print_table(results)
        print(f"redrew {out / 'results.md'} and {len(results['plots'])} PNGs from {args.from_json}")
        return 0
    device = args.device
    if device == "auto":
        from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

        device = "cpu" if cuda_unavailable_reason() is not None else "cuda"
    elif device == "cuda":
        exit_without_gpu("bench/run_all.py")
    presets = args.preset or [None]
    try:  # every preset and size checked before anything is measured
        from fhelium_cupy.ckks.params import Parameters

        for name, _ in merge_plan([parse_preset(spec, device, args.sizes) for spec in presets]):
            Parameters.preset(name, insecure=args.insecure)
    except (ValueError, FHEliumError) as error:
        parser.error(" ".join(str(error).split()))
    results = run(
        device=device, presets=presets, sizes=args.sizes,
        runs=args.runs, warmup=args.warmup, insecure=args.insecure, budget_s=args.budget_s,
        torch_graph=not args.no_torch, ops=not args.no_ops, bsgs=not args.no_bsgs, show_progress=False,
        json_path=out / "results.json", plots_dir=out, md_path=out / "results.md",
    )
    print_table(results)
    plots = results.get("plots")
    pngs = len(plots) if isinstance(plots, list) else 0
    print(f"wrote {out / 'results.json'}, {out / 'results.md'} and {pngs} PNGs")
    measured, plots_error = outcome(results)
    if not measured:
        print("bench/run_all.py: error: nothing was measured (see skipped above)", file=sys.stderr)
    if plots_error is not None:
        print(f"bench/run_all.py: error: plots not written: {plots_error}", file=sys.stderr)
    return 0 if measured and plots_error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
