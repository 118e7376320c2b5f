"""Independent schedule: streams 1 vs 8, graph time and memory, N=2^14 and N=2^16."""
import gc, json, os, sys
from functools import partial
import numpy as np
sys.path.insert(0, os.getcwd())
import cupy
from bench._timing import device_median_us
from fhelium_cupy.ckks import CkksEngine, encode_diagonals, matrix_vector, periodic_message, required_rotation_steps
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

res = {}
for preset in ("slots8192-scale40-depth7", "slots32768-scale40-depth33-dnum4"):
    engine = CkksEngine(preset, device="cuda")
    engine.generate_keys()
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (8, 8)); x = rng.uniform(-1, 1, 8)
    keys = engine.rotation_keys(required_rotation_steps(8))
    diags = encode_diagonals(engine, a)
    ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
    fn = partial(matrix_vector, engine=engine, diagonals=diags, rotation_keys=keys, hoisted=False)
    be = engine.backend
    default = partial(matrix_vector, engine=engine, diagonals=diags, rotation_keys=keys)
    eager_out = default(ct).data.get()
    p = CudaGraphProgram.capture(default, example_inputs=(ct,))
    same = bool(np.array_equal(p.replay(ct, copy_output=True, synchronize=True).data.get(), eager_out))
    g = device_median_us(partial(p.replay, ct), runs=20, warmup=3)
    e = device_median_us(partial(default, ct), runs=10, warmup=2)
    p.close()
    err = float(np.max(np.abs(engine.decrypt_message(default(ct), real=True) - periodic_message(a @ x, engine.num_slots))))
    res[f"{preset} default"] = {"eager_us": round(e, 1), "graph_us": round(g, 1), "graph_equals_eager": same, "err": err}
    print(preset, "default", res[f"{preset} default"], flush=True)
    for rnd in range(2):
        for s in ((1, 8) if rnd == 0 else (8, 1)):
            be._branch_streams = s
            fn(ct)
            cupy.cuda.Device().synchronize()
            pool = cupy.cuda.MemoryPool()
            with cupy.cuda.using_allocator(pool.malloc):
                out = fn(ct)
                cupy.cuda.Device().synchronize()
                eager_peak = pool.total_bytes()
            del out; gc.collect(); pool.free_all_blocks()
            eager = device_median_us(partial(fn, ct), runs=10, warmup=2)
            p = CudaGraphProgram.capture(fn, example_inputs=(ct,))
            arena = p._arena.reserved_bytes
            g = device_median_us(partial(p.replay, ct), runs=20, warmup=3)
            same = bool(np.array_equal(p.replay(ct, copy_output=True, synchronize=True).data.get(), fn(ct).data.get()))
            p.close()
            k = f"{preset} streams={s}"
            res.setdefault(k, []).append({"eager_us": round(eager, 1), "graph_us": round(g, 1),
                                          "eager_peak_MiB": round(eager_peak / 2**20, 1), "arena_MiB": round(arena / 2**20, 1), "graph_equals_eager": same})
            print(k, res[k][-1], flush=True)
json.dump(res, open(os.path.join(os.environ["OUT"], "probe16.json"), "w"), indent=1)
