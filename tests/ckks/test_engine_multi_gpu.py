"""An engine on the second GPU, driven from threads whose current device is the first.

CuPy allocates and launches on the calling thread's current device; the engine must run
on its own device anyway (``ckks/_device_scope.py``). Bit-identical to the NumPy backend,
every output on device 1, and the current device left as the caller had it.
"""

from __future__ import annotations

import numpy as np
import pytest

from fhelium_cupy.ckks import CkksEngine, linalg
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram
from tests.helpers.ckks_engines import random_message
from tests.helpers.threads import run_together

pytestmark = pytest.mark.gpu

PRESET = "test-n4096-scale40"


@pytest.fixture
def second_gpu(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    return cp


def _on_device_1(cp, value):
    assert value.data.device.id == 1, f"output on device {value.data.device.id}, the engine is on cuda:1"
    return value.data.get()


def test_an_engine_on_the_second_gpu_runs_there_from_device_0(second_gpu):
    cp = second_gpu
    cpu = CkksEngine(PRESET, device="cpu", insecure=True)
    chain = cpu.generate_keys()
    with cp.cuda.Device(0):
        gpu = CkksEngine(PRESET, device="cuda:1", insecure=True)
        gpu.generate_keys(secret_key=chain.secret_key.to("cuda:1"))
        assert gpu.device == "cuda:1" and cp.cuda.runtime.getDevice() == 0
        m = random_message(cpu, 31)
        ct = cpu.encrypt_message(m)
        gct = ct.to("cuda:1")
        key = cpu.rotation_key(2)
        cases = [
            (cpu.rotate_with_key(ct, key), gpu.rotate_with_key(gct, key.to("cuda:1"))),
            (cpu.coefficient_domain_to_ntt_domain(ct), gpu.coefficient_domain_to_ntt_domain(gct)),
        ]
        nct = cpu.coefficient_domain_to_ntt_domain(ct)
        relin = cpu.relinearization_key()
        cases.append((cpu.relinearize(cpu.multiply(nct, nct), relin),
                      gpu.relinearize(gpu.multiply(nct.to("cuda:1"), nct.to("cuda:1")), relin.to("cuda:1"))))
        for want, got in cases:
            np.testing.assert_array_equal(_on_device_1(cp, got), np.asarray(want.data))
        fresh = gpu.encrypt_message(m)  # the engine's own randomness and keys, on device 1
        _on_device_1(cp, fresh)
        np.testing.assert_allclose(gpu.decrypt_message(fresh), m, atol=1e-6)
        assert cp.cuda.runtime.getDevice() == 0  # the caller's current device is unchanged


def test_threads_drive_an_engine_on_the_second_gpu_and_capture_there(second_gpu):
    cp = second_gpu
    engine = CkksEngine(PRESET, device="cuda:1", insecure=True)
    engine.generate_keys()
    n = 8
    a = np.random.default_rng(32).uniform(-1, 1, (n, n)) / n
    keys = engine.rotation_keys(linalg.required_rotation_steps(n))
    diagonals = linalg.encode_diagonals(engine, a)

    def worker(i: int) -> float:
        seed = i + 1
        assert cp.cuda.runtime.getDevice() == 0  # a new thread starts on device 0
        x = np.random.default_rng(seed).uniform(-1, 1, n)
        ct = engine.encrypt_message(linalg.periodic_message(x, engine.num_slots))

        def schedule(c):
            return linalg.matrix_vector(c, engine=engine, diagonals=diagonals, rotation_keys=keys)

        eager = schedule(ct)
        program = CudaGraphProgram.capture(schedule, example_inputs=(ct,), warmup=1)
        try:
            assert program.device == "cuda:1"
            replayed = program.replay(ct, copy_output=True)
            with cp.cuda.Device(1):
                cp.cuda.get_current_stream().synchronize()
            np.testing.assert_array_equal(_on_device_1(cp, replayed), _on_device_1(cp, eager))
            return float(np.abs(engine.decrypt_message(replayed, real=True)[:n] - a @ x).max())
        finally:
            program.close()

    matvec_errors = run_together(worker, 2)  # re-raises a worker's failure here
    assert len(matvec_errors) == 2 and max(matvec_errors) < 1e-6
