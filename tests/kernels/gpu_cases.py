"""Shared GPU check cases: every CupyBackend primitive against the NumPy reference.

Used by ``test_cupy_backend_gpu.py`` (pytest) and ``bench/gpu_smoke.py`` (one PASS/FAIL line
per primitive). Each case returns ``(got, want)`` as NumPy arrays; ``compare`` describes the
first mismatch (index, values, modulus) so a log line is enough to start debugging.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.helpers import ring_oracle as ro

FHELIUM_Q = (1099510054913, 1099515691009, 1099508121601, 1099515789313,
             1099507695617, 1099516280833, 1099506515969, 1099521949697)
FHELIUM_P = (1152921504606748673,)


@functools.cache
def context(name: str) -> ro.RingTestContext:
    if name == "n4096":
        n = 1 << 12
        q = ro.ntt_primes(61, 1, n) + ro.ntt_primes(55, 1, n) + ro.ntt_primes(50, 1, n) + ro.ntt_primes(40, 2, n)
        p = ro.ntt_primes(60, 2, n)
        return ro.make_context(n, q, p, dnum=2)
    if name == "n4096w":  # ModUp digits of 9 and 8 sources below 2^48 (the tensor-core conversion),
        n = 1 << 12      # with 16 and 17 targets: 2 and 3 target groups of 8
        q = ro.ntt_primes(47, 6, n) + ro.ntt_primes(41, 6, n) + ro.ntt_primes(40, 5, n)
        return ro.make_context(n, q, ro.ntt_primes(60, 8, n), dnum=2)
    if name == "n16384":
        return ro.make_context(1 << 14, FHELIUM_Q, FHELIUM_P, dnum=8)
    if name == "n8192":  # one-prime digits and one special prime with 3 NTT column stages
        n = 1 << 13
        return ro.make_context(n, ro.ntt_primes(40, 4, n), ro.ntt_primes(60, 1, n), dnum=4)
    if name == "n65536":
        n = 1 << 16
        return ro.make_context(n, ro.ntt_primes(40, 35, n), ro.ntt_primes(60, 4, n), dnum=9)
    raise KeyError(name)


CONTEXTS = ("n4096", "n16384", "n65536")


def reference(ctx: Any) -> Any:
    from fhelium_cupy.ckks.backends.numpy_backend import NumpyBackend

    return NumpyBackend(ctx)


def rand(ctx: Any, rows: tuple[int, ...], lead: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    a = np.stack([rng.integers(0, ctx.moduli[r], lead + (ctx.ring_degree,), dtype=np.uint64) for r in rows], axis=-2)
    flat = a.reshape(-1, len(rows), ctx.ring_degree)
    for i, r in enumerate(rows):  # edge values
        flat[0, i, :3] = (0, ctx.moduli[r] - 1, ctx.moduli[r] // 2)
    return a


def compare(got: np.ndarray, want: np.ndarray, rows: tuple[int, ...], ctx: Any) -> str | None:
    """None when equal, else a one-line description of the first mismatch."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != reference {want.shape}"
    bad = np.argwhere(got != want)
    if len(bad) == 0:
        return None
    idx = tuple(int(i) for i in bad[0])
    limb = idx[-2] if len(idx) >= 2 else -1
    q = ctx.moduli[rows[limb]] if 0 <= limb < len(rows) else None
    return (f"{len(bad)}/{got.size} mismatches; first at {idx}: got {int(got[idx])} want {int(want[idx])} "
            f"(limb {limb}, prime id {rows[limb] if q else '?'}, q={q}); bad limbs {sorted({int(b[-2]) for b in bad})[:12]}")


def _levels(ctx: Any, name: str) -> dict[str, tuple[int, ...]]:
    q = tuple(range(ctx.q_count))
    p = tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
    if name == "n65536":  # spot checks: a low level keeps the NumPy reference quick
        return {"rows": q[:6], "mixed": (q[3], q[0], p[1], q[5]), "ks": q[:6]}
    return {"rows": q, "mixed": (q[-1],) + q[:-2] + p[:1], "ks": q[:-1]}


Case = Callable[[Any, Any, Any, np.random.Generator, dict], tuple[np.ndarray, np.ndarray, tuple[int, ...]]]


def _elementwise(op: str) -> Case:
    def run(gpu, ref, ctx, rng, lv):
        rows = lv["mixed"]
        a, b = rand(ctx, rows, (2, 3), rng), rand(ctx, rows, (2, 3), rng)
        if op in ("neg", "to_montgomery", "from_montgomery"):
            return gpu.to_numpy(getattr(gpu, op)(gpu.asarray(a), rows)), getattr(ref, op)(a, rows), rows
        if op == "mul_scalar":
            s = [int(v) for v in rng.integers(-(2**62), 2**62, len(rows))]
            s[0] = 2**200 + 7
            return gpu.to_numpy(gpu.mul_scalar(gpu.asarray(a), s, rows)), ref.mul_scalar(a, s, rows), rows
        return gpu.to_numpy(getattr(gpu, op)(gpu.asarray(a), gpu.asarray(b), rows)), getattr(ref, op)(a, b, rows), rows

    return run


def _broadcast_mul(gpu, ref, ctx, rng, lv):
    rows = lv["rows"]
    a, b = rand(ctx, rows, (2,), rng), rand(ctx, rows, (), rng)
    return gpu.to_numpy(gpu.mul_montgomery(gpu.asarray(a), gpu.asarray(b), rows)), ref.mul_montgomery(a, b, rows), rows


def _add_out_alias(gpu, ref, ctx, rng, lv):
    rows = lv["rows"]
    a, b = rand(ctx, rows, (2,), rng), rand(ctx, rows, (2,), rng)
    x = gpu.asarray(a)
    gpu.add(x, gpu.asarray(b), rows, out=x)
    return gpu.to_numpy(x), ref.add(a, b, rows), rows


def _sum_batch(gpu, ref, ctx, rng, lv):
    rows = lv["rows"]
    a = rand(ctx, rows, (2, 5, 2), rng)
    return gpu.to_numpy(gpu.sum_batch(gpu.asarray(a), 1, rows)), ref.sum_batch(a, 1, rows), rows


def _mul_montgomery_sum(gpu, ref, ctx, rng, lv):
    rows = lv["rows"]
    a, b = rand(ctx, rows, (2, 5), rng), rand(ctx, rows, (5,), rng)
    got = gpu.mul_montgomery_sum(gpu.asarray(a), gpu.asarray(b), rows)
    return gpu.to_numpy(got), ref.mul_montgomery_sum(a, b, rows), rows


def _mul_montgomery_sum_strided(gpu, ref, ctx, rng, lv):
    """The weights as the leading rows of a taller array (the Q limbs of a QP-basis plaintext),
    read in place."""
    rows = lv["rows"]
    a, tall = rand(ctx, rows, (2, 5), rng), rand(ctx, rows + rows[:2], (5,), rng)
    b = tall[:, :len(rows)]
    got = gpu.mul_montgomery_sum(gpu.asarray(a), gpu.asarray(tall)[:, :len(rows)], rows)
    return gpu.to_numpy(got), ref.mul_montgomery_sum(a, b, rows), rows


def _tensor(gpu, ref, ctx, rng, lv):
    rows = lv["rows"]
    a, b = rand(ctx, rows, (2, 2), rng), rand(ctx, rows, (2, 2), rng)
    return gpu.to_numpy(gpu.tensor_product(gpu.asarray(a), gpu.asarray(b), rows)), ref.tensor_product(a, b, rows), rows


def _ntt(inverse: bool, key: str) -> Case:
    def run(gpu, ref, ctx, rng, lv):
        rows = lv[key]
        a = rand(ctx, rows, (2,), rng)
        op = "ntt_inverse" if inverse else "ntt_forward"
        return gpu.to_numpy(getattr(gpu, op)(gpu.asarray(a), rows)), getattr(ref, op)(a, rows), rows

    return run


def _ntt_roundtrip(gpu, ref, ctx, rng, lv):
    rows = lv["mixed"]
    a = rand(ctx, rows, (3,), rng)
    x = gpu.asarray(a)
    y = gpu.ntt_forward(x, rows)
    gpu.ntt_inverse(y, rows, out=y)
    return gpu.to_numpy(y), a, rows


def _automorphism(domain: str, g_of_n: Callable[[int], int]) -> Case:
    def run(gpu, ref, ctx, rng, lv):
        rows = lv["mixed"]
        g = g_of_n(ctx.ring_degree)
        a = rand(ctx, rows, (2,), rng)
        got = gpu.to_numpy(gpu.automorphism(gpu.asarray(a), g, rows, domain=domain))
        return got, ref.automorphism(a, g, rows, domain=domain), rows

    return run


_BATCHES = ((2,), (), (3,))  # batched, unbatched, and a batch whose entries are not a component pair


def _stacked(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(got, want) of several batch shapes as one pair of ``[entries, limbs, N]`` arrays."""
    got, want = zip(*((g.reshape((-1,) + g.shape[-2:]), w.reshape((-1,) + w.shape[-2:])) for g, w in pairs))
    return np.concatenate(got), np.concatenate(want)


def _rescale(domain: str, key: str = "mixed") -> Case:
    """Rescale of every batch shape in ``_BATCHES`` over ``lv[key]`` (``"suffix"``: the
    key-switch rows from prime 1 on)."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if key == "suffix" else lv[key]
        pairs = []
        for lead in _BATCHES:
            a = rand(ctx, rows, lead, rng)
            pairs.append((gpu.to_numpy(gpu.rescale(gpu.asarray(a), rows, domain=domain)),
                          ref.rescale(a, rows, domain=domain)))
        return (*_stacked(pairs), rows[1:])

    return run


def _moddown(key: str) -> Case:
    """Encryption's coefficient ModDown (``moddown``) of every batch shape in ``_BATCHES`` over
    ``lv[key]`` (``"suffix"``: a rescaled level)."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if key == "suffix" else lv[key]
        qp = rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
        pairs = []
        for lead in _BATCHES:
            x = rand(ctx, qp, lead, rng)
            pairs.append((gpu.to_numpy(gpu.moddown(gpu.asarray(x), rows)), ref.moddown(x, rows)))
        return (*_stacked(pairs), rows)

    return run


def _rns_from_integers(gpu, ref, ctx, rng, lv):
    """Signed integers up to 2**62 (the edges included) to residues over every row."""
    rows = tuple(range(len(ctx.moduli)))
    c = rng.integers(-(2**62) + 1, 2**62, (2, 3, ctx.ring_degree), dtype=np.int64)
    c[0, 0, :6] = (0, 1, -1, 2**62 - 1, -(2**62) + 1, -int(ctx.moduli[0]))
    c[1] = rng.integers(-40, 41, c[1].shape)  # sampled noise is small
    return gpu.to_numpy(gpu.rns_from_integers(c, rows)), ref.rns_from_integers(c, rows), rows


def _centered_crt(key: str) -> Case:
    """Decoding's CRT (float64 centred integers) of every batch shape over ``lv[key]``, edge
    residues included, as one ``[entries, 1, N]`` pair of float arrays viewed as words (the
    comparison is bit for bit)."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv[key]
        pairs = []
        for lead in _BATCHES:
            a = rand(ctx, rows, lead, rng)
            got = np.asarray(gpu.centered_crt_to_float(gpu.asarray(a), rows), dtype=np.float64)
            want = ref.centered_crt_to_float(a, rows)
            pairs.append((got.view(np.uint64)[..., None, :], want.view(np.uint64)[..., None, :]))
        return (*_stacked(pairs), (0,))

    return run


def _modup(key: str) -> Case:
    def run(gpu, ref, ctx, rng, lv):
        rows = lv[key]
        c = rand(ctx, rows, (2,), rng)
        out_rows = rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
        return gpu.to_numpy(gpu.modup(gpu.asarray(c), rows)), ref.modup(c, rows), out_rows

    return run


def _modup_ntt_hint(key: str) -> Case:
    """ModUp of a batched input with its NTT given (``c_ntt``): each digit's own rows are copied
    from the hint and the forward NTT skips them; the reference takes no hint. ``key="suffix"``
    is a rescaled level (first primes dropped: digits start mid-way)."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv[key] if key != "suffix" else lv["ks"][1:]
        c = rand(ctx, rows, (2,), rng)
        c_ntt = ref.ntt_forward(c, rows)
        out_rows = rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
        got = gpu.modup(gpu.asarray(c), rows, c_ntt=gpu.asarray(c_ntt))
        return gpu.to_numpy(got), ref.modup(c, rows), out_rows

    return run


def _ntt_forward_and_modup(rescaled_level: bool = False) -> Case:
    """``ntt_forward_and_modup`` of an unbatched ciphertext for every choice of components (one
    pass on the GPU when every digit is one prime: the NTT is then a view of the ModUp's storage,
    components L + K rows apart), and a 3-key linear transform that takes that view as its
    ``c``; against the NumPy backend's separate transforms."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if rescaled_level else lv["ks"]
        targets = rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
        n = ctx.ring_degree
        c = rand(ctx, rows, (2,), rng)
        got, want = [], []
        for components in ((0, 1), (0,), (1,)):
            ntt, digits = gpu.ntt_forward_and_modup(gpu.asarray(c), rows, components=components)
            got += [gpu.to_numpy(ntt).reshape(-1, n), gpu.to_numpy(digits).reshape(-1, n)]
            want += [ref.ntt_forward(c[list(components)], rows).reshape(-1, n), ref.modup(c[1], rows).reshape(-1, n)]
        c_ntt, digits = gpu.ntt_forward_and_modup(gpu.asarray(c), rows)
        keys = [random_key(ctx, rng) for _ in range(3)]
        gs = [5, pow(5, 3, 2 * n), 2 * n - 1]
        weights = rand(ctx, targets, (4,), rng)
        got.append(gpu.to_numpy(gpu.keyswitch_linear_transform(
            digits, [gpu.asarray(k) for k in keys], rows, gs, gpu.asarray(weights), c_ntt)).reshape(-1, n))
        want.append(ref.keyswitch_linear_transform(ref.modup(c[1], rows), keys, rows, gs, weights,
                                                   ref.ntt_forward(c, rows)).reshape(-1, n))
        return np.concatenate(got), np.concatenate(want), rows

    return run


def random_key(ctx: Any, rng: np.random.Generator) -> np.ndarray:
    all_rows = tuple(range(len(ctx.moduli)))
    return np.stack([rand(ctx, all_rows, (2,), rng) for _ in ctx.digits])


def _keyswitch(galois: bool, domain: str = "coefficient", rescaled_level: bool = False) -> Case:
    """One key switch; the NTT-domain output is compared with ntt_forward of the reference's
    coefficient-domain output (the reference never takes the NTT-domain ModDown path).
    ``rescaled_level``: rows from prime 1 on."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if rescaled_level else lv["ks"]
        c = rand(ctx, rows, (1,), rng)
        digits = ref.modup(c, rows)
        key = random_key(ctx, rng)
        g = 5 if galois else None
        got = gpu.keyswitch_from_digits(gpu.asarray(digits), gpu.asarray(key), rows, galois_element=g, domain=domain)
        want = ref.keyswitch_from_digits(digits, key, rows, galois_element=g)
        return gpu.to_numpy(got), (ref.ntt_forward(want, rows) if domain == "ntt" else want), rows

    return run


def _keyswitch_many(domain: str) -> Case:
    """Batched hoisting: three (key, Galois element) pairs, one of them without permutation,
    with and without the rotated c0, over a batch of two; references from coefficient-domain
    single key switches."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"]
        c = rand(ctx, rows, (2,), rng)  # a batch of 2: entries (key, component, batch entry)
        digits = ref.modup(c, rows)
        keys = [random_key(ctx, rng) for _ in range(3)]
        n = ctx.ring_degree
        gs = [5, None, pow(5, 3, 2 * n)]
        c0 = rand(ctx, rows, (2,), rng)
        c0_in = ref.ntt_forward(c0, rows) if domain == "ntt" else c0
        gpu_keys = [gpu.asarray(k) for k in keys]
        got = gpu.keyswitch_from_digits_many(gpu.asarray(digits), gpu_keys, rows, gs, domain=domain)
        got_c0 = gpu.keyswitch_from_digits_many(gpu.asarray(digits), gpu_keys, rows, gs, c0=gpu.asarray(c0_in),
                                                domain=domain)
        want = np.stack([ref.keyswitch_from_digits(digits, k, rows, galois_element=g) for k, g in zip(keys, gs)])
        want_c0 = want.copy()
        for i, g in enumerate(gs):
            rotated = c0 if g is None else ref.automorphism(c0, g, rows, domain="coefficient")
            want_c0[i, 0] = ref.add(rotated, want[i, 0], rows)
        # the same into a strided out: the component-major storage of a batch, axes swapped
        store = gpu.xp.zeros((2, len(keys) + 1) + got.shape[2:], dtype=np.uint64)
        gpu.keyswitch_from_digits_many(gpu.asarray(digits), gpu_keys, rows, gs, c0=gpu.asarray(c0_in), domain=domain,
                                       out=gpu.xp.swapaxes(store[:, 1:], 0, 1))
        strided = gpu.to_numpy(gpu.xp.ascontiguousarray(gpu.xp.swapaxes(store[:, 1:], 0, 1)))
        assert not gpu.to_numpy(store[:, 0]).any(), "out= wrote outside its view"
        got, want = np.stack([gpu.to_numpy(got), gpu.to_numpy(got_c0), strided]), np.stack([want, want_c0, want_c0])
        if domain == "ntt":
            want = ref.ntt_forward(want, rows)
        return got.reshape((-1,) + want.shape[-2:]), want.reshape((-1,) + want.shape[-2:]), rows

    return run


def _rotate_keyswitch(domain: str, rescaled_level: bool = False) -> Case:
    """``rotate_keyswitch`` (a rotation's ModUp and inner product in one pass where every digit
    is one prime), with the rotated c0 and into a strided ``out``, against the reference's
    single key switch of ``modup(c)`` plus the rotated c0. Where the backend declines (digits
    of several primes: ``None``) the two calls it stands for are checked instead, so the case
    runs on every context."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if rescaled_level else lv["ks"]
        c, c0 = rand(ctx, rows, (), rng), rand(ctx, rows, (), rng)
        key, g = random_key(ctx, rng), pow(5, 3, 2 * ctx.ring_degree)
        c0_in = ref.ntt_forward(c0, rows) if domain == "ntt" else c0
        store = gpu.xp.zeros((2, 2, len(rows), ctx.ring_degree), dtype=np.uint64)
        out = gpu.xp.swapaxes(store[:, 1:], 0, 1)
        waited = []
        got = gpu.rotate_keyswitch(gpu.asarray(c), gpu.asarray(key), rows, g, c0=gpu.asarray(c0_in), domain=domain,
                                   out=out, before_c0=lambda: waited.append(True))
        if got is None:
            assert not waited
            gpu.keyswitch_from_digits_many(gpu.modup(gpu.asarray(c), rows), [gpu.asarray(key)], rows, [g],
                                           c0=gpu.asarray(c0_in), domain=domain, out=out)
        else:
            assert waited == [True] and got is out
        assert not gpu.to_numpy(store[:, 0]).any(), "out= wrote outside its view"
        want = ref.keyswitch_from_digits(ref.modup(c, rows), key, rows, galois_element=g)
        want[0] = ref.add(ref.automorphism(c0, g, rows, domain="coefficient"), want[0], rows)
        if domain == "ntt":
            want = ref.ntt_forward(want, rows)
        return gpu.to_numpy(gpu.xp.ascontiguousarray(out[0])), want, rows

    return run


def _keyswitch_linear_transform(rescale: bool, rescaled_level: bool = False, domain: str | None = None) -> Case:
    """Double hoisting: three rotations' weighted inner products, the P-scaled c terms and one
    NTT-domain ModDown (with ``rescale``: one division by P q_0 into the coefficient domain),
    against the NumPy backend; with the accumulator in 1, 2 and 4 rotation parts (at 4, one
    part has no rotation). ``rescaled_level``: rows from prime 1 on (a level after one
    rescale, where q_0 is not prime 0). ``domain``: the other output domain than the default."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if rescaled_level else lv["ks"]
        targets = rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))
        n = ctx.ring_degree
        c = ref.ntt_forward(rand(ctx, rows, (2,), rng), rows)
        digits = ref.modup(ref.ntt_inverse(c[1], rows), rows)
        keys = [random_key(ctx, rng) for _ in range(3)]
        gs = [5, pow(5, 3, 2 * n), 2 * n - 1]
        weights = rand(ctx, targets, (4,), rng)
        want = ref.keyswitch_linear_transform(digits, keys, rows, gs, weights, c, rescale=rescale, domain=domain)
        chosen, got = gpu.linear_transform_parts, []
        try:
            for parts in (1, 2, 4):
                gpu.linear_transform_parts = parts
                got.append(gpu.to_numpy(gpu.keyswitch_linear_transform(
                    gpu.asarray(digits), [gpu.asarray(k) for k in keys], rows, gs, gpu.asarray(weights),
                    gpu.asarray(c), rescale=rescale, domain=domain)))
        finally:
            gpu.linear_transform_parts = chosen
        return np.stack(got), np.stack([want] * len(got)), rows[1:] if rescale else rows

    return run


def _keyswitch_add_rescale(domain: str, rescaled_level: bool = False) -> Case:
    """Relinearize and rescale with one rounding for every batch shape in ``_BATCHES``: the inner
    product, ``P c`` added on the Q rows and one division by P q_0 into ``domain``, against
    the NumPy backend. ``rescaled_level``: rows from prime 1 on."""

    def run(gpu, ref, ctx, rng, lv):
        rows = lv["ks"][1:] if rescaled_level else lv["ks"]
        pairs = []
        for lead in _BATCHES:
            c = ref.ntt_forward(rand(ctx, rows, (3,) + lead, rng), rows)  # a CT3 in the NTT domain
            digits = ref.modup(ref.ntt_inverse(c[2], rows), rows)
            key = random_key(ctx, rng)
            want = ref.keyswitch_add_rescale(digits, key, rows, c[:2].copy(), domain=domain)
            got = gpu.keyswitch_add_rescale(gpu.asarray(digits), gpu.asarray(key), rows, gpu.asarray(c[:2].copy()),
                                            domain=domain)
            pairs.append((gpu.to_numpy(got), want))
        return (*_stacked(pairs), rows[1:])

    return run


CASES: dict[str, Case] = {
    "add": _elementwise("add"),
    "sub": _elementwise("sub"),
    "mul": _elementwise("mul"),
    "mul_montgomery": _elementwise("mul_montgomery"),
    "neg": _elementwise("neg"),
    "to_montgomery": _elementwise("to_montgomery"),
    "from_montgomery": _elementwise("from_montgomery"),
    "mul_scalar": _elementwise("mul_scalar"),
    "mul_montgomery_broadcast": _broadcast_mul,
    "add_out_alias": _add_out_alias,
    "sum_batch": _sum_batch,
    "mul_montgomery_sum": _mul_montgomery_sum,
    "mul_montgomery_sum_strided_weights": _mul_montgomery_sum_strided,
    "tensor_product": _tensor,
    "ntt_forward": _ntt(False, "rows"),
    "ntt_forward_mixed_rows": _ntt(False, "mixed"),
    "ntt_inverse": _ntt(True, "rows"),
    "ntt_inverse_mixed_rows": _ntt(True, "mixed"),
    "ntt_roundtrip": _ntt_roundtrip,
    "automorphism_coefficient_g5": _automorphism("coefficient", lambda n: 5),
    "automorphism_coefficient_conj": _automorphism("coefficient", lambda n: 2 * n - 1),
    "automorphism_ntt_g5": _automorphism("ntt", lambda n: 5),
    "automorphism_ntt_g5pow": _automorphism("ntt", lambda n: pow(5, 77, 2 * n)),
    "rescale_coefficient": _rescale("coefficient"),
    "rescale_ntt": _rescale("ntt"),
    "rescale_coefficient_key_switch_level": _rescale("coefficient", "ks"),
    "rescale_ntt_key_switch_level": _rescale("ntt", "ks"),
    "rescale_coefficient_rescaled_level": _rescale("coefficient", "suffix"),
    "rescale_ntt_rescaled_level": _rescale("ntt", "suffix"),
    "moddown": _moddown("ks"),
    "moddown_lower_level": _moddown("suffix"),
    "rns_from_integers": _rns_from_integers,
    "centered_crt": _centered_crt("rows"),
    "centered_crt_key_switch_level": _centered_crt("ks"),
    "modup": _modup("rows"),
    "modup_lower_level": _modup("ks"),
    "modup_ntt_hint": _modup_ntt_hint("rows"),
    "modup_ntt_hint_lower_level": _modup_ntt_hint("ks"),
    "modup_ntt_hint_rescaled_level": _modup_ntt_hint("suffix"),
    "ntt_forward_and_modup": _ntt_forward_and_modup(),
    "ntt_forward_and_modup_rescaled_level": _ntt_forward_and_modup(rescaled_level=True),
    "keyswitch_from_digits": _keyswitch(False),
    "keyswitch_from_digits_galois": _keyswitch(True),
    "keyswitch_from_digits_ntt": _keyswitch(False, "ntt"),
    "keyswitch_from_digits_galois_ntt": _keyswitch(True, "ntt"),
    "keyswitch_from_digits_galois_rescaled_level": _keyswitch(True, rescaled_level=True),
    "keyswitch_from_digits_galois_ntt_rescaled_level": _keyswitch(True, "ntt", rescaled_level=True),
    "keyswitch_from_digits_many": _keyswitch_many("coefficient"),
    "keyswitch_from_digits_many_ntt": _keyswitch_many("ntt"),
    "rotate_keyswitch": _rotate_keyswitch("coefficient"),
    "rotate_keyswitch_ntt": _rotate_keyswitch("ntt"),
    "rotate_keyswitch_ntt_rescaled_level": _rotate_keyswitch("ntt", rescaled_level=True),
    "keyswitch_linear_transform": _keyswitch_linear_transform(False),
    "keyswitch_linear_transform_rescale": _keyswitch_linear_transform(True),
    "keyswitch_linear_transform_rescale_rescaled_level": _keyswitch_linear_transform(True, rescaled_level=True),
    "keyswitch_linear_transform_coefficient": _keyswitch_linear_transform(False, domain="coefficient"),
    "keyswitch_linear_transform_rescale_ntt": _keyswitch_linear_transform(True, domain="ntt"),
    "keyswitch_add_rescale": _keyswitch_add_rescale("coefficient"),
    "keyswitch_add_rescale_ntt": _keyswitch_add_rescale("ntt"),
    "keyswitch_add_rescale_ntt_rescaled_level": _keyswitch_add_rescale("ntt", rescaled_level=True),
    "keyswitch_add_rescale_rescaled_level": _keyswitch_add_rescale("coefficient", rescaled_level=True),
}


def run_case(name: str, gpu: Any, ref: Any, ctx_name: str, seed: int = 0) -> str | None:
    ctx = context(ctx_name)
    rng = np.random.default_rng(seed)
    got, want, rows = CASES[name](gpu, ref, ctx, rng, _levels(ctx, ctx_name))
    return compare(got, want, rows, ctx)


def run_capture_ntt(gpu: Any, ctx_name: str) -> str | None:
    """Capture ntt_forward (out=) after a warmup; replay must equal eager."""
    import cupy as cp

    ctx = context(ctx_name)
    rows = _levels(ctx, ctx_name)["rows"]
    x = gpu.asarray(rand(ctx, rows, (2,), np.random.default_rng(1)))
    eager = gpu.ntt_forward(x, rows)
    out = cp.zeros_like(x)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        gpu.ntt_forward(x, rows, out=out)  # warmup on the capture stream
        stream.synchronize()
        out.fill(0)
        stream.synchronize()
        stream.begin_capture()
        gpu.ntt_forward(x, rows, out=out)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    return compare(gpu.to_numpy(out), gpu.to_numpy(eager), rows, ctx)


def run_capture_ntt_and_modup(gpu: Any, ref: Any, ctx_name: str) -> str | None:
    """Capture ntt_forward_and_modup for every choice of components, of an unbatched and a
    batched ciphertext (the one-NTT form where it applies, the two calls otherwise); the replay
    must be NumPy's result. Nothing in it may upload from the host (refused in a capture)."""
    import cupy as cp

    ctx = context(ctx_name)
    rows = _levels(ctx, ctx_name)["ks"]
    rng = np.random.default_rng(3)
    for lead in ((2,), (2, 2)):
        host = rand(ctx, rows, lead, rng)
        c = gpu.asarray(host)
        for components in ((0, 1), (1, 0), (0,), (1,)):
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                gpu.ntt_forward_and_modup(c, rows, components=components)  # warmup: builds the tables
                stream.synchronize()
                stream.begin_capture()
                try:
                    ntt, digits = gpu.ntt_forward_and_modup(c, rows, components=components)
                finally:
                    graph = stream.end_capture()
                graph.launch(stream)
                stream.synchronize()
            want = ref.ntt_forward(np.stack([host[k] for k in components]), rows)
            err = compare(gpu.to_numpy(ntt), want, rows, ctx) or compare(gpu.to_numpy(digits),
                                                                         ref.modup(host[1], rows), (), ctx)
            if err:
                return f"components {components}, batch {lead[1:]}: {err}"
    return None


def run_capture_keyswitch_ntt(gpu: Any, ref: Any, ctx_name: str, replays: int = 3) -> str | None:
    """Capture ``keyswitch_from_digits_many(..., c0=, domain="ntt")`` with two keys (with more
    than one special prime the backend runs the ModDown's P rows on a side stream: a fork and
    a join in the graph); before each replay new digits and c0 are written into the captured
    inputs, and the replay must equal the NumPy reference on them."""
    import cupy as cp

    from bench.kernels_gpu import capture_private

    ctx = context(ctx_name)
    rows = _levels(ctx, ctx_name)["ks"]
    rng = np.random.default_rng(6)
    keys = [random_key(ctx, rng) for _ in range(2)]
    gs = [5, pow(5, 3, 2 * ctx.ring_degree)]
    gpu_keys = [gpu.asarray(k) for k in keys]

    def inputs() -> tuple[np.ndarray, np.ndarray]:
        c = rand(ctx, rows, (), rng)
        return ref.modup(c, rows), ref.ntt_forward(rand(ctx, rows, (), rng), rows)

    digits, c0 = inputs()
    d_digits, d_c0 = gpu.asarray(digits), gpu.asarray(c0)
    stream = cp.cuda.Stream(non_blocking=True)
    captured: list = []
    with stream:
        gpu.keyswitch_from_digits_many(d_digits, gpu_keys, rows, gs, c0=d_c0, domain="ntt")  # warm up
        stream.synchronize()
    graph, _pool = capture_private(cp, lambda: captured.append(  # (its own pool: DESIGN decision 3)
        gpu.keyswitch_from_digits_many(d_digits, gpu_keys, rows, gs, c0=d_c0, domain="ntt")), stream)
    (result,) = captured
    with stream:
        for _ in range(replays):
            digits, c0 = inputs()
            d_digits.set(digits, stream)
            d_c0.set(c0, stream)
            graph.launch(stream)
            got = result.get(stream)
            want = np.stack([ref.keyswitch_from_digits(digits, k, rows, galois_element=g, domain="ntt")
                             for k, g in zip(keys, gs)])
            for i, g in enumerate(gs):
                want[i, 0] = ref.add(want[i, 0], ref.automorphism(c0, g, rows, domain="ntt"), rows)
            error = compare(got, want, rows, ctx)
            if error:
                return error
    return None


def run_capture_rotation(gpu: Any, ctx_name: str) -> str | None:
    """Capture automorphism + modup + keyswitch_from_digits + add; replay must equal eager."""
    import cupy as cp

    ctx = context(ctx_name)
    rows = _levels(ctx, ctx_name)["ks"]
    rng = np.random.default_rng(2)
    ct = gpu.asarray(rand(ctx, rows, (2,), rng))
    key = gpu.asarray(random_key(ctx, rng))
    g = 5

    def rotate(c):
        rot = gpu.automorphism(c, g, rows, domain="coefficient")
        y = gpu.keyswitch_from_digits(gpu.modup(rot[1], rows), key, rows)
        return gpu.add(rot[0], y[0], rows), y[1]

    eager = [gpu.to_numpy(v) for v in rotate(ct)]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        rotate(ct)
        stream.synchronize()
        stream.begin_capture()
        result = rotate(ct)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    for got, want in zip(result, eager):
        err = compare(gpu.to_numpy(got), want, rows, ctx)
        if err:
            return err
    return None
