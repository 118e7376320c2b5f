"""Every kernel source compiles with NVRTC for sm_80 and sm_90 (no GPU or driver needed).

Skipped, with the exact missing piece, only when CuPy or the NVRTC library is not installed
(CI installs ``cupy-cuda12x nvidia-cuda-nvrtc-cu12``).
"""

from __future__ import annotations

import pytest

from fhelium_cupy.runtime import kernels


def _nvrtc_missing_reason() -> str | None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12)"
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as error:  # noqa: BLE001 - loader errors differ between CuPy versions
        return f"the NVRTC library is not installed (pip install nvidia-cuda-nvrtc-cu12): {error}"
    return None


_REASON = _nvrtc_missing_reason()


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", kernels.KERNEL_SOURCES)
def test_kernel_source_compiles_to_a_cubin_with_nvrtc(source, arch):
    # no skip here: with NVRTC present (the skipif above), missing sources or a compile error fail
    cubin = kernels.nvrtc_compile_cubin(source, arch)
    assert len(cubin) > 0


def test_kernel_sources_include_only_their_own_headers():
    directory = kernels.kernel_source_dir()
    own = {p.name for p in directory.glob("*.cuh")}
    for path in list(directory.glob("*.cu")) + list(directory.glob("*.cuh")):
        for line in path.read_text().splitlines():
            if line.startswith("#include"):
                name = line.split('"')[1] if '"' in line else line
                assert name in own, f"{path.name} includes {line.strip()!r}: only kernels/*.cuh may be included"


def test_every_kernel_name_is_declared_once_and_named_family_operation():
    names = kernels.kernel_names()
    families = ("rns_", "ntt_", "automorphism_", "keyswitch_", "rescale_", "graph_")
    assert len(names) >= 20
    for name in names:
        assert name.startswith(families), name


class _FakeCuda:
    """The two facts ``require_cuda`` reads from CuPy: a visible GPU and the driver version."""

    def __init__(self, driver: int) -> None:
        self.runtime = type("runtime", (), {"driverGetVersion": staticmethod(lambda: driver)})

    @staticmethod
    def is_available() -> bool:
        return True


@pytest.mark.parametrize(
    ("nvrtc", "driver", "refused"),
    [((13, 0), 12080, True), ((12, 9), 12040, False), ((12, 4), 13000, False), ((13, 0), 13000, False), ((12, 4), 11080, True)],
)
def test_an_nvrtc_newer_than_the_driver_is_refused_up_front(monkeypatch, nvrtc, driver, refused):
    from fhelium_cupy.errors import CudaUnavailableError

    fake = type("cupy", (), {"cuda": _FakeCuda(driver)})
    monkeypatch.setattr(kernels, "_import_cupy", lambda: fake)
    monkeypatch.setattr(kernels, "_nvrtc_version", lambda: nvrtc)
    if not refused:
        assert kernels.require_cuda() is fake
        return
    with pytest.raises(CudaUnavailableError) as info:
        kernels.require_cuda()
    message = str(info.value)
    assert f"NVRTC {nvrtc[0]}.{nvrtc[1]}" in message
    assert f"CUDA up to {driver // 1000}.{driver % 1000 // 10}" in message
    if driver // 1000 == 12:
        assert "fhelium-cupy[cuda12]" in message
    else:
        assert "update the NVIDIA driver" in message and "[cuda11]" not in message


def test_racing_threads_compile_each_source_once_and_load_each_kernel_once():
    """KernelLibrary builds a module per source and a function per name once, whatever the
    interleaving (a fake CuPy records what would be compiled and loaded)."""
    import contextlib
    import types

    from tests.helpers.threads import run_together

    compiled: list[str] = []
    loaded: list[str] = []

    class FakeModule:
        def __init__(self, code, options):
            compiled.append(code.splitlines()[1] if "\n" in code else code)

        def get_function(self, name):
            loaded.append(name)
            return ("kernel", name)

    fake = types.SimpleNamespace(RawModule=FakeModule,
                                 cuda=types.SimpleNamespace(Device=lambda index: contextlib.nullcontext()))
    library = kernels.KernelLibrary(cupy=fake, device_id=0, kernel_dir=kernels.kernel_source_dir(),
                                    options=kernels.KernelOptions())
    names = sorted(library.names)[:12]
    got = run_together(lambda _: [library.function(name) for name in names], 6)
    assert all(result == [("kernel", name) for name in names] for result in got)
    assert sorted(loaded) == names  # one load per kernel
    assert len(compiled) == len({kernels.kernel_names()[name] for name in names})  # one compile per source
    with pytest.raises(KeyError, match="no kernel named"):
        library.function("no_such_kernel")


def test_host_constants_match_the_kernel_sources():
    """The CuPy backend's copies of kernel constants (launch shapes, shared memory, the
    instantiated source counts) equal what the sources define, so that one cannot change
    without the other."""
    import re

    from fhelium_cupy.ckks.backends import cupy_backend as cb

    source = {path.name: path.read_text() for path in kernels.kernel_source_dir().glob("*.cu")}

    def define(file: str, name: str) -> int:
        found = re.findall(rf"^#define {name} (\d+)$", source[file], flags=re.MULTILINE)
        assert len(found) == 1, (file, name, found)
        return int(found[0])

    def sizes(family: str) -> tuple[int, ...]:
        found = sorted({int(s) for s in re.findall(rf"\b{family}_s(\d+)\(", source["keyswitch.cu"])})
        assert found[0] == 0, family  # s0: the any-size loop
        return tuple(found[1:])

    assert cb._BYTES_COLUMN_SLOT == define("keyswitch.cu", "FHE_BYTES_COLUMN_SLOT")
    assert cb._CRT_MAX_LIMBS == define("rns.cu", "FHE_CRT_MAX_LIMBS")
    assert cb._COEFFS_PER_THREAD_LOG == define("ntt.cu", "FHE_LV")
    assert cb._BASE_CONVERT_SIZES == sizes("keyswitch_base_convert")
    assert cb._CONVERT_COMBINE_SIZES == sizes("keyswitch_moddown_convert_combine")
