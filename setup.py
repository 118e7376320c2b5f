"""Build hook: ship the CUDA sources of ``kernels/`` as package data ``fhelium_cupy/_kernels``.

``kernels/`` sits outside the package (one copy for the checkout); ``build_py`` copies its
``*.cu`` / ``*.cuh`` files into the built package and ``sdist`` carries the directory, so a
wheel built from either holds them (found by ``fhelium_cupy.runtime.kernels``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
KERNELS = ROOT / "kernels"


def _kernel_files() -> list[Path]:
    return sorted(p for p in KERNELS.glob("*") if p.suffix in (".cu", ".cuh"))


class BuildPyWithKernels(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "fhelium_cupy" / "_kernels"
        files = _kernel_files()
        if not files:
            packaged = ROOT / "fhelium_cupy" / "_kernels"  # building from an sdist that already has them
            files = sorted(p for p in packaged.glob("*") if p.suffix in (".cu", ".cuh"))
        if not files:
            raise RuntimeError("no CUDA kernel sources found in kernels/ or fhelium_cupy/_kernels/")
        shutil.rmtree(target, ignore_errors=True)  # a reused build/ keeps sources deleted since
        target.mkdir(parents=True, exist_ok=True)
        for path in files:
            shutil.copy2(path, target / path.name)


class SdistWithKernels(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        target = Path(base_dir) / "kernels"
        target.mkdir(parents=True, exist_ok=True)
        for path in _kernel_files():
            shutil.copy2(path, target / path.name)


setup(cmdclass={"build_py": BuildPyWithKernels, "sdist": SdistWithKernels})
