"""Writing a bench script's result: JSON to stdout and, when asked, to a file; the argparse
types the scripts share with the ``fhelium-cupy`` command (one-line errors for bad counts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fhelium_cupy._cli import _non_negative_int as non_negative_int
from fhelium_cupy._cli import _positive_int as positive_int
from fhelium_cupy._cli import _positive_seconds as positive_seconds
from fhelium_cupy._cli import _size_list as size_list

__all__ = ["emit_json", "exit_without_gpu", "non_negative_int", "positive_int", "positive_seconds", "size_list"]


def exit_without_gpu(script: str) -> None:
    """Exit with status 2 and one line on stderr, naming what is missing, when no CUDA GPU is
    usable (instead of a traceback from deep inside CuPy)."""
    from fhelium_cupy.interop.capabilities import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        print(f"{script}: needs a CUDA GPU: {reason}", file=sys.stderr)
        raise SystemExit(2)


def emit_json(data: Any, path: str | Path | None = None, *, echo: bool = True) -> str:
    """Serialize ``data`` (``default=str`` for non-JSON leaves), print it unless ``echo`` is
    false, and write it to ``path`` (parents created) when given; returns the text."""
    text = json.dumps(data, indent=2, default=str)
    if echo:
        print(text)
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
    return text
