// Negacyclic NTT butterfly stages shared by ntt.cu and keyswitch.cu (header only).
//
// Convention (backend contract): forward = Cooley-Tukey, natural-order input, bit-reversed
// output; stage s (m = 2^s, t = N / 2m) pairs x and x + t with twiddle tw[m + (x >> log2(2t))],
// tw[k] = psi^bitrev(k). Inverse = Gentleman-Sande on bit-reversed input; stage u (t = 2^u)
// uses itw[(N >> (u + 1)) + (x >> (u + 1))], itw[k] = psi^-bitrev(k), then a factor N^-1.
//
// Decomposition, N = 2^log_n, chunk C = 2^log_chunk, K = log_n - log_chunk:
//   forward : K "column" stages (s < K, strides >= C) in registers, one thread per column
//             j < C holding x = j + c*C for c < 2^K; then log_chunk "chunk" stages on
//             contiguous C-element chunks in shared memory.
//   inverse : log_chunk chunk stages first (u < log_chunk), then K column stages, then N^-1.
// Twiddle tables are [M, N, 2] per modulus id: (w, floor(w * 2^64 / q)) pairs, the Shoup companion
// beside its twiddle so one 16-byte load fetches both (u64x2), followed in the same allocation by
// [M, N] float64 copies of w for the float64 arithmetic (CupyBackend._tw; twiddle_row).
#pragma once
#include "modarith.cuh"
#include "modarith_f64.cuh"

namespace fhe {

// A (twiddle, Shoup companion) pair; also used for 16-byte coefficient loads/stores.
struct alignas(16) u64x2 {
  u64 a, b;
};

// One modulus's row of a twiddle table: its (w, Shoup) pairs and its float64 copies of w.
struct TwiddleRow {
  const u64x2* w;
  const double* f;
};
__device__ __forceinline__ TwiddleRow twiddle_row(const u64* tw2, int num_moduli, int log_n, int id) {
  const i64 n = (i64)1 << log_n;
  return {reinterpret_cast<const u64x2*>(tw2) + id * n,
          reinterpret_cast<const double*>(tw2 + 2 * num_moduli * n) + id * n};
}

// x - m if x >= m else x, for m < 2^63 and x < m + 2^63 (every lazy range here: x < 4q < 2^63):
// the sign of x - m as a signed word decides (one compare of the high word, not a 64-bit compare).
__device__ __forceinline__ u64 sub_if_ge(u64 x, u64 m) {
  const u64 t = x - m;
  return (i64)t < 0 ? x : t;
}

// Shoup product x * w mod q in [0, 2q) with nq = 2^64 - q: x*w + qh*(-q) mod 2^64 equals
// shoup_mul_lazy's x*w - qh*q (one multiply-add chain, no separate negation).
__device__ __forceinline__ u64 shoup_mul_lazy_nq(u64 x, u64 w, u64 wp, u64 nq) {
  return x * w + mulhi(x, wp) * nq;
}

// Harvey forward butterfly: a, b in [0, 4q) -> a', b' in [0, 4q). nq = 2^64 - q.
__device__ __forceinline__ void ct_butterfly(u64& a, u64& b, u64 w, u64 wsh, u64 nq, u64 two_q) {
  const u64 u = sub_if_ge(a, two_q);
  const u64 v = shoup_mul_lazy_nq(b, w, wsh, nq);
  a = u + v;
  b = u - v + two_q;
}

// Gentleman-Sande butterfly: a, b in [0, 2q) -> a', b' in [0, 2q). nq = 2^64 - q.
__device__ __forceinline__ void gs_butterfly(u64& a, u64& b, u64 w, u64 wsh, u64 nq, u64 two_q) {
  const u64 u = a;
  const u64 v = b;
  a = sub_if_ge(u + v, two_q);
  b = shoup_mul_lazy_nq(u - v + two_q, w, wsh, nq);
}

// [0, 4q) -> [0, q).
__device__ __forceinline__ u64 reduce_from_4q(u64 x, u64 q, u64 two_q) { return sub_if_ge(sub_if_ge(x, two_q), q); }

// The arithmetic of the forward stages (column and chunk): a word type T the registers and shared memory
// hold, a twiddle type TW (row(): its table in a TwiddleRow), from_word (a loaded word in
// [0, 4q)), butterfly (Cooley-Tukey with a twiddle) and canonical (T -> its residue in [0, q)).
// ForwardArithU64: Harvey butterflies on words in [0, 4q), any modulus (< 2^61).
// ForwardArithF64: float64 (modarith_f64.cuh) for moduli below F64_MAX_Q: signed integers that
// grow by at most 0.63 q a stage, 6 float64 instructions a product instead of about 14 int32
// multiplies. FHE_NTT_F64=0 keeps every modulus on ForwardArithU64 (A/B).
#ifndef FHE_NTT_F64
#define FHE_NTT_F64 1
#endif
struct ForwardArithU64 {
  typedef u64 T;
  typedef u64x2 TW;
  u64 q, nq, two_q;
  __device__ __forceinline__ explicit ForwardArithU64(u64 modulus) : q(modulus), nq(0 - modulus), two_q(2 * modulus) {}
  __device__ __forceinline__ const u64x2* row(const TwiddleRow& r) const { return r.w; }
  __device__ __forceinline__ u64 from_word(u64 x) const { return x; }
  __device__ __forceinline__ void butterfly(u64& a, u64& b, const u64x2& w) const {
    ct_butterfly(a, b, w.a, w.b, nq, two_q);
  }
  __device__ __forceinline__ u64 canonical(u64 x) const { return reduce_from_4q(x, q, two_q); }
  __device__ __forceinline__ u64 column_word(u64 x) const { return x; }  // harvey [0, 4q)
};
struct ForwardArithF64 {
  typedef double T;
  typedef double TW;
  ModulusF64 m;
  __device__ __forceinline__ explicit ForwardArithF64(u64 q) : m(modulus_f64(q)) {}
  __device__ __forceinline__ const double* row(const TwiddleRow& r) const { return r.f; }
  __device__ __forceinline__ double from_word(u64 x) const { return word_to_f64(x); }
  __device__ __forceinline__ void butterfly(double& a, double& b, double w) const {
    const double v = mul_mod_f64(b, w, m);
    b = a - v;
    a = a + v;
  }
  __device__ __forceinline__ u64 canonical(double x) const { return f64_to_word(reduce_canonical_f64(x, m)); }
  __device__ __forceinline__ u64 column_word(double x) const { return canonical(x); }
};

// ForwardArithF64 on the (w, Shoup) pairs, converting w as it multiplies: the forward column
// kernels' form. With the float64 table their twiddle registers grew (ptxas: 96 -> 122 registers
// a thread in ntt_forward_column_stages, one block fewer an SM) and the N=2^16 column launch
// went from 23.4 to 25.8 µs (2026-11-30-s27/f64_twiddles/), while the chunk kernels gained.
struct ForwardArithF64Pairs : ForwardArithF64 {
  typedef u64x2 TW;
  __device__ __forceinline__ explicit ForwardArithF64Pairs(u64 q) : ForwardArithF64(q) {}
  __device__ __forceinline__ const u64x2* row(const TwiddleRow& r) const { return r.w; }
  __device__ __forceinline__ void butterfly(double& a, double& b, const u64x2& w) const {
    ForwardArithF64::butterfly(a, b, word_to_f64(w.a));
  }
};

// The arithmetic of the inverse chunk and column stages: as the forward one, with begin_round
// (applied to a thread's values after each shared-memory exchange of the chunk stages),
// column_from_word (a column kernel's input word in [0, 2q)) and output (T -> the stored word:
// lazy [0, 2q), or times N^-1 and canonical when `whole`).
// InverseArithU64: Gentleman-Sande butterflies on [0, 2q); begin_round does nothing.
// InverseArithF64: the sum side of a Gentleman-Sande butterfly doubles a stage, so begin_round
// brings every value back to [-q/2, q/2] (3 float64 instructions) before each later round:
// a round of at most 3 stages from canonical (the first) or half-reduced values stays below 8q,
// and so does each product's input (mul_mod_f64 needs < 2^49). Output canonical either way.
// Its column stages start from x - q in [-q, q): at most 4 stages stay below 16q.
struct InverseArithU64 {
  typedef u64 T;
  typedef u64x2 TW;
  u64 q, nq, two_q, ninv, ninv_sh;
  __device__ __forceinline__ InverseArithU64(u64 modulus, u64 n_inv, u64 n_inv_sh)
      : q(modulus), nq(0 - modulus), two_q(2 * modulus), ninv(n_inv), ninv_sh(n_inv_sh) {}
  __device__ __forceinline__ const u64x2* row(const TwiddleRow& r) const { return r.w; }
  __device__ __forceinline__ u64 from_word(u64 x) const { return x; }
  __device__ __forceinline__ void butterfly(u64& a, u64& b, const u64x2& w) const {
    gs_butterfly(a, b, w.a, w.b, nq, two_q);
  }
  template <int M>
  __device__ __forceinline__ void begin_round(u64 (&)[M]) const {}
  __device__ __forceinline__ u64 column_from_word(u64 x) const { return x; }
  __device__ __forceinline__ u64 output(u64 x, bool whole) const {
    return whole ? shoup_mul(x, ninv, ninv_sh, q) : x;
  }
};
struct InverseArithF64 {
  typedef double T;
  typedef double TW;
  ModulusF64 m;
  double ninv;  // N^-1 mod q (used when whole)
  __device__ __forceinline__ InverseArithF64(u64 q, u64 n_inv, u64 /* Shoup companion: unused */)
      : m(modulus_f64(q)), ninv(word_to_f64(n_inv)) {}
  __device__ __forceinline__ const double* row(const TwiddleRow& r) const { return r.f; }
  __device__ __forceinline__ double from_word(u64 x) const { return word_to_f64(x); }
  __device__ __forceinline__ void butterfly(double& a, double& b, double w) const {
    const double d = a - b;
    a = a + b;
    b = mul_mod_f64(d, w, m);
  }
  template <int M>
  __device__ __forceinline__ void begin_round(double (&v)[M]) const {
#pragma unroll
    for (int i = 0; i < M; ++i) v[i] = reduce_centered_f64(v[i], m);
  }
  __device__ __forceinline__ double column_from_word(u64 x) const { return word_to_f64(x) - m.q; }
  __device__ __forceinline__ u64 output(double x, bool whole) const {
    return f64_to_word(reduce_canonical_f64(whole ? mul_mod_f64(x, ninv, m) : x, m));
  }
};

// Runs BODY with `ar` the arithmetic of a row of modulus Q: F64 when USE_F64 (a build switch)
// and Q < F64_MAX_Q, else U64, either built from the parenthesized ARGS (Q first). Every kernel
// picks its arithmetic here. (A macro: NVRTC wants a lambda's execution space annotated and
// nvcc refuses the annotation.)
#define FHE_WITH_ROW_ARITH(F64, U64, USE_F64, Q, ARGS, BODY) \
  do {                                                      \
    if ((USE_F64) && (Q) < F64_MAX_Q) {                     \
      const F64 ar ARGS;                                    \
      BODY;                                                 \
    } else {                                                \
      const U64 ar ARGS;                                    \
      BODY;                                                 \
    }                                                       \
  } while (0)

// Forward column stages s = 0..K-1 on v[c] = a[j + c*C] (any j), in the arithmetic `ar`
// (ForwardArithU64: in/out [0, 4q)).
template <int K, class A>
__device__ __forceinline__ void forward_column_stages(typename A::T (&v)[1 << K], const typename A::TW* tw,
                                                      const A& ar) {
#pragma unroll
  for (int s = 0; s < K; ++s) {
    const int lt = K - s - 1;  // log2 of the stride in columns
#pragma unroll
    for (int bf = 0; bf < (1 << (K - 1)); ++bf) {
      const int cl = ((bf >> lt) << (lt + 1)) | (bf & ((1 << lt) - 1));
      const int widx = (1 << s) + (cl >> (lt + 1));
      ar.butterfly(v[cl], v[cl + (1 << lt)], tw[widx]);
    }
  }
}

// Inverse column stages u = log_chunk..log_n-1 on v[c] = a[j + c*C]. In/out [0, 2q).
// Stage lt pairs (c, c + 2^lt) with itw[(root << (log_n - u - 1)) + (c >> (lt + 1))]: root = 1
// for a whole column; inverse_column_stages_x2 runs one lane's half-column of a K+1-stage
// column through here with root = 2 + h (its twiddle offset h << (K - 1 - lt) folded in).
// In the arithmetic `ar` (InverseArithU64: in/out [0, 2q)).
template <int K, class A>
__device__ __forceinline__ void inverse_column_stages(typename A::T (&v)[1 << K], const typename A::TW* itw,
                                                      const A& ar, int log_n, int root = 1) {
  const int log_chunk = log_n - K;
#pragma unroll
  for (int lt = 0; lt < K; ++lt) {  // stride 2^lt columns, u = log_chunk + lt
    const int u = log_chunk + lt;
#pragma unroll
    for (int bf = 0; bf < (1 << (K - 1)); ++bf) {
      const int cl = ((bf >> lt) << (lt + 1)) | (bf & ((1 << lt) - 1));
      const int widx = (root << (log_n - u - 1)) + (cl >> (lt + 1));
      ar.butterfly(v[cl], v[cl + (1 << lt)], itw[widx]);
    }
  }
}

// ---- two threads per column (the _x2 column kernels) ------------------------------------
// Lanes 2j + h (h = 0, 1) share column j; each holds H = 2^(K-1) of its 2^K values, so a column
// kernel has twice the threads and half the chain per thread. Within-thread stages run on the
// half-vector; the one stage whose pairs straddle the two lanes goes through pair_exchange.

// 64-bit value of the partner lane (lane ^ 1); every lane of the warp takes part.
__device__ __forceinline__ u64 partner_value(u64 x) {
  const unsigned lo = __shfl_xor_sync(0xffffffffu, (unsigned)x, 1);
  const unsigned hi = __shfl_xor_sync(0xffffffffu, (unsigned)(x >> 32), 1);
  return ((u64)hi << 32) | lo;
}
__device__ __forceinline__ double partner_value(double x) {
  return __longlong_as_double((long long)partner_value((u64)__double_as_longlong(x)));
}

// A stage whose pair i is (lane 0's v[i], lane 1's v[i]) for i < H: afterwards lane h holds the
// pairs i = 2k + h (k < H/2) as (a[k], b[k]). Each lane sends the half the other one keeps.
template <int H, class W>
__device__ __forceinline__ void pair_exchange(const W (&v)[H], W (&a)[H / 2], W (&b)[H / 2], int h) {
#pragma unroll
  for (int k = 0; k < H / 2; ++k) {
    const W got = partner_value(h ? v[2 * k] : v[2 * k + 1]);
    a[k] = h ? got : v[2 * k];
    b[k] = h ? v[2 * k + 1] : got;
  }
}

// Forward column stages with two lanes per column (K >= 2): lane h holds v[i] = x[2i + h]
// (parity layout), so stages 0 .. K-2 (distances 2^(K-1-s) >= 2 in x) pair values of one lane,
// with the twiddles of forward_column_stages<K-1> (x >> (K - s) = i >> (K - 1 - s)); stage K-1
// pairs (2i, 2i + 1) across the lanes. Out: lane h's pairs i = 2k + h as (a[k], b[k]) = x[2i],
// x[2i + 1] (ForwardArithU64: [0, 4q)).
template <int K, class A>
__device__ __forceinline__ void forward_column_stages_x2(typename A::T (&v)[1 << (K - 1)],
                                                         typename A::T (&a)[1 << (K - 2)],
                                                         typename A::T (&b)[1 << (K - 2)],
                                                         const typename A::TW* tw, const A& ar, int h) {
  static_assert(K >= 2, "two lanes per column need at least two column stages");
  forward_column_stages<K - 1>(v, tw, ar);
  pair_exchange<(1 << (K - 1))>(v, a, b, h);
#pragma unroll
  for (int k = 0; k < (1 << (K - 2)); ++k) ar.butterfly(a[k], b[k], tw[(1 << (K - 1)) + 2 * k + h]);
}

// Inverse column stages u = log_n - K .. log_n - 1 with two lanes per column (K >= 2): lane h
// holds v[i] = x[i + h H] (block layout, H = 2^(K-1)), so stages lt = 0 .. K-2 (distances
// 2^lt < H) pair values of one lane: inverse_column_stages<K-1> with root 2 + h (the twiddle
// index (1 << (K - 1 - lt)) + ((i + h H) >> (lt + 1)) = ((2 + h) << (K - 2 - lt)) + (i >> (lt + 1))).
// The last stage pairs (i, i + H) across the lanes (twiddle itw[1]). Out: lane h's pairs
// i = 2k + h as (a[k], b[k]) = x[i], x[i + H] (InverseArithU64: in/out [0, 2q)).
template <int K, class A>
__device__ __forceinline__ void inverse_column_stages_x2(typename A::T (&v)[1 << (K - 1)],
                                                         typename A::T (&a)[1 << (K - 2)],
                                                         typename A::T (&b)[1 << (K - 2)],
                                                         const typename A::TW* itw, const A& ar, int log_n, int h) {
  static_assert(K >= 2, "two lanes per column need at least two column stages");
  inverse_column_stages<K - 1>(v, itw, ar, log_n, 2 + h);
  pair_exchange<(1 << (K - 1))>(v, a, b, h);
  const typename A::TW w = itw[1];
#pragma unroll
  for (int k = 0; k < (1 << (K - 2)); ++k) ar.butterfly(a[k], b[k], w);
}

}  // namespace fhe
