"""The ``fhelium-cupy`` command line: ``demo``, ``bench`` and ``info`` over the public API.

Thin by design: argument parsing and printing only. Errors the user can fix (bad
arguments, a missing GPU or package) end in one line on stderr and a non-zero exit,
never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from . import __version__
from .errors import FHEliumError

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
    return getattr(module, "__version__", "installed")


def _info_rows() -> list[tuple[str, str]]:
    from .interop.capabilities import cuda_unavailable_reason, cupy_or_none

    rows = [("fhelium_cupy", __version__), ("python", sys.version.split()[0])]
    for name in ("numpy", "cupy", "torch", "safetensors", "hypothesis", "rich", "tqdm", "matplotlib"):
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
            rows.append(("nvrtc", f"missing ({type(error).__name__}); pip install nvidia-cuda-nvrtc-cu12 or nvidia-cuda-nvrtc"))
        cache = os.environ.get("CUPY_CACHE_DIR", os.path.expanduser("~/.cupy/kernel_cache"))
        rows.append(("kernel cache", cache))
    missing = [n for n, v in rows if v == "missing"]
    rows.append(("missing optional pieces", ", ".join(missing) if missing else "none"))
    return rows


def _cmd_info(args: argparse.Namespace) -> int:
    rows = _info_rows()
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="fhelium-cupy", description="FHE on CuPy: CKKS engine and CUDA Graph replay.")
    parser.add_argument("--version", action="version", version=f"fhelium-cupy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    info = sub.add_parser("info", help="versions, CUDA, NVRTC and missing optional pieces")
    info.set_defaults(handler=_cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except FHEliumError as error:
        print(f"fhelium-cupy: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fhelium-cupy: interrupted", file=sys.stderr)
        return 130
