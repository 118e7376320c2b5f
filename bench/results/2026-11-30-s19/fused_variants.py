"""Change 48's fused ModUp-and-inner-product kernel, variants side by side: example 18 (8x8
matvec, N=2^14, ``hoisted=False``) with the ModUp and inner product as two launches (``two``),
fused as built (``fused``: at most 64 registers), fused with the kernel's register budget cut by
its occupancy floor (``b48``, ``b40``, ``b32``: blocks of at most 256 threads, 5 / 6 / 8 of them
per SM), and fused in the first rotation too (``first``: the source's NTT alone, published,
then its rotation fused like the others). Graph device us (four rounds alternated) and eager
host ms, one process; every variant bit-identical to the code's eager call.

Usage, from the repository root: python3 bench/results/2026-11-30-s19/fused_variants.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import (  # noqa: E402
    alternate,
    built_backend,
    capture_checked,
    example18,
    two_launch_backend,
    variant_measure,
)
from fhelium_cupy.ckks._evaluation import EvaluationMixin  # noqa: E402


def first_fused_rotation_batch(self, ct, keys, domain, *, hoisted):
    """``_rotation_batch`` (independent schedule) whose first task transforms the source alone,
    publishes it, and runs its own rotation through ``rotate_keyswitch`` like the others."""
    assert not hoisted and keys and domain == "ntt"
    rows, be = ct.prime_ids, self.backend
    batch, slots = self._entry_batch(ct.data, len(keys))

    def switch(first, key):
        def run() -> None:
            if first == 0:
                batch[:, 0] = be.ntt_forward(ct.data, rows)
                be.publish_to_branches()
                wait = None
            else:
                wait = be.wait_for_published
            done = be.rotate_keyswitch(ct.data[1], key.data, rows, key.galois_element, c0=batch[0, 0],
                                       domain=domain, out=slots[first:first + 1], before_c0=wait)
            assert done is not None
        return run

    be.run_independent([switch(i, key) for i, key in enumerate(keys)])
    return ct._with_data(batch, polynomial_domain=domain)


def main() -> None:
    engine, _, ct, fn, ref = example18()
    default = engine.backend
    code_batch = EvaluationMixin._rotation_batch

    def bounded(min_blocks: int) -> tuple:
        return built_backend(engine, "-DFHE_NTT_KIP_THREADS=256", f"-DFHE_NTT_KIP_MIN_BLOCKS={min_blocks}"), code_batch

    variants = {
        "two": (two_launch_backend(engine), code_batch),
        "fused": (default, code_batch),
        "b48": bounded(5),
        "b40": bounded(6),
        "b32": bounded(8),
        "first": (default, first_fused_rotation_batch),
    }

    def use(name: str | None) -> None:
        backend, batch = variants[name] if name else (default, code_batch)
        engine.backend = backend
        EvaluationMixin._rotation_batch = batch

    programs = capture_checked(list(variants), use, lambda: use(None), fn, ct, ref)
    measure = variant_measure(programs, use, lambda: use(None), fn, ct, cupy.cuda.Stream(non_blocking=True))
    alternate([f"{v} device_us" for v in variants] + ["two eager_ms", "fused eager_ms"], 4, measure, digits=3)


if __name__ == "__main__":
    main()
