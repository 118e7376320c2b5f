"""Change 47 side by side: example 18 (8x8 matvec, N=2^14, ``hoisted=False``) with c0's forward
NTT in every rotation's ModUp pass (``old``, the code before) against once, in the first
rotation's pass, published to the others (``new``): graph device us and eager host ms, four
rounds alternated, one process; both bit-identical to the code's eager call.

Usage, from the repository root: python3 bench/results/2026-11-30-s18/shared_c0.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import cupy  # noqa: E402

from bench._example18 import alternate, capture_checked, example18, variant_measure  # noqa: E402
from fhelium_cupy.ckks._evaluation import EvaluationMixin  # noqa: E402


def old_rotation_batch(self, ct, keys, domain, *, hoisted):
    """``_rotation_batch`` before change 47: every task transforms c0 in its own ModUp pass."""
    rows = ct.prime_ids
    batch, slots = self._entry_batch(ct.data, len(keys))

    def switch(first, part):
        def run() -> None:
            if first == 0:
                source, digits = self._hoisted_inputs(ct, domain, whole=True)
                batch[:, 0] = source
                c0 = source[0]
            else:
                c0, digits = self._hoisted_inputs(ct, domain)
            self._hoisted_switch(digits, rows, part, c0, domain, slots[first:first + len(part)])
        return run

    tasks = [switch(0, keys)] if hoisted else [switch(i, [key]) for i, key in enumerate(keys)]
    self.backend.run_independent(tasks)
    return ct._with_data(batch, polynomial_domain=domain)


def main() -> None:
    _, _, ct, fn, ref = example18()
    new = EvaluationMixin._rotation_batch
    variants = {"old": old_rotation_batch, "new": new}

    def use(name: str) -> None:
        EvaluationMixin._rotation_batch = variants[name]

    programs = capture_checked(list(variants), use, lambda: use("new"), fn, ct, ref)

    stream = cupy.cuda.Stream(non_blocking=True)

    measure = variant_measure(programs, use, lambda: use("new"), fn, ct, stream)

    alternate([f"{n} {w}" for n in variants for w in ("device_us", "eager_ms")], 4, measure, digits=3)


if __name__ == "__main__":
    main()
