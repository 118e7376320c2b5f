"""The ``fhelium-cupy`` command line: ``demo``, ``bench`` and ``info`` over the public API.

Thin by design: argument parsing and printing only. Errors the user can fix end in one
line on stderr, never a traceback: bad arguments (an unknown preset, sizes that do not divide
its slots, a test preset without ``--insecure``) with exit status 2 before anything is built,
a missing GPU or package and failures while running with 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .errors import CudaUnavailableError, FHEliumError

__all__ = ["main"]


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _optional_version(name: str) -> str | None:
    try:
        module = importlib.import_module(name)
    except Exception:
        return None
    version = getattr(module, "__version__", None)
    if version is None:  # rich has no __version__: the distribution's metadata does
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "installed"
    return str(version)


def _info_rows() -> list[tuple[str, str]]:
    from .interop.capabilities import cuda_unavailable_reason, cupy_or_none

    rows = [("fhelium_cupy", __version__), ("python", sys.version.split()[0])]
    for name in ("numpy", "cupy", "torch", "safetensors", "rich", "tqdm", "matplotlib"):
        rows.append((name, _optional_version(name) or "missing"))
    reason = cuda_unavailable_reason()
    rows.append(("cuda", "available" if reason is None else f"unavailable: {reason}"))
    cupy = cupy_or_none()
    if reason is None and cupy is not None:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        name = props["name"]
        rows.append(("device", name.decode() if isinstance(name, bytes) else str(name)))
        rows.append(("compute capability", f"{props['major']}.{props['minor']}"))
        rows.append(("driver (CUDA version)", str(cupy.cuda.runtime.driverGetVersion())))
    if cupy is not None:
        try:
            from cupy_backends.cuda.libs import nvrtc

            major, minor = nvrtc.getVersion()
            rows.append(("nvrtc", f"{major}.{minor}"))
        except Exception as error:
            rows.append(("nvrtc", "missing"))
            rows.append(("nvrtc fix", f"{type(error).__name__}: pip install {_nvrtc_package()}"))
        cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
        rows.append(("kernel cache", cache))
    try:
        from .runtime.kernels import kernel_source_dir

        rows.append(("kernel sources", str(kernel_source_dir())))
    except Exception as error:  # the loader names what is missing
        rows.append(("kernel sources", f"missing ({' '.join(str(error).split())[:120]})"))
    try:
        from .ckks.params import preset_names

        rows.append(("ckks presets", ", ".join(preset_names())))
    except Exception as error:  # pragma: no cover - the CKKS layer failed to import
        rows.append(("ckks presets", f"unavailable ({type(error).__name__})"))
    missing = [f"{n} ({_EXTRA_OF[n]})" for n, v in rows if v == "missing" and n in _EXTRA_OF]
    rows.append(("missing optional pieces", ", ".join(missing) if missing else "none"))
    return rows


# the extra that brings each optional piece (pyproject.toml)
_EXTRA_OF = {"cupy": "[cuda12] or [cuda13]", "torch": "[torch]", "safetensors": "[io]", "rich": "[bench]",
             "tqdm": "[bench]", "matplotlib": "[bench]", "nvrtc": "[cuda12] or [cuda13]"}


def _nvrtc_package() -> str:
    """The NVRTC wheel that matches the installed CuPy (installing the other CUDA major's extra
    would put a second CuPy beside it)."""
    from importlib import metadata

    for dist, package in (("cupy-cuda12x", "nvidia-cuda-nvrtc-cu12"), ("cupy-cuda13x", "nvidia-cuda-nvrtc")):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return f"{package} (it matches {dist})"
    return "nvidia-cuda-nvrtc-cu12 (with cupy-cuda12x) or nvidia-cuda-nvrtc (with cupy-cuda13x)"


def _cmd_info(args: argparse.Namespace) -> int:
    rows = _info_rows()
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value < float("inf"):  # nan fails too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _size_list(text: str) -> tuple[int, ...]:
    parts = text.replace(" ", "").split(",")
    if "" in parts:  # nothing, or an empty item ("8,,16", "8,")
        raise argparse.ArgumentTypeError(f"expected sizes like 8,16,32, got {text!r}")
    return tuple(_positive_int(p) for p in parts)


def _preset_name(text: str) -> str:
    from .ckks.params import preset_names

    if text not in preset_names():
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}; known presets: {', '.join(preset_names())}")
    return text


def _preset_spec(text: str) -> str:
    """``NAME[:SIZES]`` checked (a known preset, sizes like 8,16 after a colon); returned as given."""
    name, colon, sizes = text.partition(":")
    _preset_name(name)
    if colon:
        _size_list(sizes)
    return text


def _check_security(parser: argparse.ArgumentParser, presets: Sequence[str], insecure: bool) -> list[Any]:
    """The presets' parameters (nothing built; ``Parameters.preset``'s own check); a usage
    error (exit 2) for a test preset without ``--insecure``."""
    from .ckks.params import Parameters
    from .errors import InsecureParametersError

    try:
        return [Parameters.preset(name, insecure=insecure) for name in presets]
    except InsecureParametersError as error:
        parser.error(" ".join(str(error).split()))
        raise  # (parser.error exits)


def _resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is usable, else ``cpu``; ``cuda`` without a GPU fails in one line."""
    from .interop.capabilities import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if requested == "auto":
        return "cpu" if reason is not None else "cuda"
    if requested == "cuda" and reason is not None:
        raise CudaUnavailableError(f"--device cuda needs a CUDA GPU: {reason}; use --device cpu")
    return requested


def _progress_choice(args: argparse.Namespace) -> bool | None:
    """``--no-progress``: False; else None, the library's rule (a bar when stderr is a terminal)."""
    return False if args.no_progress else None


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import _demo

    device = _resolve_device(args.device)
    preset, insecure = args.preset, args.insecure
    if preset is None:
        preset = _demo.DEFAULT_CUDA_PRESET if device == "cuda" else _demo.DEFAULT_CPU_PRESET
    (params,) = _check_security(args.parser, [preset], insecure)
    slots = int(params.num_slots)
    if args.size > slots or slots % args.size:
        args.parser.error(f"--size {args.size} must divide the preset's {slots} slots")
    _demo.run_demo(device=device, preset=preset, size=args.size, insecure=insecure, replays=args.replays,
                   show_progress=_progress_choice(args), method=args.method)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from . import _bench

    device = _resolve_device(args.device)
    presets = args.preset or [None]
    _check_security(args.parser, [spec.partition(":")[0] for spec in args.preset or ()], args.insecure)
    return _bench.run(
        device=device, presets=presets, sizes=args.sizes, runs=args.runs, warmup=args.warmup,
        json_path=args.json, plots_dir=args.plots, md_path=args.md, insecure=args.insecure,
        budget_s=args.budget_s, torch_graph=not args.no_torch, ops=not args.no_ops,
        show_progress=_progress_choice(args),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="fhelium-cupy", description="FHE on CuPy: CKKS engine and CUDA Graph replay.")
    parser.add_argument("--version", action="version", version=f"fhelium-cupy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    info = sub.add_parser("info", help="versions, CUDA, NVRTC and missing optional pieces")
    info.set_defaults(handler=_cmd_info)

    demo = sub.add_parser(
        "demo", help="encrypted matrix-vector product: eager, then captured and replayed with new inputs",
        description="Encrypt a vector, multiply it by a random matrix eagerly and (on CUDA) as a captured "
        "CUDA Graph replayed with new encrypted inputs; decrypt and print errors and latencies.",
    )
    demo.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                      help="auto (default): cuda when a GPU is usable, else cpu (NumPy engine, no graphs)")
    demo.add_argument("--preset", type=_preset_name, default=None,
                      help="CKKS preset (default: slots8192-scale40-depth7; the faster test-n4096-scale40 needs --insecure)")
    demo.add_argument("--size", type=_positive_int, default=8, help="matrix size n (divides the slot count; default 8)")
    demo.add_argument("--insecure", action="store_true", help="allow test presets below 128-bit security")
    demo.add_argument("--replays", type=_non_negative_int, default=4, help="graph replays with new inputs (default 4)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar during key generation")
    demo.add_argument("--method", choices=("hoisted", "diagonal", "bsgs"), default="hoisted",
                      help="hoisted (default: double hoisting, one shared ModUp and ModDown), "
                           "diagonal (FHElium example 18's schedule) or bsgs")
    demo.set_defaults(handler=_cmd_demo, parser=demo)

    bench = sub.add_parser(
        "bench", help="benchmark suite (matvec eager vs graph, per-operation latency vs bandwidth floor)",
        description="Run bench/ (from a source checkout): prints a table, writes JSON, Markdown and PNG plots.",
    )
    bench.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                       help="auto (default): cuda when a GPU is usable, else cpu")
    bench.add_argument("--preset", type=_preset_spec, action="append", default=None, metavar="NAME[:SIZES]",
                       help="preset, optionally with its own sizes (e.g. slots32768-scale40-depth34:8); repeatable")
    bench.add_argument("--sizes", type=_size_list, default=(8, 16, 32), help="matrix sizes (default 8,16,32); each must divide the preset's slot count")
    bench.add_argument("--runs", type=_positive_int, default=20, help="timed runs per measurement, reported as the median (default 20)")
    bench.add_argument("--warmup", type=_non_negative_int, default=3, help="untimed runs before timing (default 3)")
    bench.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    bench.add_argument("--plots", default=None, metavar="DIR", help="write PNG plots into DIR")
    bench.add_argument("--md", default=None, metavar="PATH", help="write a Markdown summary")
    bench.add_argument("--insecure", action="store_true", help="allow test presets below 128-bit security")
    bench.add_argument("--budget-s", type=_positive_seconds, default=None, help="stop starting new measurements after this many seconds (default: no limit)")
    bench.add_argument("--no-torch", action="store_true", help="skip the torch.cuda.graph comparison")
    bench.add_argument("--no-ops", action="store_true", help="skip the per-operation benchmark")
    bench.add_argument("--no-progress", action="store_true", help="no progress bars")
    bench.set_defaults(handler=_cmd_bench, parser=bench)
    return parser


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except (FHEliumError, ValueError) as error:
        print(f"fhelium-cupy: error: {_one_line(error)}", file=sys.stderr)
        return 1
    except ImportError as error:
        print(f"fhelium-cupy: error: a needed module is missing: {_one_line(error)}", file=sys.stderr)
        return 1
    except OSError as error:  # an output path that cannot be written
        print(f"fhelium-cupy: error: {_one_line(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fhelium-cupy: interrupted", file=sys.stderr)
        return 130
