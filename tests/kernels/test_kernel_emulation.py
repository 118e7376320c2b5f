"""CPU checks of the CUDA kernels' index math and residue ranges, by line-by-line emulation.

Each function below transliterates one kernel of ``kernels/*.cu`` into Python integers with
explicit 64-bit wrap-around, fed with the host tables of ``cupy_backend``; results are
compared with the contract oracles of ``tests/helpers/ring_oracle.py``. No GPU needed.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fhelium_cupy.ckks.backends import cupy_backend as cb
from fhelium_cupy.ckks.ntt import bit_reverse_indices
from tests.helpers import ring_oracle as ro
from tests.helpers.base_convert_table import convert_group, target_words

W = (1 << 64) - 1
W32 = (1 << 32) - 1


def mulhi(a: int, b: int) -> int:
    return (a * b) >> 64


def mont_mul(a: int, b: int, q: int, qinv: int) -> int:
    assert a < 1 << 64 and b < 1 << 64 and a * b < q << 64
    lo, hi = (a * b) & W, mulhi(a, b)
    mh = mulhi((lo * qinv) & W, q)
    r = hi - mh if hi >= mh else (hi - mh + q) & W
    assert 0 <= r < q
    return r


def shoup_lazy(x: int, w: int, wp: int, q: int) -> int:
    assert x < 1 << 64
    r = (x * w - mulhi(x, wp) * q) & W
    assert r < 2 * q
    return r


def red(x: int, q: int) -> int:
    return x - q if x >= q else x


def sub_if_ge(x: int, m: int) -> int:
    """ntt_stages.cuh sub_if_ge: the sign of the 64-bit word x - m decides; equals x >= m ? x - m : x."""
    assert m < 1 << 63 and x < m + (1 << 63)
    t = (x - m) & W
    r = x if t >> 63 else t
    assert r == (x - m if x >= m else x)
    return r


def shoup_lazy_nq(x: int, w: int, wp: int, q: int) -> int:
    """ntt_stages.cuh shoup_mul_lazy_nq: x*w + mulhi(x, wp) * (2^64 - q) mod 2^64 == shoup_lazy."""
    r = (x * w + mulhi(x, wp) * ((-q) & W)) & W
    assert r == shoup_lazy(x, w, wp, q)
    return r


def ct(a: int, b: int, w: int, wp: int, q: int) -> tuple[int, int]:
    assert a < 4 * q and b < 4 * q
    u = sub_if_ge(a, 2 * q)
    v = shoup_lazy_nq(b, w, wp, q)
    return u + v, (u - v + 2 * q) & W


def gs(a: int, b: int, w: int, wp: int, q: int) -> tuple[int, int]:
    assert a < 2 * q and b < 2 * q
    return sub_if_ge(a + b, 2 * q), shoup_lazy_nq(a - b + 2 * q, w, wp, q)

# --- modarith_f64.cuh: float64 products for moduli below 2^45 (Python floats are IEEE doubles
# rounded to nearest, as the device's; fma is emulated exactly: one rounding of the true value).
F64_MAX_Q = 1 << 45
F64_BIAS = 6755399441055744.0  # 1.5 * 2^52
F64_BIAS_BITS = 0x4338000000000000


def fma(a: float, b: float, c: float) -> float:
    return float(Fraction(a) * Fraction(b) + Fraction(c))  # int / int true division rounds correctly


def word_to_f64(x: int) -> float:
    """modarith_f64.cuh word_to_f64: the bias's free mantissa bits set to x, minus the bias."""
    assert 0 <= x < 1 << 51
    d = struct.unpack("<d", struct.pack("<Q", x | F64_BIAS_BITS))[0] - F64_BIAS
    assert d == x
    return d


def f64_to_word(d: float) -> int:
    assert d == int(d) and 0 <= d < 1 << 51
    x = struct.unpack("<Q", struct.pack("<d", d + F64_BIAS))[0] & ((1 << 51) - 1)
    assert x == int(d)
    return x


def mul_mod_f64(x: float, w: float, q: int, qinv: float) -> float:
    """modarith_f64.cuh mul_mod_f64, with its documented bounds asserted."""
    assert abs(x) < 2.0**49 and 0 <= w < q < F64_MAX_Q and x == int(x)
    p = x * w
    e = fma(x, w, -p)
    c = fma(p, qinv, F64_BIAS) - F64_BIAS
    r = fma(-c, float(q), p) + e
    assert r == int(r) and (int(r) - int(x) * int(w)) % q == 0 and abs(r) <= 0.63 * q
    return r


def reduce_centered_f64(x: float, q: int, qinv: float) -> float:
    assert abs(x) < 2.0**50 and x == int(x)
    c = fma(x, qinv, F64_BIAS) - F64_BIAS
    r = fma(-c, float(q), x)
    assert (int(r) - int(x)) % q == 0 and abs(r) <= q / 2 + 0.25
    return r


def reduce_canonical_f64(x: float, q: int, qinv: float) -> float:
    r = reduce_centered_f64(x, q, qinv)
    r = r + q if r < 0.0 else r
    assert r == int(x) % q
    return r


def gs_f64(a: float, b: float, w: int, q: int) -> tuple[float, float]:
    """ntt_stages.cuh InverseArithF64::butterfly."""
    return a + b, mul_mod_f64(a - b, word_to_f64(w), q, 1.0 / q)


def ct_f64(a: float, b: float, w: int, q: int) -> tuple[float, float]:
    """ntt_stages.cuh ForwardArithF64::butterfly."""
    v = mul_mod_f64(b, word_to_f64(w), q, 1.0 / q)
    return a + v, a - v


def forward_arith(q: int, f64: bool):
    """(from_word, butterfly(a, b, w, wp), canonical) of ForwardArithU64, or ForwardArithF64 where
    the kernels take it (f64 and q < F64_MAX_Q)."""
    if f64 and q < F64_MAX_Q:
        return (word_to_f64, lambda a, b, w, wp: ct_f64(a, b, w, q),
                lambda x: f64_to_word(reduce_canonical_f64(x, q, 1.0 / q)))
    return (lambda x: x, lambda a, b, w, wp: ct(a, b, w, wp, q), lambda x: sub_if_ge(sub_if_ge(x, 2 * q), q))


LV = 3  # ntt.cu FHE_LV: coefficients per thread = 2^LV of the main chunk kernels (their _v4 forms: 2)
LVS = (3, 2)  # both thread layouts the backend launches


def round_index(tid: int, g: int, k: int, ltmin: int, rs: int, threads: int) -> int:
    G = tid + g * threads
    return ((G >> ltmin) << (ltmin + rs)) | (G & ((1 << ltmin) - 1)) | (k << ltmin)


def _rounds(log_chunk: int, short_first: bool, lv: int = LV) -> list[tuple[int, int]]:
    """(first chunk stage p, stage count RS) of each register round, in kernel order."""
    rest = log_chunk % lv
    sizes = ([rest] if rest and short_first else []) + [lv] * (log_chunk // lv) + ([rest] if rest and not short_first else [])
    out, p = [], 0
    for rs in sizes:
        out.append((p, rs))
        p += rs
    return out


def emulate_forward_chunk(chunk_in, chunk, q, tw, tw_sh, log_n, log_chunk, lv=LV, f64=False):
    """ntt_forward_chunk_stages for one chunk: every thread's register rounds, exchange via a
    shared array between rounds; each round reads and writes every chunk position exactly once.
    f64: the kernels' float64 arithmetic for a modulus below 2^45 (ForwardArithF64)."""
    C, T = 1 << log_chunk, 1 << (log_chunk - lv)
    base = chunk << log_chunk
    from_word, butterfly, canonical = forward_arith(q, f64)
    sm = [from_word(x) for x in chunk_in]
    for p, rs in _rounds(log_chunk, True, lv):
        ltmin = log_chunk - p - rs
        seen = set()
        new = list(sm)
        for tid in range(T):
            idx = {(g, k): round_index(tid, g, k, ltmin, rs, T) for g in range(1 << (lv - rs)) for k in range(1 << rs)}
            v = {gk: sm[x] for gk, x in idx.items()}
            seen.update(idx.values())
            b0 = (1 << (log_n - log_chunk + p)) + (base >> (log_chunk - p))  # forward_round
            for g in range(1 << (lv - rs)):
                pg = b0 + ((tid + g * T) >> ltmin)
                for i in range(rs):
                    s = log_n - log_chunk + p + i
                    lh = rs - 1 - i
                    for kk in range(1 << (rs - 1)):
                        k = ((kk >> lh) << (lh + 1)) | (kk & ((1 << lh) - 1))
                        widx = (pg << i) + (kk >> lh)
                        assert widx == (1 << s) + ((base + idx[(g, k)]) >> (log_n - s))  # the contract's index
                        v[(g, k)], v[(g, k | (1 << lh))] = butterfly(v[(g, k)], v[(g, k | (1 << lh))],
                                                                     int(tw[widx]), int(tw_sh[widx]))
            for gk, x in idx.items():
                new[x] = v[gk]
        assert seen == set(range(C))
        sm = new
    return [canonical(v) for v in sm]  # reduce_from_4q, or the float64 reduction


def emulate_inverse_chunk(chunk_in, chunk, q, itw, itw_sh, log_n, log_chunk, lv=LV, f64_ninv=None):
    """ntt_inverse_chunk_stages for one chunk (lazy [0, 2q) output, before any N^-1); with
    f64_ninv (N^-1 mod q) and q < 2^45 in the kernels' float64 arithmetic (InverseArithF64):
    values centered before every round but the first, canonical output, times N^-1 when the
    chunk is the whole row."""
    C, T = 1 << log_chunk, 1 << (log_chunk - lv)
    base = chunk << log_chunk
    f64 = f64_ninv is not None and q < F64_MAX_Q
    sm = [word_to_f64(x) for x in chunk_in] if f64 else list(chunk_in)
    for p, rs in _rounds(log_chunk, False, lv):
        seen = set()
        new = list(sm)
        for tid in range(T):
            idx = {(g, k): round_index(tid, g, k, p, rs, T) for g in range(1 << (lv - rs)) for k in range(1 << rs)}
            v = {gk: sm[x] for gk, x in idx.items()}
            if f64 and p > 0:  # InverseArithF64::begin_round
                v = {gk: reduce_centered_f64(x, q, 1.0 / q) for gk, x in v.items()}
            seen.update(idx.values())
            b0 = (1 << (log_n - p - rs)) + (base >> (p + rs))  # inverse_round
            for g in range(1 << (lv - rs)):
                pg = b0 + ((tid + g * T) >> p)
                for i in range(rs):
                    u = p + i
                    for kk in range(1 << (rs - 1)):
                        k = ((kk >> i) << (i + 1)) | (kk & ((1 << i) - 1))
                        widx = (pg << (rs - 1 - i)) + (kk >> i)
                        assert widx == (1 << (log_n - u - 1)) + ((base + idx[(g, k)]) >> (u + 1))
                        a, b = v[(g, k)], v[(g, k | (1 << i))]
                        v[(g, k)], v[(g, k | (1 << i))] = (gs_f64(a, b, int(itw[widx]), q) if f64 else
                                                           gs(a, b, int(itw[widx]), int(itw_sh[widx]), q))
            for gk, x in idx.items():
                new[x] = v[gk]
        assert seen == set(range(C))
        sm = new
    if f64:  # InverseArithF64::output
        whole = log_chunk == log_n
        return [f64_to_word(reduce_canonical_f64(mul_mod_f64(x, float(f64_ninv), q, 1.0 / q) if whole else x, q,
                                                 1.0 / q)) for x in sm]
    return sm


def forward_column_stages(v: list, q: int, tw, tw_sh, K: int, butterfly=None) -> None:
    """ntt_stages.cuh forward_column_stages<K> on one column's values (in place), in the
    arithmetic of ``butterfly`` (default: ForwardArithU64's)."""
    if butterfly is None:
        butterfly = forward_arith(q, False)[1]
    for s in range(K):
        lt = K - s - 1
        for bf in range(1 << (K - 1)):
            cl = ((bf >> lt) << (lt + 1)) | (bf & ((1 << lt) - 1))
            widx = (1 << s) + (cl >> (lt + 1))
            v[cl], v[cl + (1 << lt)] = butterfly(v[cl], v[cl + (1 << lt)], int(tw[widx]), int(tw_sh[widx]))


def pair_exchange(v: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """ntt_stages.cuh pair_exchange<H> for both lanes h of a column: lane h sends
    v[h][2k + 1 - h] (partner_value) and keeps the pairs i = 2k + h."""
    H = len(v[0])
    a, b = [[0] * (H // 2) for _ in range(2)], [[0] * (H // 2) for _ in range(2)]
    for k in range(H // 2):
        sent = [v[h][2 * k] if h else v[h][2 * k + 1] for h in range(2)]
        for h in range(2):
            got = sent[1 - h]
            a[h][k] = got if h else v[h][2 * k]
            b[h][k] = v[h][2 * k + 1] if h else got
    return a, b


def emulate_forward_columns(a: list[int], q: int, tw, tw_sh, log_n: int, log_chunk: int, x2: bool,
                            f64: bool = False) -> None:
    """ntt_forward_column_stages (one thread per column) or its _x2 form (lanes h = 0, 1 of
    column j: parity layout, forward_column_stages_x2), in place; f64: in float64 below 2^45
    (ntt.cu forward_columns: FHE_WITH_ROW_ARITH), canonical words out."""
    C, K = 1 << log_chunk, log_n - log_chunk
    from_word, butterfly, canonical = forward_arith(q, f64)
    column_word = canonical if f64 and q < F64_MAX_Q else (lambda x: x)
    for j in range(C):
        if not x2:
            v = [from_word(a[(c << log_chunk) + j]) for c in range(1 << K)]
            forward_column_stages(v, q, tw, tw_sh, K, butterfly)
            for c in range(1 << K):
                a[c * C + j] = column_word(v[c])
            continue
        lanes = [[from_word(a[((2 * i + h) << log_chunk) + j]) for i in range(1 << (K - 1))] for h in range(2)]
        for h in range(2):
            forward_column_stages(lanes[h], q, tw, tw_sh, K - 1, butterfly)
        pa, pb = pair_exchange(lanes)
        for h in range(2):
            for k in range(1 << (K - 2)):
                widx = (1 << (K - 1)) + 2 * k + h
                pa[h][k], pb[h][k] = butterfly(pa[h][k], pb[h][k], int(tw[widx]), int(tw_sh[widx]))
                a[((4 * k + 2 * h) << log_chunk) + j] = column_word(pa[h][k])
                a[((4 * k + 2 * h + 1) << log_chunk) + j] = column_word(pb[h][k])


def emulate_forward(x: list[int], q: int, tw, tw_sh, log_n: int, log_chunk: int, lv: int = LV,
                    x2: bool = False, f64: bool = False) -> list[int]:
    n, C = 1 << log_n, 1 << log_chunk
    a = list(x)
    emulate_forward_columns(a, q, tw, tw_sh, log_n, log_chunk, x2, f64)
    for chunk in range(n // C):  # ntt_forward_chunk_stages (register rounds, see ntt.cu)
        a[chunk * C : (chunk + 1) * C] = emulate_forward_chunk(a[chunk * C : (chunk + 1) * C], chunk, q, tw, tw_sh,
                                                               log_n, log_chunk, lv, f64)
    return a


def emulate_inverse(x: list[int], q: int, itw, itw_sh, ninv: int, ninv_sh: int, log_n: int, log_chunk: int,
                    lv: int = LV, x2: bool = False, f64: bool = False):
    n, C, K = 1 << log_n, 1 << log_chunk, log_n - log_chunk
    a = list(x)
    f64 = f64 and q < F64_MAX_Q
    for chunk in range(n // C):  # ntt_inverse_chunk_stages (register rounds, see ntt.cu)
        sm = emulate_inverse_chunk(a[chunk * C : (chunk + 1) * C], chunk, q, itw, itw_sh, log_n, log_chunk, lv,
                                   ninv if f64 else None)
        if log_chunk == log_n and not f64:
            sm = [red(shoup_lazy(v, ninv, ninv_sh, q), q) for v in sm]
        a[chunk * C : (chunk + 1) * C] = sm
    if K == 0:
        return a
    return emulate_inverse_columns_only(a, q, itw, itw_sh, ninv, ninv_sh, log_n, log_chunk, x2, f64)


def emulate_inverse_columns_only(a: list[int], q: int, itw, itw_sh, ninv: int, ninv_sh: int, log_n: int,
                                 log_chunk: int, x2: bool, f64: bool = True) -> list[int]:
    """ntt_inverse_column_stages or its _x2 form (inverse_column_stages_x2) on the chunk
    kernel's output a (words in [0, 2q)), then N^-1; f64: in float64 below 2^45
    (ntt.cu inverse_columns: FHE_WITH_ROW_ARITH)."""
    C, K = 1 << log_chunk, log_n - log_chunk
    a = list(a)
    f64 = f64 and q < F64_MAX_Q
    if f64:  # InverseArithF64: column_from_word, gs_f64, output(., whole = true)
        def from_word(x):
            return word_to_f64(x) - q

        def butterfly(x, y, w, wp):
            return gs_f64(x, y, w, q)

        def output(x):
            return f64_to_word(reduce_canonical_f64(mul_mod_f64(x, float(ninv), q, 1.0 / q), q, 1.0 / q))
    else:
        def from_word(x):
            return x

        def butterfly(x, y, w, wp):
            return gs(x, y, w, wp, q)

        def output(x):
            return red(shoup_lazy(x, ninv, ninv_sh, q), q)
    if x2:  # ntt_inverse_column_stages_x2 / inverse_column_stages_x2<K>: lanes h, block layout
        H = 1 << (K - 1)
        for j in range(C):
            lanes = [[from_word(a[((i + h * H) << log_chunk) + j]) for i in range(H)] for h in range(2)]
            for h in range(2):
                v = lanes[h]
                for lt in range(K - 1):
                    u = log_chunk + lt
                    for bf in range(1 << (K - 2)):
                        cl = ((bf >> lt) << (lt + 1)) | (bf & ((1 << lt) - 1))
                        # inverse_column_stages<K-1>(.., root = 2 + h): its u is this u + 1
                        widx = ((2 + h) << (log_n - u - 2)) + (cl >> (lt + 1))
                        assert widx == (1 << (log_n - u - 1)) + ((cl + h * H) >> (lt + 1))  # the contract's index
                        v[cl], v[cl + (1 << lt)] = butterfly(v[cl], v[cl + (1 << lt)], int(itw[widx]),
                                                             int(itw_sh[widx]))
            pa, pb = pair_exchange(lanes)
            for h in range(2):
                for k in range(H // 2):
                    pa[h][k], pb[h][k] = butterfly(pa[h][k], pb[h][k], int(itw[1]), int(itw_sh[1]))
                    a[((2 * k + h) << log_chunk) + j] = output(pa[h][k])
                    a[((2 * k + h + H) << log_chunk) + j] = output(pb[h][k])
        return a
    for j in range(C):  # ntt_inverse_column_stages / inverse_column_stages<K>
        v = [from_word(a[(c << log_chunk) + j]) for c in range(1 << K)]
        for lt in range(K):
            u = log_chunk + lt
            for bf in range(1 << (K - 1)):
                cl = ((bf >> lt) << (lt + 1)) | (bf & ((1 << lt) - 1))
                widx = (1 << (log_n - u - 1)) + (cl >> (lt + 1))
                v[cl], v[cl + (1 << lt)] = butterfly(v[cl], v[cl + (1 << lt)], int(itw[widx]), int(itw_sh[widx]))
        for c in range(1 << K):
            a[(c << log_chunk) + j] = output(v[c])
    return a


@pytest.fixture(scope="module")
def ctx():
    n = 64
    q = ro.ntt_primes(60, 3, n) + ro.ntt_primes(41, 2, n)
    return ro.make_context(n, q[:4], ro.ntt_primes(61, 2, n), dnum=2)


def _rand(ctx, rows, lead=(), seed=0):
    rng = np.random.default_rng(seed)
    return np.stack(
        [rng.integers(0, ctx.moduli[r], lead + (ctx.ring_degree,), dtype=np.uint64) for r in rows], axis=-2
    )


@pytest.mark.parametrize("lv", LVS)
@pytest.mark.parametrize("log_chunk", [6, 5, 4, 3])
def test_ntt_kernel_emulation_matches_contract_for_every_split(ctx, log_chunk, lv):
    n, log_n = ctx.ring_degree, ctx.ring_degree.bit_length() - 1
    consts = cb.modulus_constants(ctx.moduli, n)
    for r in range(len(ctx.moduli)):
        q = ctx.moduli[r]
        tw, tw_sh, itw, itw_sh = cb.twiddle_tables(q, ctx.psi[r], n)
        a = _rand(ctx, (r,), seed=r)
        a[0, :3] = [0, q - 1, q // 2]
        got = emulate_forward([int(v) for v in a[0]], q, tw, tw_sh, log_n, log_chunk, lv)
        want = ro.ntt_forward(a, (r,), ctx)[0]
        assert got == [int(v) for v in want], f"forward row {r} log_chunk {log_chunk}"
        back = emulate_inverse(got, q, itw, itw_sh, int(consts[4, r]), int(consts[5, r]), log_n, log_chunk, lv)
        assert back == [int(v) for v in a[0]], f"inverse row {r} log_chunk {log_chunk}"


@pytest.mark.parametrize("lv", LVS)
@pytest.mark.parametrize(("log_n", "log_chunk"), [(6, 3), (6, 6), (7, 4), (7, 7), (8, 4)])
def test_float64_ntt_emulation_matches_contract(log_n, log_chunk, lv):
    """The forward column and chunk kernels and the inverse chunk kernel in float64
    (FHE_NTT_F64, moduli below 2^45): the same canonical residues as the contract, every
    product inside mul_mod_f64's bounds, on a 41-bit and a 44-bit prime, with inputs at the top
    of the forward chunk kernel's [0, 4q) range."""
    n = 1 << log_n
    c = ro.make_context(n, ro.ntt_primes(41, 1, n) + ro.ntt_primes(44, 1, n), ro.ntt_primes(61, 1, n), dnum=1)
    for r in range(2):
        q = c.moduli[r]
        assert q < F64_MAX_Q
        tw, tw_sh, _, _ = cb.twiddle_tables(q, c.psi[r], n)
        a = _rand(c, (r,), seed=23 + r)
        a[0, :3] = [0, q - 1, q // 2]
        want = [int(v) for v in ro.ntt_forward(a, (r,), c)[0]]
        consts = cb.modulus_constants(c.moduli, n)
        _, _, itw, itw_sh = cb.twiddle_tables(q, c.psi[r], n)
        for x2 in (False, True) if log_n - log_chunk >= 2 else (False,):
            got = emulate_forward([int(v) for v in a[0]], q, tw, tw_sh, log_n, log_chunk, lv, x2=x2, f64=True)
            assert got == want, f"forward x2={x2}"
            back = emulate_inverse(want, q, itw, itw_sh, int(consts[4, r]), int(consts[5, r]), log_n, log_chunk,
                                   lv, x2=x2, f64=True)
            assert back == [int(v) for v in a[0]], f"inverse x2={x2}"
            # the inverse column kernel from the top of its [0, 2q) input range: lazy chunk output
            if log_chunk < log_n:
                C = 1 << log_chunk
                lazy = []
                for chunk in range(n // C):
                    lazy += emulate_inverse_chunk(want[chunk * C:(chunk + 1) * C], chunk, q, itw, itw_sh, log_n,
                                                  log_chunk, lv)
                top = [v + q if v < q else v for v in lazy]
                assert emulate_inverse_columns_only(top, q, itw, itw_sh, int(consts[4, r]), int(consts[5, r]),
                                                    log_n, log_chunk, x2) == [int(v) for v in a[0]]
        # the chunk kernel alone on words in [0, 4q): its transform of x + 3q equals that of x
        if log_chunk < log_n:
            cols = [int(v) for v in a[0]]
            emulate_forward_columns(cols, q, tw, tw_sh, log_n, log_chunk, x2=False)
            top = [v + 3 * q if v < q else v for v in cols]
            C = 1 << log_chunk
            for chunk in range(n // C):
                part = slice(chunk * C, (chunk + 1) * C)
                assert (emulate_forward_chunk(top[part], chunk, q, tw, tw_sh, log_n, log_chunk, lv, f64=True)
                        == want[part])


@settings(max_examples=300, deadline=None)
@given(q=st.integers(3, F64_MAX_Q - 1).map(lambda v: v | 1), x=st.integers(-(2**49) + 1, 2**49 - 1),
       wf=st.floats(0, 1, exclude_max=True))
def test_float64_product_stays_in_its_bounds(q, x, wf):
    """mul_mod_f64 for any odd q < 2^45, |x| < 2^49, w < q: exact, congruent to x w, within
    0.63 q (asserted inside); reduce_canonical_f64 of any |x| < 2^50 is x mod q."""
    w = min(int(wf * q), q - 1)
    qinv = 1.0 / q
    for xv, wv in ((x, w), (2**49 - 1, q - 1), (-(2**49) + 1, q - 1), (x, 0)):
        mul_mod_f64(float(xv), float(wv), q, qinv)
    for xv in (x, 2 * x, 2**50 - 1, -(2**50) + 1):
        reduce_canonical_f64(float(xv), q, qinv)


def test_float64_word_conversions_round_trip():
    for x in (0, 1, 2**45 - 1, 2**51 - 1, 123456789012345):
        assert f64_to_word(word_to_f64(x)) == x


@pytest.mark.parametrize(("log_n", "log_chunk"), [(6, 4), (6, 3), (7, 3)])
def test_two_lanes_per_column_emulation_matches_contract(log_n, log_chunk):
    """ntt_{forward,inverse}_column_stages_x2 (two lanes per column, pair_exchange for the stage
    that straddles them) for K = 2, 3, 4 column stages, on a 60-bit and a 41-bit prime."""
    n = 1 << log_n
    c = ro.make_context(n, ro.ntt_primes(60, 1, n) + ro.ntt_primes(41, 1, n), ro.ntt_primes(61, 1, n), dnum=1)
    consts = cb.modulus_constants(c.moduli, n)
    for r in range(2):
        q = c.moduli[r]
        tw, tw_sh, itw, itw_sh = cb.twiddle_tables(q, c.psi[r], n)
        a = _rand(c, (r,), seed=11 + r)
        a[0, :2] = [0, q - 1]
        got = emulate_forward([int(v) for v in a[0]], q, tw, tw_sh, log_n, log_chunk, x2=True)
        assert got == [int(v) for v in ro.ntt_forward(a, (r,), c)[0]]
        back = emulate_inverse(got, q, itw, itw_sh, int(consts[4, r]), int(consts[5, r]), log_n, log_chunk, x2=True)
        assert back == [int(v) for v in a[0]]


def test_modulus_constants_match_their_definitions(ctx):
    consts = cb.modulus_constants(ctx.moduli, ctx.ring_degree)
    for i, q in enumerate(ctx.moduli):
        assert int(consts[0, i]) == q
        assert (int(consts[1, i]) * q) % (1 << 64) == 1
        assert int(consts[2, i]) == (1 << 128) % q
        assert int(consts[3, i]) == (1 << 64) // q
        assert int(consts[4, i]) * ctx.ring_degree % q == 1


def emulate_base_convert(c, table, size, targets, groups, smax, n, force_y=None):
    """keyswitch_base_convert_s{smax} (keyswitch.cu), line by line: c [batch, rows_in, N] ->
    out [groups * batch, targets, N]. The table is read with the kernel's offsets; smax = 0 is
    the any-size loop (high word reduced every 16 terms). force_y overrides the scaled sources
    (y [batch, S, N] of group 0) to reach the 128-bit worst cases."""
    S, T = size, targets
    tq = target_words(table, groups, S, T)
    batch = c.shape[0]
    out = np.empty((groups * batch, T, n), dtype=np.uint64)
    for g in range(groups):
        group = convert_group(table, g, S, T)
        sm, w_tab, negc, self_rows, count = group.words, group.W, group.negc, group.self_rows, group.count
        w, wp, sq, srow = group.w, group.w_shoup, group.s, group.s_rows
        assert smax == 0 or count <= smax
        for b in range(batch):
            for k in range(n):
                y = [red(shoup_lazy(int(c[b, srow[j], k]), w[j], wp[j], sq[j]), sq[j]) for j in range(count)]
                if force_y is not None and g == 0:
                    y = [int(force_y[b, j, k]) for j in range(count)]
                cnt = sum(1 for j in range(count) if y[j] > sq[j] >> 1)
                for t in range(T):
                    if self_rows[t] != W:
                        out[g * batch + b, t, k] = c[b, self_rows[t], k]
                        continue
                    q, qinv, bar = tq[t], tq[T + t], tq[2 * T + t]
                    acc = 0
                    # s{smax}: all smax terms, unguarded; y[j] = 0 past the group's count, so the
                    # shared-memory words read there (zero W rows or the next table words) add 0
                    smem = sm + tq
                    assert smax * T <= len(smem), "s{smax} would read past the shared table"
                    for j in range(smax or count):
                        word = smem[j * T + t] if smax else w_tab[j * T + t]
                        if smax and group.weight_pieces:  # PieceSum over the word's two pieces
                            word = (word & W32) + (word >> 32 << 27)
                        acc += (y[j] if j < count else 0) * word
                        assert acc < 1 << 128
                        if smax == 0 and (j & 15) == 15:
                            hi = acc >> 64
                            acc = (red(hi - mulhi(hi, bar) * q, q) << 64) + (acc & W)
                    acc += cnt * negc[t]
                    assert acc < 1 << 128
                    h, lo = acc >> 64, acc & W
                    h = red(h - mulhi(h, bar) * q, q)
                    mh = mulhi((lo * qinv) & W, q)
                    out[g * batch + b, t, k] = h - mh if h >= mh else h - mh + q
    return out


def test_moddown_weights_in_pieces_convert_exactly():
    """A ModDown from 61-bit special primes into 40-bit Q primes holds its weights in pieces
    (keyswitch.cu weight pieces, the 4-multiply-add sums); the kernel, emulated line by line in
    its unguarded s8 and any-size forms, gives exactly sum_j centered(y_j) (P / p_j) mod q_t, as
    the plain table does (all-negative centered sources included)."""
    n = 16
    narrow = ro.make_context(n, ro.ntt_primes(40, 4, n), ro.ntt_primes(61, 3, n), dnum=2)
    rows, p_rows = (0, 1, 2, 3), (4, 5, 6)
    split, plain = cb.moddown_tables(narrow, rows), cb.moddown_tables(narrow, rows, pieces=False)
    S, T = split["convert_size"], len(rows)
    gs, gp = convert_group(split["convert"], 0, S, T), convert_group(plain["convert"], 0, S, T)
    assert gs.weight_pieces and not gp.weight_pieces and gs.W == gp.W and gs.count == gp.count == 3
    assert not np.array_equal(split["convert"], plain["convert"])
    x = _rand(narrow, rows + p_rows, lead=(2,), seed=5)
    x[1, 4:, :] = [[narrow.moduli[j] - 1 - k for k in range(n)] for j in p_rows]  # y_j > p_j / 2
    big_p = math.prod(narrow.moduli[j] for j in p_rows)
    want = np.empty((2, T, n), dtype=np.uint64)
    for b in range(2):
        for k in range(n):
            total = 0
            for i, j in enumerate(p_rows):
                pj = narrow.moduli[j]
                y = int(x[b, 4 + i, k]) * pow(big_p // pj, -1, pj) % pj
                total += (y - pj if y > pj >> 1 else y) * (big_p // pj)
            want[b, :, k] = [total % narrow.moduli[r] for r in rows]
    for smax in (8, 0):
        for table in (split, plain):
            assert np.array_equal(emulate_base_convert(x, table["convert"], S, T, 1, smax, n), want), smax


@pytest.mark.parametrize("smax", [2, 4, 0])  # the host's exact pick, SMAX > S (unguarded zero terms), any size
def test_modup_kernel_emulation_matches_contract(ctx, smax):
    rows = (0, 1, 2)  # digit (0, 1) complete, digit (2, 3) partial
    n = ctx.ring_degree
    c = _rand(ctx, rows, lead=(2,), seed=7)
    c[0, :, :3] = [[0, ctx.moduli[r] - 1, ctx.moduli[r] // 2] for r in rows]
    t = cb.modup_tables(ctx, rows)
    assert cb._base_convert_kernel(t["convert_size"]) == "keyswitch_base_convert_s2"
    D, R = len(t["key_digits"]), len(t["out_rows"])
    coeff = emulate_base_convert(c, t["convert"], t["convert_size"], R, D, smax, n).reshape(D, 2, R, n)
    assert np.array_equal(ro.ntt_forward(coeff, t["out_rows"], ctx), ro.modup(c, rows, ctx))


def test_base_convert_kernel_emulation_long_digit_folds_high_word():
    """A 37-prime digit of 61-bit primes (the any-size kernel reduces the high word twice in
    the loop) and 3 P primes, with all-negative centered terms (the worst 128-bit case)."""
    n = 8
    ctx = ro.make_context(n, ro.ntt_primes(61, 37, n), ro.ntt_primes(60, 3, n), dnum=1)
    rows = tuple(range(37))
    rng = np.random.default_rng(3)
    c = _rand(ctx, rows, lead=(1,), seed=9)
    t = cb.modup_tables(ctx, rows)
    assert t["convert_size"] == 37 and cb._base_convert_kernel(37) == "keyswitch_base_convert_s0"
    y = np.stack([rng.integers(0, ctx.moduli[r], (1, n), dtype=np.uint64) for r in rows], axis=-2)
    y[0, :, 0] = [ctx.moduli[r] - 1 for r in rows]
    y[0, :, 1] = [ctx.moduli[r] // 2 + 1 for r in rows]
    R = len(t["out_rows"])
    coeff = emulate_base_convert(c, t["convert"], 37, R, 1, 0, n, force_y=y)
    q_d = math.prod(ctx.moduli[r] for r in rows)
    for k in range(n):
        exact = sum(ro.centered(int(y[0, j, k]), ctx.moduli[r]) * (q_d // ctx.moduli[r]) for j, r in enumerate(rows))
        for i, pr in enumerate(t["out_rows"][len(rows) :]):
            assert int(coeff[0, len(rows) + i, k]) == exact % ctx.moduli[pr]
        for j in range(len(rows)):
            assert int(coeff[0, j, k]) == int(c[0, j, k])


def redc_sum(products: list[tuple[int, int]], q: int, qinv: int, bar: int) -> int:
    """keyswitch.cu key_inner_product's reduction: sum x * k exactly in 128 bits, the high word
    folded mod q after every 32 terms, one REDC at the end; asserts the 128-bit bound."""
    acc = 0
    for t, (x, k) in enumerate(products):
        assert x < 1 << 64 and k < q
        acc += x * k
        assert acc < 1 << 128
        if (t & 31) == 31 or t == len(products) - 1:
            hi = acc >> 64
            acc = (red(hi - mulhi(hi, bar) * q, q) << 64) + (acc & W)
    hi, lo = acc >> 64, acc & W
    assert hi < q
    mh = mulhi((lo * qinv) & W, q)
    r = hi - mh if hi >= mh else hi - mh + q
    assert r == sum(mont_mul(x, k, q, qinv) for x, k in products) % q
    return r


def _emulate_inner_product(ctx, digits, key, t, consts, perm):
    """keyswitch_inner_product_many for one key: acc [2, 1, R, N] (NTT domain), one batch entry."""
    out_rows, n, D = t["out_rows"], ctx.ring_degree, len(t["key_digits"])
    acc = np.zeros((2, 1, len(out_rows), n), dtype=np.uint64)
    for r, pid in enumerate(out_rows):
        q, qinv, bar = ctx.moduli[pid], int(consts[1, pid]), int(consts[3, pid])
        for k in range(n):
            xs = [int(digits[d, 0, r, perm[k]]) for d in range(D)]
            kd = [int(v) for v in t["key_digits"]]
            for comp in range(2):
                acc[comp, 0, r, k] = redc_sum([(x, int(key[kd[d], comp, pid, k])) for d, x in enumerate(xs)],
                                              q, qinv, bar)
    return acc


def test_key_inner_product_reduction_at_its_worst_case():
    """70 digits (two folds) of the largest residues of a 61-bit prime: the 128-bit sum stays
    below 2^128 and the single REDC equals the sum of per-digit Montgomery products."""
    q = ro.ntt_primes(61, 1, 8)[0]
    qinv, bar = pow(q, -1, 1 << 64), (1 << 64) // q
    assert redc_sum([(q - 1, q - 1)] * 70, q, qinv, bar) == 70 * mont_mul(q - 1, q - 1, q, qinv) % q
    rng = np.random.default_rng(5)
    pairs = [(int(rng.integers(0, q)), int(rng.integers(0, q))) for _ in range(40)]
    redc_sum(pairs, q, qinv, bar)


def _emulate_moddown_extension(x_p, ctx, rows, out_rows, md, consts, i, k):
    """moddown_extension (keyswitch.cu) of coefficient k into Q row i; x_p = the K P rows."""
    L, K = len(rows), ctx.p_count
    q, qinv = ctx.moduli[rows[i]], int(consts[1, rows[i]])
    wtab, pmod = md[2 * K :], md[2 * K + K * L :]
    e = 0
    for j in range(K):
        pj = ctx.moduli[out_rows[L + j]]
        yv = red(shoup_lazy(int(x_p[j, k]), int(md[j]), int(md[K + j]), pj), pj)
        term = mont_mul(yv, int(wtab[j * L + i]), q, qinv)
        if yv > pj >> 1:
            term = (term - int(pmod[i])) % q
        e = (e + term) % q
    return e


def _keyswitch_setup(ctx):
    rows = (0, 1, 2)
    t = cb.modup_tables(ctx, rows)
    D = len(t["key_digits"])
    digits = _rand(ctx, t["out_rows"], lead=(D, 1), seed=3)
    key = np.stack([np.stack([_rand(ctx, range(len(ctx.moduli)), seed=10 + 2 * d + k) for k in range(2)])
                    for d in range(len(ctx.digits))])
    return rows, t, digits, key, cb.modulus_constants(ctx.moduli, ctx.ring_degree), cb.moddown_tables(ctx, rows)


def _emulate_combine(x, e, md, rows, ctx, batch, c0=None, perm=None):
    """keyswitch_moddown_combine for E = 1: x [2 * batch, R, N], e [2 * batch, L, N]."""
    n, L = ctx.ring_degree, len(rows)
    pinv = [int(v) for v in md["pinv"]]
    out = np.empty_like(e)
    for z in range(2 * batch):  # z = (ent * 2 + comp) * batch + b
        ent, comp, b = z // (2 * batch), (z // batch) % 2, z % batch
        for i in range(L):
            q = ctx.moduli[rows[i]]
            for k in range(n):
                y = red(shoup_lazy((int(x[z, i, k]) - int(e[z, i, k])) % q, pinv[L + i], pinv[2 * L + i], q), q)
                if c0 is not None and comp == 0:
                    y = (y + int(c0[b, i, perm[ent * n + k]])) % q
                out[z, i, k] = y
    return out


def test_keyswitch_kernel_emulation_matches_contract(ctx):
    """Coefficient output: inner product, inverse NTT of all rows, base conversion of the P
    rows, combine."""
    rows, t, digits, key, consts, md = _keyswitch_setup(ctx)
    n, L, K, g = ctx.ring_degree, len(rows), ctx.p_count, 5
    acc = _emulate_inner_product(ctx, digits, key, t, consts, cb.ntt_automorphism_permutation(n, g))
    x = ro.ntt_inverse(acc, t["out_rows"], ctx).reshape(2, L + K, n)
    e = emulate_base_convert(x, md["convert"], md["convert_size"], L, 1, 8, n)
    out = _emulate_combine(x, e, md, rows, ctx, 1).reshape(2, 1, L, n)
    assert np.array_equal(out, ro.keyswitch_from_digits(digits, key, rows, ctx, galois_element=g))


@pytest.mark.parametrize("rows", [(0, 1, 2, 3), (1, 2, 3), (2, 3)])  # every level that can still rescale
def test_moddown_rescale_kernel_emulation_matches_the_integer_division(ctx, rows):
    """CupyBackend._moddown_rescale_launch after its inverse NTT: the base conversion of q_0 =
    rows[0] and the P rows into rows[1:] (the host's s{size} pick) and keyswitch_moddown_combine
    reading x from its row 1 with L - 1 Q and K + 1 dropped rows, against the rounding
    division by P q_0 in Python integers; rows from prime 1 on are the levels after a rescale."""
    n, L, K = ctx.ring_degree, len(rows), ctx.p_count
    p_rows = tuple(range(ctx.q_count, ctx.q_count + K))
    x = _rand(ctx, rows + p_rows, lead=(2,), seed=sum(rows) + 40)  # [2, L + K, N] coefficient domain
    md = cb.moddown_rescale_tables(ctx, rows)
    e = emulate_base_convert(x, md["convert"], md["convert_size"], L - 1, 1, _host_smax(md), n)
    out = _emulate_combine(np.ascontiguousarray(x[:, 1:]), e, md, rows[1:], ctx, 1)
    assert np.array_equal(out, _divided_by_p_q0(x, rows, ctx))


def _host_smax(tables: dict) -> int:
    """The source count of the base-conversion kernel the host picks for ``tables`` (its s{size})."""
    return int(cb._base_convert_kernel(tables["convert_size"]).rsplit("_s", 1)[1])


def _divided_by_p_q0(x: np.ndarray, rows: tuple[int, ...], ctx) -> np.ndarray:
    """Coefficient-domain ``x [2, L + K, N]`` over ``rows + p_rows`` divided by ``P q_0`` with
    rounding, in Python integers: ``[2, L - 1, N]`` over ``rows[1:]``."""
    from tests.helpers.ckks_oracles import oracle_moddown_rescale

    moduli = [ctx.moduli[r] for r in rows + tuple(range(ctx.q_count, ctx.q_count + ctx.p_count))]
    return np.stack([np.array([oracle_moddown_rescale([int(v) for v in x[z, :, k]], moduli, len(rows))
                               for k in range(ctx.ring_degree)], dtype=np.uint64).T for z in range(len(x))])


@pytest.mark.parametrize("rows", [(0, 1, 2, 3), (1, 2, 3)])
def test_relinearize_rescale_kernel_emulation_matches_the_integer_division(ctx, rows):
    """CupyBackend.keyswitch_add_rescale after its inner product: the inner product kernel
    adds P c to the Q rows (one Shoup constant per limb), then _moddown_rescale_launch with NTT output
    transforms back only q_0 (row 0) and the P rows, converts them into rows[1:], transforms
    e forward and combines from row 1. Against the NTT of the rounding division by P q_0 of
    the coefficient-domain sum, in Python integers."""
    from fhelium_cupy.ckks.modarith import shoup_companion

    n, L, K = ctx.ring_degree, len(rows), ctx.p_count
    p_rows = tuple(range(ctx.q_count, ctx.q_count + K))
    acc = _rand(ctx, rows + p_rows, lead=(2,), seed=sum(rows) + 50)  # NTT domain
    c = _rand(ctx, rows, lead=(2,), seed=sum(rows) + 60)  # NTT domain
    big_p = math.prod(ctx.moduli[r] for r in p_rows)
    for i, r in enumerate(rows):  # the epilogue: acc + shoup_mul(c, w, w') mod q
        q = ctx.moduli[r]
        w = big_p % q
        wp = shoup_companion(w, q)
        for z in range(2):
            acc[z, i] = [(int(a) + red(shoup_lazy(int(b), w, wp, q), q)) % q for a, b in zip(acc[z, i], c[z, i])]
    x = acc.copy()
    x[:, :1] = ro.ntt_inverse(acc[:, :1], rows[:1], ctx)
    x[:, L:] = ro.ntt_inverse(acc[:, L:], p_rows, ctx)
    md = cb.moddown_rescale_tables(ctx, rows)
    e = ro.ntt_forward(emulate_base_convert(x, md["convert"], md["convert_size"], L - 1, 1, _host_smax(md), n),
                       rows[1:], ctx)
    out = _emulate_combine(np.ascontiguousarray(acc[:, 1:]), e, md, rows[1:], ctx, 1)
    coef = ro.ntt_inverse(acc, rows + p_rows, ctx)  # the accumulator with P c, coefficient domain
    assert np.array_equal(out, ro.ntt_forward(_divided_by_p_q0(coef, rows, ctx), rows[1:], ctx))


def test_ntt_domain_moddown_kernel_emulation_matches_contract(ctx):
    """NTT output: inverse NTT of the P rows only, base conversion, forward NTT of e, combine
    with the rotated c0 of a hoisted rotation == NTT of (automorphism(c0) + y0, y1)."""
    rows, t, digits, key, consts, md = _keyswitch_setup(ctx)
    n, L, K, g = ctx.ring_degree, len(rows), ctx.p_count, 25
    perm = cb.ntt_automorphism_permutation(n, g)
    acc = _emulate_inner_product(ctx, digits, key, t, consts, perm).reshape(2, L + K, n)
    x = acc.copy()
    x[:, L:] = ro.ntt_inverse(acc[:, L:], t["out_rows"][L:], ctx)  # only the K P rows leave the NTT domain
    e = ro.ntt_forward(emulate_base_convert(x, md["convert"], md["convert_size"], L, 1, 2, n), rows, ctx)
    c0 = _rand(ctx, rows, lead=(1,), seed=7)
    out = _emulate_combine(acc, e, md, rows, ctx, 1, c0=ro.ntt_forward(c0, rows, ctx), perm=perm)
    want = ro.keyswitch_from_digits(digits, key, rows, ctx, galois_element=g)
    rotated = ro.automorphism(c0, g, rows, ctx, "coefficient")
    for i in range(L):
        want[0, 0, i] = [(int(a) + int(b)) % ctx.moduli[rows[i]] for a, b in zip(want[0, 0, i], rotated[0, i])]
    assert np.array_equal(out.reshape(2, 1, L, n), ro.ntt_forward(want, rows, ctx))


def test_rescale_kernel_emulation_matches_contract(ctx):
    rows = (3, 0, 1, 4)  # dropped prime larger and smaller than the others
    n = ctx.ring_degree
    a = _rand(ctx, rows, lead=(2,), seed=5)
    tab = cb.rescale_table(ctx, rows)
    consts = cb.modulus_constants(ctx.moduli, n)
    q0 = ctx.moduli[rows[0]]
    rem = len(rows) - 1
    out = np.empty((2, rem, n), dtype=np.uint64)
    for b in range(2):
        for i in range(rem):
            q = ctx.moduli[rows[i + 1]]
            bar = int(consts[3, rows[i + 1]])
            for k in range(n):
                c0 = int(a[b, 0, k])
                r = red(c0 - mulhi(c0, bar) * q, q)
                if c0 > q0 >> 1:
                    r = (r - int(tab[i])) % q
                d_ = (int(a[b, i + 1, k]) - r) % q
                out[b, i, k] = red(shoup_lazy(d_, int(tab[rem + i]), int(tab[2 * rem + i]), q), q)
    assert np.array_equal(out, ro.rescale(a, rows, ctx, "coefficient"))


@pytest.mark.parametrize("n", [8, 64, 1024])
def test_bitrev_indices_match_python_oracle(n):
    bits = n.bit_length() - 1
    assert bit_reverse_indices(n).tolist() == [ro.bitrev(i, bits) for i in range(n)]


@pytest.mark.parametrize("g", [1, 3, 5, 25, 127, 2 * 64 - 1])
def test_galois_tables_match_contract(ctx, g):
    n = ctx.ring_degree
    a = _rand(ctx, (0, 1), seed=g)
    perm = cb.ntt_automorphism_permutation(n, g)
    assert np.array_equal(a[..., perm], ro.automorphism(a, g, (0, 1), ctx, "ntt"))
    m = cb.coefficient_automorphism_map(n, g)
    src, neg = (m & 0x7FFFFFFF).astype(np.int64), (m >> 31).astype(bool)
    got = a[..., src].copy()
    for i, r in enumerate((0, 1)):
        q = np.uint64(ctx.moduli[r])
        row = got[i]
        row[neg & (row != 0)] = q - row[neg & (row != 0)]
    assert np.array_equal(got, ro.automorphism(a, g, (0, 1), ctx, "coefficient"))


def test_twiddle_tables_are_bitreversed_powers(ctx):
    n = ctx.ring_degree
    q, psi = ctx.moduli[0], ctx.psi[0]
    tw, tw_sh, itw, itw_sh = cb.twiddle_tables(q, psi, n)
    for k in (0, 1, 5, n - 1):
        e = ro.bitrev(k, n.bit_length() - 1)
        assert int(tw[k]) == pow(psi, e, q) and int(itw[k]) == pow(psi, -e, q)
        assert int(tw_sh[k]) == (int(tw[k]) << 64) // q and int(itw_sh[k]) == (int(itw[k]) << 64) // q


def test_python_oracle_agrees_with_numpy_backend(ctx):
    """The oracle the emulations are checked against is the contract NumpyBackend implements."""
    nb = pytest.importorskip("fhelium_cupy.ckks.backends.numpy_backend").NumpyBackend(ctx)
    rows = (0, 1, 2)
    a = _rand(ctx, rows, lead=(2,), seed=11)
    assert np.array_equal(nb.ntt_forward(a, rows), ro.ntt_forward(a, rows, ctx))
    assert np.array_equal(nb.rescale(a, rows, domain="ntt"), ro.rescale(a, rows, ctx, "ntt"))
    assert np.array_equal(nb.automorphism(a, 7, rows, domain="coefficient"), ro.automorphism(a, 7, rows, ctx, "coefficient"))
    digits = nb.modup(a, rows)
    assert np.array_equal(digits, ro.modup(a, rows, ctx))
    key = np.stack([np.stack([_rand(ctx, range(len(ctx.moduli)), seed=40 + 2 * d + k) for k in range(2)])
                    for d in range(len(ctx.digits))])
    assert np.array_equal(nb.keyswitch_from_digits(digits, key, rows, galois_element=3),
                          ro.keyswitch_from_digits(digits, key, rows, ctx, galois_element=3))


@pytest.mark.parametrize("lv", LVS)
@pytest.mark.parametrize(("log_n", "log_chunk"), [(16, 12), (16, 11), (14, 12), (14, 10), (13, 13), (12, 12)])
def test_ntt_round_twiddle_index_matches_contract_at_gpu_sizes(log_n, log_chunk, lv):
    """forward_round / inverse_round's simplified twiddle index ((B0 + (G >> ltmin)) << i) + const
    equals the contract's tw[m + (x >> log2(2t))] / itw[(N >> (u+1)) + (x >> (u+1))] for every
    chunk, thread, group and butterfly of the chunk sizes the backend launches."""
    T = 1 << (log_chunk - lv)
    for chunk in range(1 << (log_n - log_chunk)):
        base = chunk << log_chunk
        for short_first, forward in ((True, True), (False, False)):
            for p, rs in _rounds(log_chunk, short_first, lv):
                ltmin = log_chunk - p - rs if forward else p
                b0 = ((1 << (log_n - log_chunk + p)) + (base >> (log_chunk - p)) if forward
                      else (1 << (log_n - p - rs)) + (base >> (p + rs)))
                for tid in range(T):
                    for g in range(1 << (lv - rs)):
                        pg = b0 + ((tid + g * T) >> ltmin)
                        for i in range(rs):
                            lh = rs - 1 - i if forward else i
                            for kk in range(1 << (rs - 1)):
                                k = ((kk >> lh) << (lh + 1)) | (kk & ((1 << lh) - 1))
                                x = base + round_index(tid, g, k, ltmin, rs, T)
                                if forward:
                                    s = log_n - log_chunk + p + i
                                    assert (pg << i) + (kk >> lh) == (1 << s) + (x >> (log_n - s))
                                else:
                                    u = p + i
                                    assert (pg << (rs - 1 - i)) + (kk >> lh) == (1 << (log_n - u - 1)) + (x >> (u + 1))


def sm_pad(x: int) -> int:
    return x + (x >> 4)


@pytest.mark.parametrize("lv", LVS)
@pytest.mark.parametrize("log_chunk", range(3, 13))
def test_chunk_round_addresses_split_into_thread_base_and_constant_offset(log_chunk, lv):
    """ntt.cu round_load/round_store/global_load address register (g, k) as
    base(g) + offset(k): sm_pad(round_index(k)) == sm_pad(round_index(0)) + sm_pad(k << ltmin) and
    round_index(k) == round_index(0) + (k << ltmin), for every round of both chunk kernels; the
    inverse kernel's last round is (RS, ltmin) = (RSL, LTL) of inverse_chunk<LC>."""
    T = 1 << (log_chunk - lv)
    rounds = {(rs, log_chunk - p - rs) for p, rs in _rounds(log_chunk, True, lv)}
    rounds |= {(rs, p) for p, rs in _rounds(log_chunk, False, lv)}
    for rs, lt in rounds:
        for tid in range(T):
            for g in range(1 << (lv - rs)):
                x0 = round_index(tid, g, 0, lt, rs, T)
                for k in range(1 << rs):
                    x = round_index(tid, g, k, lt, rs, T)
                    assert x == x0 + (k << lt)
                    assert sm_pad(x) == sm_pad(x0) + sm_pad(k << lt)
    rest = log_chunk % lv
    full_end = log_chunk - rest
    p_last, rs_last = _rounds(log_chunk, False, lv)[-1]
    assert (rs_last, p_last) == ((rest, full_end) if rest else (lv, full_end - lv))
    p_first, rs_first = _rounds(log_chunk, True, lv)[0]  # forward: RS0 = rest or lv, ltmin LC - RS0
    assert (p_first, rs_first) == (0, rest or lv)


def test_base_convert_unguarded_terms_stay_inside_the_shared_table():
    """keyswitch_base_convert_s{SMAX} reads W[j * T + t] for every j < SMAX: for every group size
    the host may meet, its pick keeps those reads inside the block's shared table."""
    for size in range(1, 17):
        name = cb._base_convert_kernel(size)
        smax = int(name.rsplit("_s", 1)[1])
        assert smax >= size
        for targets in range(1, 80):
            shared_words = size * targets + 2 * targets + 4 * size + 1 + 3 * targets
            assert smax * targets <= shared_words, (size, targets, name)


@pytest.mark.parametrize("rows", [(0, 1, 2, 3, 4), (0, 1, 2, 3), (1, 2, 3, 4), (2, 3)])
def test_modup_own_rows_and_row_skip_table(rows):
    """modup_tables' own rows are each active digit's positions in the output, and the NTT
    row-skip table (ntt.cu skipped_row) visits exactly the other rows of every entry."""
    n = 8
    ctx = ro.make_context(n, ro.ntt_primes(40, 5, n), ro.ntt_primes(60, 2, n), dnum=2)  # digits (0,1,2), (3,4)
    t = cb.modup_tables(ctx, rows)
    R = len(t["out_rows"])
    active = cb.active_digits(ctx, rows)
    assert t["own_rows"] == [(rows.index(kept[0]), len(kept)) for _, kept in active]
    batch = 3
    table = cb.ntt_row_skip_table(t["own_rows"], batch, R).reshape(-1, 3)
    launched = R - min(count for _, count in t["own_rows"])
    for z, (start, count, total) in enumerate(table):
        d = z // batch
        visited = []
        for y in range(launched):  # skipped_row
            row = y + count if y >= start else y
            if row < total:
                visited.append(row)
        own = [rows.index(r) for r in active[d][1]]
        assert sorted(visited) == [r for r in range(R) if r not in own]


def test_numpy_modup_takes_own_rows_from_the_ntt_hint(ctx):
    """NumpyBackend.modup(c_ntt=): the own rows come from the hint (the same values when the
    hint is the NTT of c; a different hint shows in exactly those rows)."""
    from fhelium_cupy.ckks.backends.numpy_backend import NumpyBackend

    nb = NumpyBackend(ctx)
    rows = (0, 1, 2)
    c = _rand(ctx, rows, lead=(2,), seed=4)
    c_ntt = nb.ntt_forward(c, rows)
    plain = nb.modup(c, rows)
    assert np.array_equal(nb.modup(c, rows, c_ntt=c_ntt), plain)
    marked = nb.modup(c, rows, c_ntt=np.zeros_like(c_ntt))
    for d, (_, kept) in enumerate(cb.active_digits(ctx, rows)):
        own = [rows.index(r) for r in kept]
        assert not marked[d][..., own, :].any()
        other = [r for r in range(plain.shape[-2]) if r not in own]
        assert np.array_equal(marked[d][..., other, :], plain[d][..., other, :])
    with pytest.raises(ValueError, match="c_ntt"):
        nb.modup(c, rows, c_ntt=c_ntt[:1])


def _piece_sum(terms: list[tuple[int, int]], pieces: int) -> int:
    """modarith.cuh PieceSum: x in 27-bit pieces, w in 32-bit halves, each piece product added
    to a 64-bit sum (asserted never to wrap), the sums added at their weights modulo 2^128."""
    acc = [[0, 0] for _ in range(pieces)]
    for x, w in terms:
        assert x < 1 << (27 * pieces) and w < 1 << 61
        xs = [(x >> (27 * k)) & ((1 << 27) - 1) for k in range(pieces - 1)] + [x >> (27 * (pieces - 1))]
        assert all(p < 1 << 32 for p in xs)  # each piece is a 32-bit operand
        for k in range(pieces):
            for h, wh in enumerate((w & W, w >> 32)):
                acc[k][h] += xs[k] * (wh & 0xFFFFFFFF)
                assert acc[k][h] <= W, "a 64-bit piece sum would wrap"
    total = sum(acc[k][h] << (27 * k + 32 * h) for k in range(pieces) for h in range(2))
    return total % (1 << 128)


def test_piece_sums_are_exact_at_their_worst_case():
    """The base conversion's piecewise sum (keyswitch.cu convert_targets, two pieces for sources
    below 2^54) equals the exact sum for SMAX = 16 terms plus the negative-count term, each at
    its largest (x = 2^54 - 1, w = 2^61 - 1; count 16), and on random terms. The weight-pieces
    form is the same sum with the roles swapped (x = a weight below 2^54, w = a source below
    2^61), so these bounds cover it too."""
    top = [((1 << 54) - 1, (1 << 61) - 1)] * 16 + [(16, (1 << 61) - 1)]
    assert _piece_sum(top, 2) == sum(x * w for x, w in top)
    rng = np.random.default_rng(11)
    for _ in range(50):
        terms = [(int(rng.integers(0, 1 << 54)), int(rng.integers(0, 1 << 61))) for _ in range(int(rng.integers(1, 17)))]
        assert _piece_sum(terms, 2) == sum(x * w for x, w in terms)
    with pytest.raises(AssertionError):  # a 55-bit source does not fit two pieces
        _piece_sum([(1 << 54, 1)], 2)
