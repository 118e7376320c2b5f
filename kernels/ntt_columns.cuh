// The forward column pass of one row: the first K = log_n - log_chunk forward NTT stages of
// column j (strides >= C = 2^log_chunk), loaded through a functor (what the row holds at
// coefficient index x), run in registers and stored at out[c C + j], c < 2^K. Shared by the
// column kernels of ntt.cu and the ModUp conversion of keyswitch.cu that ends in them
// (keyswitch_base_convert_bytes_mma_columns).
#pragma once
#include "modarith.cuh"
#include "ntt_stages.cuh"

namespace fhe {

// What a forward column kernel reads at coefficient index x of its row: the row itself
// (RowLoad), or centered(c0, q0) mod q of a row c0 of one prime q0 (SpreadLoad: a rounding
// division's correction, ntt_forward_column_stages_rescale_spread, and a one-prime digit's base
// conversion, ntt_forward_column_stages_modup_spread).
struct RowLoad {
  const u64* src;
  __device__ __forceinline__ u64 operator()(int x) const { return src[x]; }
};
struct SpreadLoad {
  const u64* c0;
  u64 q0, q0_mod_q;
  Modulus md;
  __device__ __forceinline__ u64 operator()(int x) const { return centered_mod(c0[x], q0, q0_mod_q, md); }
};

// FHE_NTT_F64_COLUMN=0 keeps the one-lane column kernels on ForwardArithU64 (A/B); their
// float64 form ends in canonical residues (a subset of their [0, 4q) contract).
#ifndef FHE_NTT_F64_COLUMN
#define FHE_NTT_F64_COLUMN FHE_NTT_F64
#endif
// The column kernels take the float64 arithmetic per row (FHE_NTT_F64_COLUMN, q < F64_MAX_Q):
// forward ones on the (w, Shoup) pairs (ForwardArithF64Pairs), their words out canonical.

template <int K, class Load, class A>
__device__ __forceinline__ void forward_columns_body(const Load& in, u64* out, const A& ar, const typename A::TW* tw,
                                                     int log_chunk, int j) {
  const int C = 1 << log_chunk;
  typename A::T v[1 << K];
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) v[c] = ar.from_word(in((c << log_chunk) + j));
  forward_column_stages<K>(v, tw, ar);
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) out[c * C + j] = ar.column_word(v[c]);
}

// Lane h's forward column stages of column j from its values in the parity layout (v[i] =
// x[2i + h]), and their stores.
template <int K, class A>
__device__ __forceinline__ void forward_columns_store_x2(typename A::T (&v)[1 << (K - 1)], u64* out, const A& ar,
                                                         const typename A::TW* tw, int log_chunk, int j, int h) {
  typename A::T a[1 << (K - 2)], b[1 << (K - 2)];
  forward_column_stages_x2<K>(v, a, b, tw, ar, h);
#pragma unroll
  for (int k = 0; k < (1 << (K - 2)); ++k) {  // pair i = 2k + h: x[2i], x[2i + 1]
    out[((4 * k + 2 * h) << log_chunk) + j] = ar.column_word(a[k]);
    out[((4 * k + 2 * h + 1) << log_chunk) + j] = ar.column_word(b[k]);
  }
}
template <int K, class Load, class A>
__device__ __forceinline__ void forward_columns_body_x2(const Load& in, u64* out, const A& ar,
                                                        const typename A::TW* tw, int log_chunk, int j, int h) {
  typename A::T v[1 << (K - 1)];
#pragma unroll
  for (int i = 0; i < (1 << (K - 1)); ++i) v[i] = ar.from_word(in(((2 * i + h) << log_chunk) + j));
  forward_columns_store_x2<K>(v, out, ar, tw, log_chunk, j, h);
}

// The K = log_n - log_chunk column stages of column j (X2: lane h of two a column), by K.
template <bool X2, class Load, class A>
__device__ __forceinline__ void forward_columns_in(const Load& in, u64* out, const A& ar, const typename A::TW* tw,
                                                   int log_n, int log_chunk, int j, int h) {
  if constexpr (X2) {
    switch (log_n - log_chunk) {
      case 2: forward_columns_body_x2<2>(in, out, ar, tw, log_chunk, j, h); break;
      case 3: forward_columns_body_x2<3>(in, out, ar, tw, log_chunk, j, h); break;
      case 4: forward_columns_body_x2<4>(in, out, ar, tw, log_chunk, j, h); break;
      default: break;
    }
  } else {
    switch (log_n - log_chunk) {
      case 1: forward_columns_body<1>(in, out, ar, tw, log_chunk, j); break;
      case 2: forward_columns_body<2>(in, out, ar, tw, log_chunk, j); break;
      case 3: forward_columns_body<3>(in, out, ar, tw, log_chunk, j); break;
      case 4: forward_columns_body<4>(in, out, ar, tw, log_chunk, j); break;
      default: break;
    }
  }
}
template <bool X2, class Load>
__device__ __forceinline__ void forward_columns(const Load& in, u64* out, u64 q, const TwiddleRow& tw, int log_n,
                                                int log_chunk, int j, int h) {
  FHE_WITH_ROW_ARITH(ForwardArithF64Pairs, ForwardArithU64, FHE_NTT_F64_COLUMN, q, (q),
                     (forward_columns_in<X2>(in, out, ar, ar.row(tw), log_n, log_chunk, j, h)));
}

}  // namespace fhe
