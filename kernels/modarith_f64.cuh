// Modular arithmetic in float64 for primes below 2^45 (header only).
//
// A 64-bit Shoup product costs about 14 integer multiply instructions on the int32 datapath;
// the float64 product below costs 6 float64 instructions (the H100/H200 SM issues 64 float64
// FMAs a clock, as many as int32 multiplies). It is exact: every value is an integer held
// exactly in a double, and the rounding errors only choose which representative comes out.
//
// Values are signed integers x with |x| < 2^49 (not residues in [0, q)): a product returns a
// representative in [-0.63 q, 0.63 q], a butterfly's sum and difference grow by at most that,
// and reduce_canonical_f64 brings any of them back to [0, q). Bounds, for q < 2^45 and
// |x| < 2^49 (qinv = 1/q rounded to nearest):
//   p = fl(x w), e = x w - p exactly (fma), |e| <= ulp(p) / 2 <= 2^41;
//   c = rint(p qinv) through the 1.5 * 2^52 bias (|p qinv| < 2^49 so the sum's ulp is 1);
//   |x w / q - c| <= 1/2 + 2^49 * 2 * 2^-53 = 0.625 (p and qinv each rounded, relative 2^-53);
//   fma(-c, q, p) is exact: its true value p - c q is an integer of magnitude
//   < 0.63 q + 2^41 < 2^53; adding e is exact for the same reason.
// A forward NTT of inputs in [0, 4q) stays below 4q + 16 * 0.63 q < 15q < 2^49.
// Every fused multiply-add is an explicit __fma_rn and no plain product feeds a plain sum, so
// NVRTC's FMA contraction (--fmad=true, the default) cannot change a result; 1/q is an IEEE
// division (a fast-math build's 1-2 ulp reciprocal would still keep products within 0.7 q).
// The result is congruent to x w mod q and depends only on the inputs, so every transform
// that ends in reduce_canonical_f64 gives the canonical residues of the integer path.
#pragma once
#include "modarith.cuh"

namespace fhe {

// Largest modulus the float64 path takes (exclusive).
constexpr u64 F64_MAX_Q = 1ull << 45;
// 1.5 * 2^52: adding it rounds a double of magnitude < 2^51 to an integer, and its bit pattern
// 0x4338000000000000 has the low 51 mantissa bits free.
constexpr double F64_ROUND_BIAS = 6755399441055744.0;
constexpr u64 F64_ROUND_BITS = 0x4338000000000000ull;

// Word x < 2^51 as a double, by setting the bias's free mantissa bits (no conversion unit).
__device__ __forceinline__ double word_to_f64(u64 x) {
  return __longlong_as_double((long long)(x | F64_ROUND_BITS)) - F64_ROUND_BIAS;
}

// Integer-valued double 0 <= d < 2^51 as a word (the inverse of word_to_f64).
__device__ __forceinline__ u64 f64_to_word(double d) {
  return (u64)__double_as_longlong(d + F64_ROUND_BIAS) & ((1ull << 51) - 1);
}

// A modulus as the float64 path uses it.
struct ModulusF64 {
  double q, qinv;
};
__device__ __forceinline__ ModulusF64 modulus_f64(u64 q) {
  const double qd = word_to_f64(q);
  return {qd, 1.0 / qd};
}

// x w - c q for c = rint(x w / q) (up to the bound above): in [-0.63 q, 0.63 q], congruent to
// x w. |x| < 2^49, 0 <= w < q < 2^45.
__device__ __forceinline__ double mul_mod_f64(double x, double w, const ModulusF64& m) {
  const double p = x * w;
  const double e = __fma_rn(x, w, -p);
  const double c = __fma_rn(p, m.qinv, F64_ROUND_BIAS) - F64_ROUND_BIAS;
  return __fma_rn(-c, m.q, p) + e;
}

// Any |x| < 2^50 -> a representative in [-q/2 - 1/4, q/2 + 1/4] (see reduce_canonical_f64).
__device__ __forceinline__ double reduce_centered_f64(double x, const ModulusF64& m) {
  const double c = __fma_rn(x, m.qinv, F64_ROUND_BIAS) - F64_ROUND_BIAS;
  return __fma_rn(-c, m.q, x);
}

// Any |x| < 2^50 -> x mod q in [0, q) (as an integer-valued double): |x / q - c| <= 1/2 + 2^-52 |x| / q,
// so r = x - c q (exact) lies in [-q/2 - 1/4, q/2 + 1/4].
__device__ __forceinline__ double reduce_canonical_f64(double x, const ModulusF64& m) {
  const double r = reduce_centered_f64(x, m);
  return r < 0.0 ? r + m.q : r;
}

}  // namespace fhe
