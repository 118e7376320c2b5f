"""Writing a bench script's result: JSON to stdout and, when asked, to a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["emit_json"]


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
