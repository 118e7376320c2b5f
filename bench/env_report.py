"""Print (and optionally write as JSON) the machine facts every GPU record carries."""

from __future__ import annotations

import datetime
import json
import platform


def environment() -> dict:
    info: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    import numpy

    info["numpy"] = numpy.__version__
    try:
        import cupy

        info["cupy"] = cupy.__version__
        if cupy.cuda.is_available():
            props = cupy.cuda.runtime.getDeviceProperties(0)
            info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            info["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
            info["gpu_count"] = cupy.cuda.runtime.getDeviceCount()
            try:
                import subprocess

                info["driver"] = subprocess.run(
                    # One driver serves every GPU of the host: ask about device 0 only
                    # (the unfiltered query prints a line per GPU).
                    ["nvidia-smi", "-i", "0", "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True, text=True, timeout=20,
                ).stdout.strip()
            except Exception:
                info["driver"] = None
    except ImportError:
        info["cupy"] = None
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    return info


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Print (and optionally write) the machine and package versions as JSON.")
    parser.add_argument("path", nargs="?", default=None, help="also write the JSON here")
    args = parser.parse_args()
    text = json.dumps(environment(), indent=2)
    print(text)
    if args.path:
        from pathlib import Path

        Path(args.path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.path).write_text(text + "\n")
