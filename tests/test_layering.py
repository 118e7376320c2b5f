"""Dependencies flow downward: lower layers never import higher ones."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "fhelium_cupy"

FORBIDDEN = {
    "runtime": ("fhelium_cupy.ckks", "fhelium_cupy._cli"),
    "interop": ("fhelium_cupy.ckks", "fhelium_cupy.runtime", "fhelium_cupy._cli"),
    "errors.py": ("fhelium_cupy",),
    "values.py": ("fhelium_cupy.ckks", "fhelium_cupy.runtime", "fhelium_cupy.interop"),
    "ckks": ("fhelium_cupy._cli", "fhelium_cupy._demo", "fhelium_cupy._bench"),
    "_progress.py": ("fhelium_cupy",),
    "_once.py": ("fhelium_cupy",),
}


def _imports(path: pathlib.Path) -> set[str]:
    return _imports_of(path.read_text(), path.relative_to(PACKAGE.parent).with_suffix("").parts)


def _imports_of(source: str, package_parts: tuple[str, ...]) -> set[str]:
    """Every module name ``source`` imports, relative imports resolved from ``package_parts``."""
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level]
                module = ".".join(base + ((node.module,) if node.module else ()))
            else:
                module = node.module or ""
            names.add(module)
            # ``from .. import ckks`` imports the module fhelium_cupy.ckks: name each alias too
            names.update(f"{module}.{alias.name}" if module else alias.name for alias in node.names)
    return names


def test_lower_layers_do_not_import_higher_layers():
    problems = []
    for key, forbidden in FORBIDDEN.items():
        target = PACKAGE / key
        files = [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
        for file in files:
            for name in _imports(file):
                if key in ("errors.py", "_progress.py", "_once.py") and name.split(".")[0] == "__future__":
                    continue
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    problems.append(f"{file.relative_to(PACKAGE.parent)} imports {name}")
    assert not problems, "\n".join(problems)


def test_package_import_does_no_cuda_or_torch_work():
    import subprocess
    import sys

    code = "import sys, fhelium_cupy; print('cupy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_the_import_scan_sees_every_import_form():
    source = "from .. import ckks\nfrom fhelium_cupy import _cli\nimport fhelium_cupy.ckks.engine as e\nfrom ..ckks.keys import X\n"
    names = _imports_of(source, ("fhelium_cupy", "runtime", "probe"))
    for expected in ("fhelium_cupy.ckks", "fhelium_cupy._cli", "fhelium_cupy.ckks.engine", "fhelium_cupy.ckks.keys"):
        assert expected in names, (expected, names)
