"""Kernel library: finds the CUDA C++ sources in ``kernels/`` and compiles them with NVRTC.

The sources live in ``<repo>/kernels`` in a checkout and in ``fhelium_cupy/_kernels`` in an
installed wheel (copied there by ``setup.py`` at build time). Every compile option the library
uses and every kernel name is defined here; no other module passes options to NVRTC. Callers
may add options through ``KernelOptions.extra`` (A/B builds); headers such options pull in from
elsewhere are not covered by the cache's header digest.

CuPy is imported lazily: importing this module never needs CuPy or a GPU. This module knows
nothing about CKKS.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fhelium_cupy._once import get_or_build
from fhelium_cupy.errors import CudaUnavailableError

__all__ = [
    "KERNEL_SOURCES",
    "KernelLibrary",
    "KernelOptions",
    "kernel_names",
    "kernel_source_dir",
    "nvrtc_compile_cubin",
    "require_cuda",
]

#: The compiled translation units; headers (``*.cuh``) are included from them.
KERNEL_SOURCES: tuple[str, ...] = ("rns.cu", "ntt.cu", "automorphism.cu", "keyswitch.cu")

_KERNEL_DECL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:[A-Z][A-Z0-9_]*_BOUNDS\s+)?(\w+)\s*\(')


def kernel_source_dir() -> Path:
    """Directory holding ``modarith.cuh`` and the ``.cu`` sources.

    Installed wheel first (``fhelium_cupy/_kernels``), then the checkout (``<repo>/kernels``).

    Raises:
        CudaUnavailableError: If neither location holds the kernel sources.
    """
    try:
        packaged = importlib.resources.files("fhelium_cupy").joinpath("_kernels")
        if isinstance(packaged, Path) and (packaged / "modarith.cuh").is_file():
            return packaged
    except (ModuleNotFoundError, FileNotFoundError):  # pragma: no cover - defensive
        pass
    checkout = Path(__file__).resolve().parents[2] / "kernels"
    if (checkout / "modarith.cuh").is_file():
        return checkout
    raise CudaUnavailableError(
        "the CUDA kernel sources are missing: neither fhelium_cupy/_kernels (installed wheel) nor "
        f"{checkout} (checkout) holds modarith.cuh; reinstall fhelium-cupy from a wheel built with setup.py"
    )


def kernel_names(kernel_dir: Path | None = None) -> dict[str, str]:
    """Map every ``extern "C" __global__`` kernel name to the source file that defines it."""
    directory = kernel_dir or kernel_source_dir()
    names: dict[str, str] = {}
    for source in KERNEL_SOURCES:
        for name in _KERNEL_DECL.findall((directory / source).read_text()):
            names[name] = source
    return names


@dataclass(frozen=True)
class KernelOptions:
    """NVRTC options of the kernel library.

    Attributes:
        std: C++ standard passed as ``--std``.
        extra: further NVRTC options, e.g. ``("-lineinfo",)``.
    """

    std: str = "c++17"
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Checked at construction: ``extra`` a sequence of option strings (a plain string was
        spread into characters), each macro in one option (``-DNAME=V``: ``define`` reads no
        other form, so a separate ``"-D", "NAME=V"`` pair would give the host and the kernels
        different values); a list becomes a tuple (hashable: the library cache's key).

        Raises:
            TypeError: ``std`` is not a string, or ``extra`` not a sequence of strings.
            ValueError: a macro option in two parts, with a space, or with an empty name.
        """
        if not isinstance(self.std, str) or not self.std:
            raise TypeError(f"KernelOptions.std must be a non-empty string such as 'c++17', got {self.std!r}")
        extra = self.extra
        if isinstance(extra, (str, bytes)) or not isinstance(extra, (tuple, list)):
            raise TypeError(f"KernelOptions.extra must be a tuple of option strings, got {type(extra).__name__} {extra!r}")
        for option in extra:
            if not isinstance(option, str):
                raise TypeError(f"KernelOptions.extra holds a {type(option).__name__} {option!r}; options are strings")
            if option in ("-D", "-U", "--define-macro", "--undefine-macro") or option.startswith(("-D ", "-U ")):
                raise ValueError(
                    f"KernelOptions.extra: pass each macro as one option, -DNAME=VALUE or -UNAME, got {option!r}"
                )
            macro = _macro_option(option)
            if macro is not None and not macro[0].isidentifier():
                raise ValueError(f"KernelOptions.extra: {option!r} names no macro")
        object.__setattr__(self, "extra", tuple(extra))

    def nvrtc_options(self, kernel_dir: Path) -> tuple[str, ...]:
        return (f"--std={self.std}", f"-I{kernel_dir}", *self.extra)

    def define(self, name: str, default: str) -> str:
        """The value NVRTC gives macro ``name`` from ``extra``, else ``default``: what a host
        launcher needs to know of a build-time kernel variant.

        Reads the one-option forms (the only ones ``KernelOptions`` accepts), in order (the
        last one wins): ``-DNAME=V`` and
        ``--define-macro=NAME=V`` set V; ``-DNAME`` and ``--define-macro=NAME`` set ``"1"``;
        ``-UNAME`` and ``--undefine-macro=NAME`` restore ``default`` (the source's own value).
        """
        value = default
        for option in self.extra:
            macro = _macro_option(option)
            if macro is not None and macro[0] == name:
                value = default if macro[1] is None else macro[1]
        return value

    def define_int(self, name: str, default: int) -> int:
        """``define(name)`` as an int (a launch geometry the host computes with).

        Raises:
            ValueError: the option gives ``name`` a value that is not an integer.
        """
        value = self.define(name, str(default))
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"kernel option -D{name}={value} must be an integer") from None


_DEFINE_PREFIXES = ("--define-macro=", "-D")
_UNDEFINE_PREFIXES = ("--undefine-macro=", "-U")


def _macro_option(option: str) -> tuple[str, str | None] | None:
    """``(name, value)`` of an NVRTC macro definition (value ``None``: undefined), else ``None``."""
    for prefix in _DEFINE_PREFIXES:
        if option.startswith(prefix):
            key, sep, rest = option[len(prefix):].partition("=")
            return key, rest if sep else "1"
    for prefix in _UNDEFINE_PREFIXES:
        if option.startswith(prefix):
            return option[len(prefix):], None
    return None


def _headers_digest(kernel_dir: Path) -> str:
    """Content hash of every header: CuPy's compile cache key does not cover ``-I`` headers."""
    digest = hashlib.sha256()
    for header in sorted(kernel_dir.glob("*.cuh")):
        digest.update(header.name.encode())
        digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


def _import_cupy() -> Any:
    try:
        import cupy
    except ImportError as error:
        raise CudaUnavailableError(
            "CuPy is not installed: pip install 'fhelium-cupy[cuda12]' (cupy-cuda12x) or "
            "'fhelium-cupy[cuda13]' (cupy-cuda13x)"
        ) from error
    return cupy


def _nvrtc_version() -> tuple[int, int]:
    try:
        from cupy_backends.cuda.libs import nvrtc

        return tuple(nvrtc.getVersion())  # type: ignore[return-value]
    except Exception as error:  # noqa: BLE001 - a missing library raises loader-specific errors
        raise CudaUnavailableError(
            "the NVRTC library is missing: pip install nvidia-cuda-nvrtc-cu12 (with cupy-cuda12x) or "
            f"nvidia-cuda-nvrtc (with cupy-cuda13x); loader said: {error}"
        ) from error


def require_cuda() -> Any:
    """Return the ``cupy`` module after checking CuPy, a visible GPU and NVRTC.

    Raises:
        CudaUnavailableError: naming the first missing piece (CuPy, GPU/driver, NVRTC), or
            an NVRTC of a newer CUDA major version than the driver runs: its code would
            fail at the first module load with a bare ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``.
            (A newer minor version of the same major is fine: CUDA's minor-version
            compatibility.)
    """
    cupy = _import_cupy()
    if not cupy.cuda.is_available():
        raise CudaUnavailableError(
            "no CUDA GPU is visible to CuPy (no driver, or CUDA_VISIBLE_DEVICES hides every device)"
        )
    major, minor = _nvrtc_version()
    driver = int(cupy.cuda.runtime.driverGetVersion())  # 1000 * major + 10 * minor
    if major > driver // 1000:
        fix = (f"install the CuPy and NVRTC wheels of CUDA {driver // 1000} ('fhelium-cupy[cuda{driver // 1000}]') "
               "or update the NVIDIA driver" if driver // 1000 in (12, 13) else "update the NVIDIA driver")
        raise CudaUnavailableError(
            f"NVRTC {major}.{minor} compiles for CUDA {major}, but the driver runs CUDA up to "
            f"{driver // 1000}.{driver % 1000 // 10}: {fix}"
        )
    return cupy


def nvrtc_compile_cubin(source: str, arch: str, *, options: KernelOptions | None = None) -> bytes:
    """Compile one kernel source with raw NVRTC to a cubin for ``arch`` (e.g. ``"sm_90"``).

    Needs CuPy's NVRTC binding and the NVRTC library, but no GPU or driver (used by CI).
    The bytes are what CuPy's ``nvrtc.getCUBIN`` returns, which (CuPy 13/14) drops the
    image's last byte: enough to prove the source compiles, not an image to load or
    disassemble (for SASS, call ``nvrtcGetCUBINSize``/``nvrtcGetCUBIN`` directly).

    Raises:
        CudaUnavailableError: If CuPy or NVRTC is missing.
        RuntimeError: If compilation fails; the message carries the NVRTC log.
    """
    _import_cupy()
    _nvrtc_version()
    from cupy_backends.cuda.libs import nvrtc

    kernel_dir = kernel_source_dir()
    opts = [f"--gpu-architecture={arch}", *(options or KernelOptions()).nvrtc_options(kernel_dir)]
    program = nvrtc.createProgram((kernel_dir / source).read_text(), source, [], [])
    try:
        try:
            nvrtc.compileProgram(program, opts)
        except Exception as error:
            log = nvrtc.getProgramLog(program)
            raise RuntimeError(f"NVRTC failed on {source} for {arch} with {opts}:\n{log}") from error
        return bytes(nvrtc.getCUBIN(program))
    finally:
        nvrtc.destroyProgram(program)


class KernelLibrary:
    """Compiled kernels of one device: one ``cupy.RawModule`` per source, built on first use.

    Direct construction is not public: use :meth:`for_device`. CuPy caches the compiled
    cubin per device and on disk; the header digest in the source keeps that cache honest.
    """

    _instances: dict[tuple[int, KernelOptions], KernelLibrary] = {}
    _lock = threading.Lock()

    def __init__(self, *, cupy: Any, device_id: int, kernel_dir: Path, options: KernelOptions) -> None:
        self._cupy = cupy
        self.device_id = device_id
        self.kernel_dir = kernel_dir
        self.options = options
        self._names = kernel_names(kernel_dir)
        self._modules: dict[str, Any] = {}
        self._functions: dict[str, Any] = {}
        self._load_lock = threading.RLock()  # one NVRTC compile per source when threads race

    @classmethod
    def for_device(cls, device: int | None = None, *, options: KernelOptions | None = None) -> KernelLibrary:
        """The shared library of ``device`` (default: CuPy's current device).

        Raises:
            CudaUnavailableError: If CuPy, a GPU or NVRTC is missing, or the sources are.
        """
        cupy = require_cuda()
        device_id = cupy.cuda.Device().id if device is None else int(device)
        options = options or KernelOptions()
        return get_or_build(cls._instances, (device_id, options), cls._lock,
                            lambda: cls(cupy=cupy, device_id=device_id, kernel_dir=kernel_source_dir(), options=options))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._names)

    def module(self, source: str) -> Any:
        """The ``cupy.RawModule`` of one source file (compiled lazily by CuPy)."""
        return get_or_build(self._modules, source, self._load_lock, self._build_module, source)

    def _build_module(self, source: str) -> Any:
        code = f"// fhelium_cupy headers {_headers_digest(self.kernel_dir)}\n{(self.kernel_dir / source).read_text()}"
        return self._cupy.RawModule(code=code, options=self.options.nvrtc_options(self.kernel_dir))

    def function(self, name: str) -> Any:
        """The ``cupy.RawKernel`` called ``name`` (compiled and loaded on first call).

        Raises:
            KeyError: no kernel source defines ``name``.
        """
        return get_or_build(self._functions, name, self._load_lock, self._load_function, name)

    def _load_function(self, name: str) -> Any:
        try:
            source = self._names[name]
        except KeyError:
            raise KeyError(f"no kernel named {name!r} in {self.kernel_dir}") from None
        with self._cupy.cuda.Device(self.device_id):
            return self.module(source).get_function(name)  # module() takes the same RLock

    def compile_all(self) -> None:
        """Compile and load every kernel now (before any capture)."""
        for name in self._names:
            self.function(name)
