"""The wheel a user installs carries the CUDA sources, and the loader finds them there.

Builds the wheel from this checkout with pip (as ``pip install .`` would), unpacks it into a
directory of its own (a pure-Python wheel installs by unpacking) and imports the package from
there in a fresh interpreter: ``kernel_source_dir()`` must be the installed
``fhelium_cupy/_kernels``, not the checkout's ``kernels/``, with the same files byte for byte;
with NVRTC present, a kernel compiles from the installed headers. No GPU needed (CI runs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fhelium_cupy.runtime import kernels

REPO = Path(__file__).resolve().parents[1]

_PROBE = r"""
import json, sys
import fhelium_cupy
from fhelium_cupy.runtime import kernels
report = {"package": fhelium_cupy.__file__, "kernel_dir": str(kernels.kernel_source_dir()),
          "names": kernels.kernel_names()}
if sys.argv[1] == "compile":
    report["cubin_bytes"] = len(kernels.nvrtc_compile_cubin("keyswitch.cu", "sm_90"))
print(json.dumps(report))
"""


def _nvrtc_present() -> bool:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - CuPy or the NVRTC library missing: the compile step is skipped
        return False
    return True


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (REPO / "setup.py").is_file():  # an installed test tree without the project's sources
        pytest.skip("needs the project checkout (setup.py) to build the wheel")
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--quiet", "--wheel-dir", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, f"pip wheel failed:\n{build.stdout}\n{build.stderr}"
    (path,) = out.glob("fhelium_cupy-*.whl")
    return path


def test_the_wheel_holds_every_kernel_source_and_the_type_marker(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = sorted(p.name for p in (REPO / "kernels").iterdir() if p.suffix in (".cu", ".cuh"))
    assert {n for n in names if n.startswith("fhelium_cupy/_kernels/")} == {
        f"fhelium_cupy/_kernels/{name}" for name in sources}  # exactly: a stale header could be #included
    assert "fhelium_cupy/py.typed" in names
    assert not any(name.startswith(("tests/", "bench/", "kernels/")) for name in names)


def test_the_installed_package_compiles_from_its_own_kernel_sources(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    mode = "compile" if _nvrtc_present() else "find"
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, cwd=site, env=env, timeout=600,
    )
    assert probe.returncode == 0, probe.stderr
    report = json.loads(probe.stdout.splitlines()[-1])
    installed = site / "fhelium_cupy"
    assert Path(report["package"]).resolve().parent == installed.resolve()
    kernel_dir = Path(report["kernel_dir"]).resolve()
    assert kernel_dir == (installed / "_kernels").resolve()
    for source in (REPO / "kernels").iterdir():
        if source.suffix in (".cu", ".cuh"):
            assert (kernel_dir / source.name).read_bytes() == source.read_bytes(), source.name
    assert report["names"] == kernels.kernel_names(REPO / "kernels")
    if mode == "compile":
        assert report["cubin_bytes"] > 0
