// Modular arithmetic on 64-bit words for RNS/CKKS kernels (header only).
//
// Word type: unsigned long long (u64). Every modulus q is an odd prime < 2^61, so
// 4q < 2^63 and every lazy range below fits a word without overflow.
//
// Residue ranges used in kernel comments:
//   canonical  [0, q)    at every kernel boundary (the backend contract)
//   lazy       [0, 2q)   suffix _lazy
//   harvey     [0, 4q)   only inside the forward NTT (Harvey butterflies)
//
// Per-modulus constant table (device array `consts`, shape [FHE_NCONST, M], M = number of
// moduli of the context; entry (c, id) at consts[c * M + id]):
//   FHE_C_Q        q
//   FHE_C_QINV     q^-1 mod 2^64                  (Montgomery, R = 2^64)
//   FHE_C_R2       2^128 mod q                    (R^2, to enter Montgomery form)
//   FHE_C_BARRETT  floor(2^64 / q)                (Shoup constant of 1 = Barrett reduce)
//   FHE_C_NINV     N^-1 mod q
//   FHE_C_NINV_SH  floor(N^-1 * 2^64 / q)         (Shoup companion)
//
// Only this project's headers are included: kernels compile with NVRTC and no CUDA
// toolkit headers (__umul64hi is an NVRTC/nvcc builtin).
#pragma once

namespace fhe {

typedef unsigned long long u64;
typedef long long i64;

enum {
  FHE_C_Q = 0,
  FHE_C_QINV = 1,
  FHE_C_R2 = 2,
  FHE_C_BARRETT = 3,
  FHE_C_NINV = 4,
  FHE_C_NINV_SH = 5,
  FHE_NCONST = 6
};

// High 64 bits of the 128-bit product a*b.
__device__ __forceinline__ u64 mulhi(u64 a, u64 b) { return __umul64hi(a, b); }

// x in [0, 2q) -> [0, q).
__device__ __forceinline__ u64 reduce_once(u64 x, u64 q) { return x >= q ? x - q : x; }

// a, b in [0, q) -> a + b mod q in [0, q).
__device__ __forceinline__ u64 add_mod(u64 a, u64 b, u64 q) { return reduce_once(a + b, q); }

// a, b in [0, q) -> a - b mod q in [0, q).
__device__ __forceinline__ u64 sub_mod(u64 a, u64 b, u64 q) { return a >= b ? a - b : a + q - b; }

// a in [0, q) -> -a mod q in [0, q).
__device__ __forceinline__ u64 neg_mod(u64 a, u64 q) { return a == 0 ? 0 : q - a; }

// a, b in [0, 2q) -> a + b in [0, 2q) (lazy add).
__device__ __forceinline__ u64 add_mod_lazy(u64 a, u64 b, u64 two_q) {
  u64 s = a + b;
  return s >= two_q ? s - two_q : s;
}

// a, b in [0, 2q) -> a - b + 2q in (0, 4q) (lazy sub, caller reduces).
__device__ __forceinline__ u64 sub_mod_lazy(u64 a, u64 b, u64 two_q) { return a + two_q - b; }

// Montgomery product with R = 2^64: a * b * 2^-64 mod q in [0, q).
// Precondition: a * b < q * 2^64 (true for a < 2^64 and b < q, or a, b < 2q since 4q < 2^64).
// t = a*b = hi:lo; m = lo * q^-1 mod 2^64 makes t - m*q divisible by 2^64 with equal low
// words, so (t - m*q) / 2^64 = hi - mulhi(m, q) in (-q, q); add q once if negative.
__device__ __forceinline__ u64 mont_mul(u64 a, u64 b, u64 q, u64 qinv) {
  const u64 lo = a * b;
  const u64 hi = mulhi(a, b);
  const u64 m = lo * qinv;
  const u64 mh = mulhi(m, q);
  return hi >= mh ? hi - mh : hi - mh + q;
}

// Shoup product by a fixed constant w < q with wp = floor(w * 2^64 / q):
// any x < 2^64 -> x * w mod q in [0, 2q) (lazy). Needs 2q < 2^64.
__device__ __forceinline__ u64 shoup_mul_lazy(u64 x, u64 w, u64 wp, u64 q) {
  const u64 qh = mulhi(x, wp);
  return x * w - qh * q;
}

// Shoup product, canonical: [0, q).
__device__ __forceinline__ u64 shoup_mul(u64 x, u64 w, u64 wp, u64 q) {
  return reduce_once(shoup_mul_lazy(x, w, wp, q), q);
}

// Barrett reduction of any x < 2^64 with barrett = floor(2^64 / q): x mod q in [0, q).
// (Shoup product with w = 1.)
__device__ __forceinline__ u64 reduce_u64(u64 x, u64 q, u64 barrett) {
  return reduce_once(x - mulhi(x, barrett) * q, q);
}

// 128-bit multiply-accumulate: (hi:lo) += a * b (the caller bounds hi against overflow).
__device__ __forceinline__ void mad_wide(u64& lo, u64& hi, u64 a, u64 b) {
  asm("mad.lo.cc.u64 %0, %2, %3, %0;\n\tmadc.hi.u64 %1, %2, %3, %1;" : "+l"(lo), "+l"(hi) : "l"(a), "l"(b));
}

// 128-bit add: (hi:lo) += (xhi:xlo) mod 2^128.
__device__ __forceinline__ void add_wide(u64& lo, u64& hi, u64 xlo, u64 xhi) {
  asm("add.cc.u64 %0, %0, %2;\n\taddc.u64 %1, %1, %3;" : "+l"(lo), "+l"(hi) : "l"(xlo), "l"(xhi));
}

// (hi:lo) += v * 2^SH mod 2^128 (SH a compile-time shift < 128).
template <int SH>
__device__ __forceinline__ void add_shifted(u64& lo, u64& hi, u64 v) {
  if constexpr (SH == 0) {
    add_wide(lo, hi, v, 0);
  } else if constexpr (SH < 64) {
    add_wide(lo, hi, v << SH, v >> (64 - SH));
  } else {
    hi += v << (SH - 64);
  }
}

// Exact sums of products x * w (x < 2^(27 NP), w < 2^61) in pieces, without a 128-bit carry
// chain per term: x = sum_k x_k 2^(27k) with x_k < 2^27 (split_pieces), w = w_0 + w_1 2^32
// (w_0 < 2^32, w_1 < 2^29), and a[k][h] += x_k * w_h is one 32 x 32 + 64-bit multiply-add
// (IMAD.WIDE.U32). Every product is below 2^59, so up to 32 terms never overflow a piece sum;
// wide() adds the pieces at their weights 2^(27k + 32h) into the exact 128-bit total (exact
// while the total stays below 2^128: 32 terms of x * w < 2^(27 NP + 61)). NP = 2 covers
// x < 2^54 (4 multiply-adds a term). Wider x take mad_wide: three pieces (6 multiply-adds)
// measured slower than it in the base conversion (H200, 2026-11-29 s5).
constexpr int FHE_PIECE_BITS = 27;

// acc += x * w for 32-bit x, w (one IMAD.WIDE.U32; written as PTX because the C++ form
// (u64)x * w + acc measured as a multiply-add plus a separate add of the high word in the SASS).
__device__ __forceinline__ void mad_wide_u32(u64& acc, unsigned x, unsigned w) {
  asm("mad.wide.u32 %0, %1, %2, %0;" : "+l"(acc) : "r"(x), "r"(w));
}

template <int NP>
__device__ __forceinline__ void split_pieces(unsigned (&p)[NP], u64 x) {
#pragma unroll
  for (int k = 0; k + 1 < NP; ++k) p[k] = (unsigned)(x >> (FHE_PIECE_BITS * k)) & ((1u << FHE_PIECE_BITS) - 1);
  p[NP - 1] = (unsigned)(x >> (FHE_PIECE_BITS * (NP - 1)));
}

template <int NP>
struct PieceSum {
  static_assert(NP >= 1 && NP <= 2, "1 or 2 pieces of 27 bits");
  u64 a[NP][2];
  __device__ __forceinline__ PieceSum() {
#pragma unroll
    for (int k = 0; k < NP; ++k) a[k][0] = a[k][1] = 0;
  }
  // += x * w, x given as its pieces.
  __device__ __forceinline__ void mad(const unsigned (&x)[NP], u64 w) {
    const unsigned w0 = (unsigned)w, w1 = (unsigned)(w >> 32);
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      mad_wide_u32(a[k][0], x[k], w0);
      mad_wide_u32(a[k][1], x[k], w1);
    }
  }
  // += x * w for a small x < 2^27 (one piece).
  __device__ __forceinline__ void mad_small(unsigned x, u64 w) {
    mad_wide_u32(a[0][0], x, (unsigned)w);
    mad_wide_u32(a[0][1], x, (unsigned)(w >> 32));
  }
  // The exact total as hi:lo.
  __device__ __forceinline__ void wide(u64& lo, u64& hi) const {
    lo = a[0][0];
    hi = 0;
    add_shifted<32>(lo, hi, a[0][1]);
    if constexpr (NP > 1) {
      add_shifted<FHE_PIECE_BITS>(lo, hi, a[1][0]);
      add_shifted<FHE_PIECE_BITS + 32>(lo, hi, a[1][1]);
    }
  }
};

// Montgomery reduction of a 128-bit value x = hi:lo with hi < q: x * 2^-64 mod q in [0, q).
// m = lo * q^-1 mod 2^64 makes x - m*q divisible by 2^64 with equal low words, so
// (x - m*q) / 2^64 = hi - mulhi(m, q) in (-q, q); add q once if negative.
__device__ __forceinline__ u64 redc_wide(u64 lo, u64 hi, u64 q, u64 qinv) {
  const u64 mh = mulhi(lo * qinv, q);
  return hi >= mh ? hi - mh : hi - mh + q;
}

// Standard-form product a * b mod q for a, b in [0, q): two Montgomery products,
// (a*b*R^-1) * R^2 * R^-1.
__device__ __forceinline__ u64 mul_mod(u64 a, u64 b, u64 q, u64 qinv, u64 r2) {
  return mont_mul(mont_mul(a, b, q, qinv), r2, q, qinv);
}

// centered(x, q) < 0, for x in [0, q): x > (q - 1) / 2.
__device__ __forceinline__ bool is_negative_centered(u64 x, u64 q) { return x > (q >> 1); }

// Per-modulus constants of one row, loaded once per thread (uniform per block row).
struct Modulus {
  u64 q;
  u64 qinv;
  u64 r2;
  u64 barrett;
};

__device__ __forceinline__ Modulus load_modulus(const u64* consts, int num_moduli, int id) {
  Modulus m;
  m.q = consts[FHE_C_Q * num_moduli + id];
  m.qinv = consts[FHE_C_QINV * num_moduli + id];
  m.r2 = consts[FHE_C_R2 * num_moduli + id];
  m.barrett = consts[FHE_C_BARRETT * num_moduli + id];
  return m;
}

// centered(c0, q0) mod q for c0 in [0, q0) (c0 - q0 when c0 > (q0 - 1) / 2), q0_mod_q = q0 mod q:
// the correction of a rescale (rns.cu rescale_*, ntt.cu ntt_forward_column_stages_rescale_spread).
__device__ __forceinline__ u64 centered_mod(u64 c0, u64 q0, u64 q0_mod_q, const Modulus& md) {
  u64 r = reduce_u64(c0, md.q, md.barrett);
  if (is_negative_centered(c0, q0)) r = sub_mod(r, q0_mod_q, md.q);
  return r;
}

}  // namespace fhe
