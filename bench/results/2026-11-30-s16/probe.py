"""Independent-schedule graph time over host knobs of the CuPy backend (side by side)."""
import itertools, json, os, sys
from functools import partial
import numpy as np
sys.path.insert(0, os.getcwd())
from bench._timing import device_median_us
from fhelium_cupy.ckks import CkksEngine, encode_diagonals, matrix_vector, periodic_message, required_rotation_steps
from fhelium_cupy.runtime.cuda_graph import CudaGraphProgram

engine = CkksEngine("slots8192-scale40-depth7", device="cuda")
engine.generate_keys()
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (8, 8)); x = rng.uniform(-1, 1, 8)
keys = engine.rotation_keys(required_rotation_steps(8))
diags = encode_diagonals(engine, a)
ct = engine.encrypt_message(periodic_message(x, engine.num_slots))
fn = partial(matrix_vector, engine=engine, diagonals=diags, rotation_keys=keys, hoisted=False)
be = engine.backend
base = (be._branch_streams, be._ntt_v4_max_log_chunk, be._ntt_column_x2)
ref = fn(ct).data.get()
res = {}
variants = [(s, v4, x2) for s in (4, 7, 8) for v4 in (11, 0) for x2 in (2, 0)]
for rnd in range(2):
    for s, v4, x2 in (variants if rnd == 0 else variants[::-1]):
        be._branch_streams, be._ntt_v4_max_log_chunk, be._ntt_column_x2 = s, v4, x2
        eager_out = fn(ct).data.get()
        eager = device_median_us(partial(fn, ct), runs=20, warmup=3)
        p = CudaGraphProgram.capture(fn, example_inputs=(ct,))
        same = bool(np.array_equal(p.replay(ct, copy_output=True, synchronize=True).data.get(), ref)) and bool(np.array_equal(eager_out, ref))
        g = device_median_us(partial(p.replay, ct), runs=30, warmup=3)
        p.close()
        k = f"streams={s} v4max={v4} x2={x2}"
        res.setdefault(k, []).append((round(eager, 1), round(g, 1), same))
        print(f"{k:<28} eager {eager:8.1f} graph {g:7.1f} same {same}", flush=True)
json.dump(res, open(os.path.join(os.environ["OUT"], "probe.json"), "w"), indent=1)
