"""Matplotlib figures (Agg backend) from a bench results dict (the JSON ``run_all`` writes).

Each figure carries a footer with the GPU, driver, CuPy/torch/NumPy versions and date.
Figures: matvec latency against matrix size (eager, CuPy graph, torch.cuda.graph);
per-operation latency against its bandwidth floor; replay host overhead; memory
(eager peak vs graph scratch, standalone vs pooled programs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["footer_text", "write_plots"]


def footer_text(env: dict[str, Any], device: str | None = None, width: int = 100) -> str:
    """GPU, driver, CuPy/torch/NumPy versions and date, in lines of at most ``width``
    characters broken between fields (a figure is about 100 characters wide at the footer's
    font size)."""
    gpu = env.get("gpu") or "no GPU"
    if device:
        gpu = f"device {device}: {gpu}"
    driver = " ".join(str(env.get("driver") or env.get("cuda_driver") or "-").split())  # one line per GPU in nvidia-smi
    fields = [gpu, f"driver {driver}", f"CuPy {env.get('cupy') or '-'}", f"torch {env.get('torch') or '-'}",
              f"NumPy {env.get('numpy')}", str(env.get("date", ""))]
    lines = [fields[0]]
    for field in fields[1:]:
        if len(lines[-1]) + 3 + len(field) > width:
            lines.append(field)
        else:
            lines[-1] += " | " + field
    return "\n".join(lines)


def _median(stats: dict[str, Any] | None) -> float | None:
    if not stats:
        return None
    value = stats.get("median_ms")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _figure(ncols: int, env: dict[str, Any], title: str, device: str | None = None, extra_width: float = 0.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(max(6.0, 5.2 * ncols) + extra_width, 4.6), squeeze=False)
    fig.suptitle(title)
    fig.text(0.5, 0.005, footer_text(env, device), ha="center", va="bottom", fontsize=7, color="0.35")
    return plt, fig, axes[0]


def _save(plt: Any, fig: Any, path: Path) -> str:
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(path, dpi=120, bbox_inches="tight")  # the canvas takes in legends outside the axes
    plt.close(fig)
    return str(path)


def _plot_matvec(results: dict[str, Any], env: dict[str, Any], out: Path) -> str | None:
    presets = [(name, p) for name, p in results["presets"].items() if p.get("matvec")]
    if not presets:
        return None
    plt, fig, axes = _figure(len(presets), env, "Encrypted matvec latency vs matrix size (median)", env.get("_device"),
                             extra_width=2.0 * len(presets))
    for ax, (name, preset) in zip(axes, presets):
        rows = preset["matvec"]
        sizes = [r["size"] for r in rows]
        series = [
            # the main rows: FHElium example 18's schedule (independent rotations)
            ("example 18 eager", lambda r: _median(r.get("eager", {}).get("latency")), "o-"),
            ("example 18 CudaGraphProgram.replay", lambda r: _median(r.get("graph", {}).get("latency")), "s-"),
            ("example 18 torch.cuda.graph replay", lambda r: _median(r.get("torch_graph", {}).get("latency")), "^--"),
        ]
        for label, get, style in series:
            points = [(s, get(r)) for s, r in zip(sizes, rows) if get(r) is not None]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
        for method, tag in (("hoisted", "double-hoisted"), ("bsgs", "BSGS")):  # run_all's "hoisted": the default
            rows_m = preset.get(method) or []
            for label, get, style in (
                (f"{tag} eager", lambda r: _median(r.get("eager", {}).get("latency")), "o:"),
                (f"{tag} graph replay", lambda r: _median((r.get("graph") or {}).get("latency")), "s:"),
            ):
                points = [(r["size"], get(r)) for r in rows_m if get(r) is not None]
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], style, label=label, alpha=0.8)
        floors = preset.get("matvec_floor_ms") or {}
        fp = [(int(s), v) for s, v in floors.items()]
        if fp:
            fp.sort()
            ax.plot([p[0] for p in fp], [p[1] for p in fp], ":", color="0.4", label="H200 bandwidth floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel("matrix size n (n diagonals, n-1 rotations)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{name} (N={preset['parameters']['ring_degree']})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # beside the lines
    return _save(plt, fig, out / "matvec_latency.png")


def _plot_ops(results: dict[str, Any], env: dict[str, Any], out: Path) -> str | None:
    presets = [(name, p) for name, p in results["presets"].items() if p.get("ops")]
    if not presets:
        return None
    plt, fig, axes = _figure(len(presets), env, "Per-operation eager latency vs memory-bandwidth floor", env.get("_device"))
    for ax, (name, preset) in zip(axes, presets):
        rows = preset["ops"]
        labels = [r["op"] + (f" n={r['size']}" if r.get("size") else "") for r in rows]
        measured = [(_median(r.get("device")) or _median(r.get("latency")) or 0.0) for r in rows]
        floors = [r["floor_ms"] for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], measured, width=0.4, label="measured (device time, else host)")
        ax.bar([x + 0.2 for x in xs], floors, width=0.4, label=f"H200 floor: bytes / {rows[0]['bandwidth_bytes_per_s']:.2g} B/s")
        for x, m, f in zip(xs, measured, floors):
            if m and f:
                ax.text(x - 0.2, m, f"{m / f:.0f}x", ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(list(xs), labels, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("ms")
        ax.set_title(name, fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(plt, fig, out / "ops_vs_floor.png")


def _preset_tags(results: dict[str, Any]) -> dict[str, str]:
    """Short x-axis names of the presets: ``N=2^k`` (the preset name when two share N)."""
    degrees = {name: int((p.get("parameters") or {}).get("ring_degree") or 0) for name, p in results["presets"].items()}
    tags = {}
    for name, n in degrees.items():
        shared = n <= 0 or list(degrees.values()).count(n) > 1
        tags[name] = name if shared else f"N=2^{n.bit_length() - 1}"
    return tags


def _plot_host_overhead(results: dict[str, Any], env: dict[str, Any], out: Path) -> str | None:
    bars = []
    tags = _preset_tags(results)
    for name, preset in results["presets"].items():
        for r in preset.get("matvec", []):
            g = r.get("graph", {})
            t = r.get("torch_graph", {})
            values = {
                "eager issue": _median(r.get("eager", {}).get("host_issue")),
                "replay()": _median(g.get("host_replay")),
                "replay_prepared()": _median(g.get("host_replay_prepared")),
                "torch copy+replay": _median(t.get("host_replay")),
            }
            if any(v is not None for k, v in values.items() if k != "eager issue"):
                bars.append((f"{tags[name]}\nn={r['size']}", values))
    if not bars:
        return None
    plt, fig, axes = _figure(1, env, "Host time to issue one matvec (no synchronize, median)", env.get("_device"))
    ax = axes[0]
    keys = ["eager issue", "replay()", "replay_prepared()", "torch copy+replay"]
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        xs = [j + (i - 1.5) * width for j in range(len(bars))]
        ys = [(values[key] or 0.0) * 1e3 for _, values in bars]
        ax.bar(xs, ys, width=width, label=key)
    ax.set_yscale("log")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    ax.set_ylabel("host time (µs)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(plt, fig, out / "replay_host_overhead.png")


_MEMORY_BARS = ("eager peak working set", "graph-private scratch", "8 standalone (device delta)",
                "8 in one CudaGraphPool (device delta)", "eager device footprint")


def _plot_memory(results: dict[str, Any], env: dict[str, Any], out: Path) -> str | None:
    mib = 1 / (1 << 20)
    groups = []
    tags = _preset_tags(results)
    for name, preset in results["presets"].items():
        for r in preset.get("matvec", []):
            eager = (r.get("memory") or {}).get("eager_peak_bytes")
            device = (r.get("memory") or {}).get("eager_device_bytes")
            scratch = ((r.get("graph") or {}).get("memory") or {}).get("arena_reserved_bytes")
            if eager is not None or scratch is not None:
                groups.append((f"{tags[name]}\nn={r['size']}", {"eager peak working set": eager,
                                                                "eager device footprint": device,
                                                                "graph-private scratch": scratch}))
        pool = preset.get("pool") or {}
        if "standalone" in pool and "pool" in pool:
            groups.append((f"{tags[name]}\n{pool['programs']} programs\nn={pool['size']}", {
                "8 standalone (device delta)": pool["standalone"].get("device_used_delta_bytes"),
                "8 in one CudaGraphPool (device delta)": pool["pool"].get("device_used_delta_bytes"),
            }))
    if not groups:
        return None
    plt, fig, axes = _figure(1, env, "Device memory: eager vs graph scratch, standalone vs pooled", env.get("_device"))
    ax = axes[0]
    for j, (_label, values) in enumerate(groups):
        items = list(values.items())
        width = 0.8 / len(items)
        for i, (key, value) in enumerate(items):
            ax.bar(j + (i - (len(items) - 1) / 2) * width, (value or 0) * mib, width=width, label=key,
                   color=f"C{_MEMORY_BARS.index(key)}")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=7)
    ax.set_ylabel("MiB")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(plt, fig, out / "memory.png")


def write_plots(results: dict[str, Any], out_dir: str | Path) -> list[str]:
    """Write every figure the results support into ``out_dir``; return the paths (≤ 4 PNGs)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(results.get("environment", {}))
    env["_device"] = (results.get("config") or {}).get("device")
    paths = []
    for plot in (_plot_matvec, _plot_ops, _plot_host_overhead, _plot_memory):
        path = plot(results, env, out)
        if path:
            paths.append(path)
    return paths
