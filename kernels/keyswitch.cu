// Hybrid key switching: ModUp (balanced fast base conversion of each digit), key inner
// product (optionally through the NTT-domain Galois permutation) and rounding ModDown.
//
// Notation: L = Q rows of the input (`rows`), K = P primes, R = L + K output rows
// (`rows + p_rows`, rowmap of length R; rowmap[0..L) are the Q rows). D = active digits.
#include "modarith.cuh"
#include "ntt_columns.cuh"

using namespace fhe;

// ---- Fast base conversion (the ModUp and ModDown extension) --------------------------------
// For group g of S_g source rows (primes s_j, product Q_g) and T target rows (moduli m_t):
//   out[t] = sum_j centered(y_j, s_j) * (Q_g / s_j) mod m_t,  y_j = c_j * (Q_g / s_j)^-1 mod s_j
//          = REDC( sum_j y_j * W[j, t] + cnt * negc[t] )       (cnt = #{j : y_j > s_j / 2})
// since centered(y_j) * (Q_g / s_j) = y_j * (Q_g / s_j) - Q_g for the negative terms; and
//   out[t] = c[self[t]] for a target that is itself a source of the group (exact), read from
//   c_self instead when given: a ModUp whose input exists in the NTT domain writes each digit's
//   own rows already transformed, and the forward NTT skips them (ntt.cu, row-skip table).
// The sum is accumulated exactly in 128 bits (every product < 2^122, at most 16 terms between
// reductions of the high word mod m_t, which subtract multiples of 2^64 m_t), then one REDC
// (x < m_t 2^64) gives the canonical residue: bit-identical to any exact reduction.
// ModUp: groups = the active digits, sources = the digit's Q rows, targets = rows + p_rows
// (digits of 6 to 9 primes below 2^48: keyswitch_base_convert_bytes_mma, the same sum on tensor
// cores, at the end of this file, and its _columns form, which also runs the forward NTT's column
// stages on what it converts; digits of one prime: ntt.cu's ntt_forward_column_stages_modup_spread,
// where the sum is centered(c_d, q_d) mod q_t, computed as the NTT loads it).
// ModDown: one group = the K P rows, targets = the L Q rows (then the combine: in the same
// kernel for coefficient output, keyswitch_moddown_convert_combine_s*; after the forward NTT of
// the targets for NTT output, whose column kernel computes the conversion itself when K = 1:
// ntt.cu's ntt_forward_column_stages_rescale_spread).
//
// Table (u64, host: _cupy_tables.base_conversion_table), G group blocks of
// bc_group_words(S, T) words (S = largest group), then the targets' constants:
//   [0, S*T)   W[j * T + t] = (Q_g / s_j mod m_t) * 2^64 mod m_t      (Montgomery form, 0 if j >= S_g)
//   [+T)       negc[t] = (-Q_g) * 2^64 mod m_t                         (Montgomery form)
//   [+T)       self[t] = input row of target t if it is a source of g, else ~0
//   [+S) w_j = (Q_g / s_j)^-1 mod s_j; [+S) Shoup(w_j); [+S) s_j; [+S) input row of source j
//   [+1)       S_g, plus 2^32 when the W of this block are in weight pieces (below)
//   after the G blocks: q[T], qinv[T], barrett[T] of the targets.
// Weight pieces: a group with a source of 54 bits or more (ModDown's 60-bit P primes) whose
// targets are all below 2^54 (the 40-bit Q primes) may hold each W as its two 27-bit pieces,
// W mod 2^27 | (W >> 27) << 32, so the sum takes PieceSum with the roles swapped (W in pieces,
// the source in 32-bit halves: 4 32-bit multiply-adds a term, against mad_wide's ~15); the host
// chooses (_cupy_tables.base_conversion_table, FHE_BC_WEIGHT_PIECES) and the flag says so.
// Each thread converts one coefficient into `tile` consecutive targets (grid y = target tiles):
// it loads and scales its S_g sources once (registers) and loops over its targets with the
// block's constants in shared memory (broadcast reads).
__host__ __device__ __forceinline__ int bc_group_words(int S, int T) { return S * T + 2 * T + 4 * S + 1; }

// Base-conversion sums of sources below 2^54 (the 40-bit Q primes of ModUp): 1 = in two 27-bit
// pieces (PieceSum: 4 32-bit multiply-adds a term; s9 target loop 187 -> 146 SASS instructions),
// 0 = one 64 x 64-bit multiply-add into a 128-bit accumulator a term (mad_wide, ~15 instructions),
// the form wider sources (ModDown's 60-bit P primes) always take: three pieces (6 multiply-adds)
// measured slower than it. Same exact sum either way, so the outputs are bit-identical.
// Measured on the H200 (2026-11-29 s5, graph replay, N=2^16 dnum 4): ModUp 291.5 -> 273.5 us,
// with the NTT hint 262.5 -> 244.0 us; rotation 558.1 -> 544.9 us (the ModDown then ran three
// pieces, +4 us: now mad_wide).
#ifndef FHE_BC_PIECES
#define FHE_BC_PIECES 1
#endif

// The targets t0 .. t1-1 of one coefficient from its scaled sources y (SMAX values, zero past
// the group's size) and negative count cnt. NP > 0: sums in NP pieces per source value
// (PieceSum, y < 2^(27 NP)); NP = 0: one 64 x 64-bit multiply-add a term (mad_wide, any y);
// NP < 0: the W words hold -NP pieces of W (weight pieces, W < 2^(27 (-NP))), any y < 2^64.
// All SMAX terms, no per-term guard: y[j] = 0 for j >= count, so those terms add 0 whatever they
// read (zero W rows of a short group, or, when SMAX > S (at most 3 more; the host picks the
// smallest SMAX >= S), the next words of the same shared table).
template <int SMAX, int NP, class Store>
__device__ __forceinline__ void convert_targets(const u64 (&y)[SMAX], u64 cnt, const u64* W, const u64* negc,
                                                const u64* self, const u64* tq, const u64* sin, const Store& o,
                                                int T, int t0, int t1, int n) {
  static_assert(SMAX + 1 <= 32, "PieceSum holds at most 32 terms");
  unsigned p[SMAX][NP > 0 ? NP : 1];
  if constexpr (NP > 0) {
#pragma unroll
    for (int j = 0; j < SMAX; ++j) split_pieces<NP>(p[j], y[j]);
  }
  for (int t = t0; t < t1; ++t) {
    u64 v;
    if (self[t] != ~0ULL) {
      v = sin[(i64)self[t] * n];
    } else {
      u64 lo = 0, hi = 0;
      if constexpr (NP > 0) {
        PieceSum<NP> sum;
#pragma unroll
        for (int j = 0; j < SMAX; ++j) sum.mad(p[j], W[j * T + t]);
        sum.mad_small((unsigned)cnt, negc[t]);
        sum.wide(lo, hi);
      } else if constexpr (NP < 0) {
        PieceSum<-NP> sum;
#pragma unroll
        for (int j = 0; j < SMAX; ++j) {
          const u64 wj = W[j * T + t];
          const unsigned wpc[2] = {(unsigned)wj, (unsigned)(wj >> 32)};
          sum.mad(wpc, y[j]);
        }
        sum.mad_small((unsigned)cnt, negc[t]);
        sum.wide(lo, hi);
      } else {
#pragma unroll
        for (int j = 0; j < SMAX; ++j) mad_wide(lo, hi, y[j], W[j * T + t]);
        mad_wide(lo, hi, cnt, negc[t]);
      }
      v = redc_wide(lo, reduce_u64(hi, tq[t], tq[2 * T + t]), tq[t], tq[T + t]);
    }
    o(t, v);
  }
}

// Where a conversion's target values go. RowsOut: target t of entry z into out[z, t] (out_bs per
// entry). CombineOut: the coefficient-domain ModDown's last step on them, out[z, t] = (x[z, t] -
// v) * D^-1 mod q_t (keyswitch_moddown_combine without c0; pinv as there, T kept rows; entry z =
// (ent * 2 + comp) * batch + b at ent * out_es + comp * out_cs + b * T * n). at(z, k, tq) gives
// the store of coefficient k (tq: the targets' q, qinv, barrett in shared memory).
struct RowsOut {
  u64* out;
  i64 out_bs;
  int n;
  struct At {
    u64* o;
    int n;
    __device__ __forceinline__ void operator()(int t, u64 v) const { o[(i64)t * n] = v; }
  };
  __device__ __forceinline__ At at(i64 z, int k, const u64*) const { return {out + z * out_bs + k, n}; }
};
struct CombineOut {
  const u64* x;
  u64* out;
  const u64* pinv;
  i64 x_bs, out_es, out_cs;
  int batch, T, n;
  struct At {
    const u64* x;
    u64* o;
    const u64* pinv;
    const u64* tq;
    int T, n;
    __device__ __forceinline__ void operator()(int t, u64 v) const {
      const u64 q = tq[t];
      o[(i64)t * n] = shoup_mul(sub_mod(x[(i64)t * n], v, q), pinv[T + t], pinv[2 * T + t], q);
    }
  };
  __device__ __forceinline__ At at(i64 z, int k, const u64* tq) const {
    const i64 ent = z / (2 * batch), comp = (z / batch) % 2, b = z % batch;
    return {x + z * x_bs + k, out + ent * out_es + comp * out_cs + b * T * n + k, pinv, tq, T, n};
  }
};

template <int SMAX, class Out>
__device__ __forceinline__ void base_convert_centered(const u64* c, const u64* c_self, const Out& dst,
                                                      const u64* table, int S, int T, int tile, int n, int batch,
                                                      i64 in_bs) {
  extern __shared__ u64 sm[];
  const int gw = bc_group_words(S, T);
  const int groups = gridDim.z / batch;
  const int g = blockIdx.z / batch;
  const int b = blockIdx.z % batch;
  for (int i = threadIdx.x; i < gw; i += blockDim.x) sm[i] = table[(i64)g * gw + i];
  for (int i = threadIdx.x; i < 3 * T; i += blockDim.x) sm[gw + i] = table[(i64)groups * gw + i];
  __syncthreads();
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const u64* W = sm;
  const u64* negc = W + S * T;
  const u64* self = negc + T;
  const u64* w = self + T;
  const u64* wp = w + S;
  const u64* sq = wp + S;
  const u64* srow = sq + S;
  const int count = (int)(unsigned)srow[S];
  const bool weight_pieces = (srow[S] >> 32) != 0;
  const u64* tq = sm + gw;
  const u64* cin = c + b * in_bs + k;
  const u64* sin = (c_self ? c_self : c) + b * in_bs + k;
  const auto o = dst.at((i64)blockIdx.z, k, tq);
  const int t0 = blockIdx.y * tile;
  const int t1 = min(T, t0 + tile);
  if constexpr (SMAX > 0) {
    u64 y[SMAX];
    u64 cnt = 0;
    bool wide = false;  // a source of 54 bits or more: mad_wide sums
#pragma unroll
    for (int j = 0; j < SMAX; ++j) {
      y[j] = 0;
      if (j < count) {
        y[j] = shoup_mul(cin[(i64)srow[j] * n], w[j], wp[j], sq[j]);
        cnt += is_negative_centered(y[j], sq[j]) ? 1 : 0;
        wide |= (sq[j] >> (2 * FHE_PIECE_BITS)) != 0;
      }
    }
    if (weight_pieces) {  // the host sets it only for groups with a wide source
      convert_targets<SMAX, -2>(y, cnt, W, negc, self, tq, sin, o, T, t0, t1, n);
      return;
    }
#if FHE_BC_PIECES
    if (!wide) {
      convert_targets<SMAX, 2>(y, cnt, W, negc, self, tq, sin, o, T, t0, t1, n);
      return;
    }
#endif
    convert_targets<SMAX, 0>(y, cnt, W, negc, self, tq, sin, o, T, t0, t1, n);
  } else {  // any group size: sources reloaded per target, high word reduced every 16 terms
    for (int t = t0; t < t1; ++t) {
      u64 v;
      if (self[t] != ~0ULL) {
        v = sin[(i64)self[t] * n];
      } else {
        u64 lo = 0, hi = 0, cnt = 0;
        for (int j = 0; j < count; ++j) {
          const u64 yj = shoup_mul(cin[(i64)srow[j] * n], w[j], wp[j], sq[j]);
          cnt += is_negative_centered(yj, sq[j]) ? 1 : 0;
          const u64 wj = W[j * T + t];
          mad_wide(lo, hi, yj, weight_pieces ? (wj & 0xffffffffULL) | ((wj >> 32) << FHE_PIECE_BITS) : wj);
          if ((j & 15) == 15) hi = reduce_u64(hi, tq[t], tq[2 * T + t]);
        }
        mad_wide(lo, hi, cnt, negc[t]);
        v = redc_wide(lo, reduce_u64(hi, tq[t], tq[2 * T + t]), tq[t], tq[T + t]);
      }
      o(t, v);
    }
  }
}

// keyswitch_base_convert_s{SMAX}: the conversion above for groups of at most SMAX sources
// (s0: any size; the host picks the smallest SMAX >= S; spelled out so that the loader sees
// every name). Axis order: c and c_self (null: c) [batch, rows_in, coeff] (in_bs per entry); out
// [G * batch, T, coeff] (out_bs per entry, z = g * batch + b). In canonical, out canonical.
// Launch: grid (ceil(N / 256), ceil(T / tile), G * batch), block 256, dynamic shared memory
// (bc_group_words(S, T) + 3 T) * 8 bytes.
extern "C" __global__ void keyswitch_base_convert_s0(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<0>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s1(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<1>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s2(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<2>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s3(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<3>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s4(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<4>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s5(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<5>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s6(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<6>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s7(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<7>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s8(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<8>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s9(const u64* c, const u64* c_self, u64* out,
                                                     const u64* table, int S, int T, int tile, int n, int batch,
                                                     i64 in_bs, i64 out_bs) {
  base_convert_centered<9>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s10(const u64* c, const u64* c_self, u64* out,
                                                      const u64* table, int S, int T, int tile, int n, int batch,
                                                      i64 in_bs, i64 out_bs) {
  base_convert_centered<10>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s12(const u64* c, const u64* c_self, u64* out,
                                                      const u64* table, int S, int T, int tile, int n, int batch,
                                                      i64 in_bs, i64 out_bs) {
  base_convert_centered<12>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}
extern "C" __global__ void keyswitch_base_convert_s16(const u64* c, const u64* c_self, u64* out,
                                                      const u64* table, int S, int T, int tile, int n, int batch,
                                                      i64 in_bs, i64 out_bs) {
  base_convert_centered<16>(c, c_self, RowsOut{out, out_bs, n}, table, S, T, tile, n, batch, in_bs);
}

// keyswitch_moddown_convert_combine_s{SMAX}: a coefficient-domain ModDown's base conversion and
// combine in one launch (CombineOut): the conversion of each entry's K divided-out rows (the
// table's sources: the P rows, and q_0 for a division by P q_0) into the T kept rows, and
// out = (x - conversion) * D^-1 with x the entry's kept rows; the conversion is never stored.
// Axis order: c [entries, R, coeff] (in_bs per entry), x the kept rows [entries, T, coeff]
// (x_bs per entry, the kept rows of c itself), out as keyswitch_moddown_combine's (entry z =
// (ent * 2 + comp) * batch + b at ent * out_es + comp * out_cs, then [batch, T, coeff]
// contiguous); pinv [T] x 3 as there. One group. In canonical, out canonical. Launch: grid
// (ceil(N / 256), ceil(T / tile), entries), block 256, dynamic shared memory as keyswitch_base_convert
// (spelled out so that the loader sees every name).
extern "C" __global__ void keyswitch_moddown_convert_combine_s0(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<0>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s1(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<1>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s2(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<2>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s3(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<3>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s4(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<4>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s5(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<5>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s6(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<6>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s7(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<7>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}
extern "C" __global__ void keyswitch_moddown_convert_combine_s8(const u64* c, const u64* x, u64* out, const u64* table,
    const u64* pinv, int S, int T, int tile, int n, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  base_convert_centered<8>(c, nullptr, CombineOut{x, out, pinv, x_bs, out_es, out_cs, batch, T, n}, table, S, T,
                            tile, n, gridDim.z, in_bs);
}

// Read-only global load of a key word: the key tables arrive as addresses (key_ptrs), which
// the compiler can only treat as generic pointers (LD); the keys live in global memory, so the
// non-coherent global path is valid and lets the loads be batched like the digit loads.
// FHE_KEY_LOAD_CS=1 (default): streaming loads (ld.global.cs, evict-first in L1 and L2). Every
// key word is read once per key switch, so it should not push out of L2 what is read again: the
// digits, which the hoisted kernels gather once per rotation. Measured on the H200 (2026-11-29
// s7, two pairs side by side, bench/kernels_gpu.py): N=2^14 7-rotation linear transform
// 84.5 / 85.4 -> 72.6 / 73.7 us, 7 hoisted key switches 116.9 / 117.5 -> 110.6 / 111.2 us,
// rotation 73.5 / 75.2 -> 67.2 / 67.7 us; N=2^16 linear transform 661 -> 637 us, the rest
// unchanged (its digits do not fit in L2). 0: the read-only path (__ldg).
#ifndef FHE_KEY_LOAD_CS
#define FHE_KEY_LOAD_CS 1
#endif
__device__ __forceinline__ u64 load_key_word(const u64* p) {
#if FHE_KEY_LOAD_CS
  return __ldcs(p);
#else
  return __ldg(p);
#endif
}

// Digits of key_inner_product whose loads are issued together before their products.
#ifndef FHE_KIP_GROUP
#define FHE_KIP_GROUP 4
#endif

// One coefficient of the key inner product in the NTT domain: (acc0, acc1) = sum_d
// dig[d * digit_stride] * key[keydig[d], k, id, i] * 2^-64 mod q (k = 0, 1: Montgomery products,
// the key is in Montgomery form; canonical results). dig points at the (already permuted) digit 0
// value; key is [dnum, 2, key_rows, coeff] with key_rows prime rows.
// The loads of FHE_KIP_GROUP digits (digit value and both key words) are issued before any of
// their products, so a lane waits for one memory round trip per group, not one per digit. The
// products are summed exactly in 128 bits (each < q^2 < 2^122; the high word is folded mod q
// after every 32 digits, which subtracts multiples of q 2^64) and reduced once (one REDC per
// component instead of one per digit): the same canonical residue as a sum of mont_mul.
__device__ __forceinline__ void key_inner_product(const u64* dig, i64 digit_stride, const u64* key,
                                                  const int* keydig, int num_digits, int key_rows, int id, int n,
                                                  int i, const Modulus& m, u64& acc0, u64& acc1) {
  u64 lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0;
  const i64 comp = (i64)key_rows * n;
  for (int d0 = 0; d0 < num_digits; d0 += 32) {
    const int d1 = min(num_digits, d0 + 32);
    for (int g = d0; g < d1; g += FHE_KIP_GROUP) {
      u64 x[FHE_KIP_GROUP], k0[FHE_KIP_GROUP], k1[FHE_KIP_GROUP];
#pragma unroll
      for (int j = 0; j < FHE_KIP_GROUP; ++j) {  // past d1: digit d1 - 1 again, its product zeroed
        const int d = min(g + j, d1 - 1);
        const i64 kbase = ((i64)keydig[d] * 2 * key_rows + id) * n + i;
        const u64 xd = dig[d * digit_stride];
        k0[j] = load_key_word(key + kbase);
        k1[j] = load_key_word(key + kbase + comp);
        x[j] = g + j < d1 ? xd : 0;
      }
#pragma unroll
      for (int j = 0; j < FHE_KIP_GROUP; ++j) {
        mad_wide(lo0, hi0, x[j], k0[j]);
        mad_wide(lo1, hi1, x[j], k1[j]);
      }
    }
    hi0 = reduce_u64(hi0, m.q, m.barrett);
    hi1 = reduce_u64(hi1, m.q, m.barrett);
  }
  acc0 = redc_wide(lo0, hi0, m.q, m.qinv);
  acc1 = redc_wide(lo1, hi1, m.q, m.qinv);
}

// keyswitch_moddown_combine: the last step of the rounding ModDown, for E entries of (y0, y1)
// (the backend's coefficient-output divisions run keyswitch_moddown_convert_combine_s* instead;
// this kernel serves the NTT-output ones whose transform is split into launch groups, or built
// with FHE_MODDOWN_FUSED_COMBINE=0):
// out[ent, comp, b, i] = (x[z, i] - e[z, i]) * P^-1 mod q_i (z = (ent * 2 + comp) * batch + b),
// with x the Q rows of the inner product and e the base conversion of its P rows
// (keyswitch_base_convert_s*), both in the same domain (coefficient, or NTT: x never left the
// NTT domain and e was forward-transformed; every step is linear mod q_i, so the NTT-domain
// result is exactly the NTT of the coefficient-domain one; the backend runs it on NTT values). With c0 (not null; NTT domain only)
// component 0 of entry ent also gets c0[b, i, perms[ent, k]] (the NTT-domain automorphism of c0:
// the c0 half of a hoisted rotation).
// Axis order: x [E, 2, batch, L + K, coeff]; e [E, 2, batch, L, coeff]; out entry (ent, comp) at
// ent * out_es + comp * out_cs, then [batch, L, coeff] contiguous (so out can be the
// [2, E, ...] component-major layout of a batched ciphertext, or a slice of a larger batch);
// c0 [batch, L, coeff]; perms [E, coeff]. Table pinv: P mod q_i [L], P^-1 mod q_i [L], Shoup [L].
// In canonical, out canonical; out may alias e when it has e's layout.
// Launch: grid (ceil(N / 256), L, E * 2 * batch), block 256.
extern "C" __global__ void keyswitch_moddown_combine(const u64* x, const u64* e, u64* out, const int* rowmap,
                                                     const u64* consts, const u64* pinv, const u64* c0,
                                                     const int* perms, int num_moduli, int n, int L, int K,
                                                     int batch, i64 out_es, i64 out_cs) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int i = blockIdx.y;
  const i64 z = blockIdx.z;
  const u64 q = consts[FHE_C_Q * num_moduli + rowmap[i]];
  const i64 row = (i64)i * n + k;
  const u64 d = sub_mod(x[z * (L + K) * n + row], e[z * L * n + row], q);
  u64 y = shoup_mul(d, pinv[L + i], pinv[2 * L + i], q);
  const int ent = (int)(z / (2 * batch));
  const int comp = (int)((z / batch) % 2);
  const i64 b = z % batch;
  if (c0 != nullptr && comp == 0) y = add_mod(y, c0[b * L * n + (i64)i * n + perms[(i64)ent * n + k]], q);
  out[ent * out_es + comp * out_cs + b * L * n + row] = y;
}

// The key inner product of one set of digits with E (key, Galois permutation) pairs, NTT domain,
// Montgomery products (the keys are in Montgomery form), canonical sums:
// acc[e, k, b, r] = sum_d digit_d[b, r, perms[e, i]] * key_e[keydig[d], k, rowmap[r]]
// (+ c[k, b, r] * w_r mod q on the rows r < c_rows with WithC: keyswitch_inner_product_add_scaled).
// key_ptrs[e] = device address of key e ([dnum, 2, key_rows, coeff], contiguous); perms [E, coeff]
// (identity rows for no permutation). Axis order: digits [D, batch, R, coeff]; out [E, 2, batch,
// R, coeff]; c [2, batch, c_rows, coeff]. Grid (ceil(N / 256), R, E * batch), block 256: coefficient
// k of row blockIdx.y (inner_product_at).
template <bool WithC>
__device__ __forceinline__ void inner_product_at(int k, const u64* digits, const u64* key_ptrs, u64* out,
                                                 const int* rowmap, const u64* consts, const int* keydig,
                                                 const int* perms, const u64* c, const u64* c_scal, int num_moduli,
                                                 int n, int R, int batch, int num_digits, int key_rows, int c_rows) {
  const int r = blockIdx.y;
  const int e = blockIdx.z / batch;
  const int b = blockIdx.z % batch;
  const int id = rowmap[r];
  const Modulus mr = load_modulus(consts, num_moduli, id);
  const u64* key = reinterpret_cast<const u64*>(key_ptrs[e]);
  const int src = perms[(i64)e * n + k];
  const i64 digit_stride = (i64)batch * R * n;
  const bool with_c = WithC && r < c_rows;
  u64 cv0 = 0, cv1 = 0;
  if (with_c) {  // loaded before the inner product, which hides their latency
    const i64 ci = ((i64)b * c_rows + r) * n + k;
    cv0 = c[ci];
    cv1 = c[(i64)batch * c_rows * n + ci];
  }
  u64 acc0, acc1;
  key_inner_product(digits + ((i64)b * R + r) * n + src, digit_stride, key, keydig, num_digits, key_rows, id, n, k,
                    mr, acc0, acc1);
  if (with_c) {
    const u64 w = c_scal[r];
    const u64 wp = c_scal[c_rows + r];
    acc0 = add_mod(acc0, shoup_mul(cv0, w, wp, mr.q), mr.q);
    acc1 = add_mod(acc1, shoup_mul(cv1, w, wp, mr.q), mr.q);
  }
  u64* o = out + (i64)e * 2 * digit_stride + ((i64)b * R + r) * n + k;
  o[0] = acc0;
  o[digit_stride] = acc1;
}

// keyswitch_inner_product_many: the key inner products of one set of digits with E (key, Galois
// permutation) pairs in one launch (one key switch is E = 1; inner_product_at). In canonical,
// out canonical. Launch: grid (ceil(N / 256), R, E * batch), block 256.
extern "C" __global__ void keyswitch_inner_product_many(const u64* digits, const u64* key_ptrs, u64* out,
                                                        const int* rowmap, const u64* consts, const int* keydig,
                                                        const int* perms, int num_moduli, int n, int R, int batch,
                                                        int num_digits, int key_rows) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  inner_product_at<false>(k, digits, key_ptrs, out, rowmap, consts, keydig, perms, nullptr, nullptr, num_moduli, n, R,
                          batch, num_digits, key_rows, 0);
}

// keyswitch_inner_product_many_strided: keyswitch_inner_product_many in a grid (X, R, E * batch) of
// any X >= 1, each thread taking the coefficients k, k + 256 X, .. of its row: a small X leaves
// SMs to another stream (CupyBackend._q_rows_kip_blocks, FHE_MODDOWN_KIP_BLOCKS). Its own entry
// point: with the loop in the kernel above, its full-grid launches ran slower (H200, 2026-11-30
// s23, across runs: the N=2^16 dnum-4 rotation 516-520 us against 504-507 without it).
extern "C" __global__ void keyswitch_inner_product_many_strided(const u64* digits, const u64* key_ptrs, u64* out,
                                                                const int* rowmap, const u64* consts,
                                                                const int* keydig, const int* perms, int num_moduli,
                                                                int n, int R, int batch, int num_digits,
                                                                int key_rows) {
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
    inner_product_at<false>(k, digits, key_ptrs, out, rowmap, consts, keydig, perms, nullptr, nullptr, num_moduli, n,
                            R, batch, num_digits, key_rows, 0);
  }
}

// Occupancy floor of keyswitch_inner_product_add_scaled: blocks of 256 per SM handed to ptxas
// (0 = its own choice). Its epilogue takes the inner product from 46 to 52 registers (4 blocks
// of 256 instead of 5); 5 caps it at 48 (a few spilled words). Measured on the H200 (2026-11-30
// s12, kip_variants/): relinearize-and-rescale against the inner product with no epilogue and
// its own scaled-add pass, N=2^16 560 -> 545 us (NTT output), 584 -> 568 us (coefficient output);
// N=2^14 67.7 -> 64.6 us (coefficient output), NTT output unchanged (70.5 us). The same bound on
// keyswitch_inner_product_many made the other key switches 1-3% slower at N=2^16 (kip_vs_old/).
#ifndef FHE_KIP_ADD_MIN_BLOCKS
#define FHE_KIP_ADD_MIN_BLOCKS 5
#endif
#if FHE_KIP_ADD_MIN_BLOCKS > 0
#define FHE_KIP_ADD_BOUNDS __launch_bounds__(256, FHE_KIP_ADD_MIN_BLOCKS)
#else
#define FHE_KIP_ADD_BOUNDS
#endif

// keyswitch_inner_product_add_scaled: one key inner product (E = 1) plus c * w_r on the Q rows
// r < c_rows, one Shoup constant per row (c_scal[r] = w_r, c_scal[c_rows + r] = floor(w_r * 2^64 /
// q)): the key switch with a rescale folds its ciphertext in as acc_Q += P c
// (keyswitch_add_rescale) here instead of in a pass over acc of its own. c [2, batch, c_rows,
// coeff] canonical; in canonical, out canonical. Launch: grid (ceil(N / 256), R, batch), block 256.
extern "C" __global__ void FHE_KIP_ADD_BOUNDS keyswitch_inner_product_add_scaled(const u64* digits,
    const u64* key_ptrs, u64* out, const int* rowmap, const u64* consts, const int* keydig, const int* perms,
    const u64* c, const u64* c_scal, int num_moduli, int n, int R, int batch, int num_digits, int key_rows,
    int c_rows) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  inner_product_at<true>(k, digits, key_ptrs, out, rowmap, consts, keydig, perms, c, c_scal, num_moduli, n, R, batch,
                         num_digits, key_rows, c_rows);
}

// keyswitch_linear_transform_accumulate: the QP-basis accumulator of a double-hoisted linear
// transform sum_i w_i * rot_i(c) of one NTT-domain ciphertext c = (c0, c1) (rot_0 = identity,
// rot_{1+e} = the rotation whose key_ptrs[e] and perms[e] are given; c1's ModUp is `digits`):
//   acc[k, r] = sum_e w[1+e, r] * IP_e[k, r]                                   (every row r)
//             + P * (w[0, r] * c[k, r] + [k == 0] sum_e w[1+e, r] * c0[r, perms[e, i]])   (Q rows r < L)
// with IP_e[k, r, i] = sum_d digits[d, r, perms[e, i]] * key_e[keydig[d], k, rowmap[r], i] (the
// inner product of keyswitch_inner_product_many). w is in Montgomery form (mont_mul gives the
// plain products), the inner sums are canonical as in keyswitch_inner_product_many, and
// P * v = mul_mod(v, P mod q_r) (pinv[r]). Adding a multiple of P to the Q rows before the
// rounding ModDown adds exactly v to its result, so the rotated c0 and the unrotated entry pass
// through the single ModDown unchanged.
// One lane per coefficient handles every rotation and both components (each gathered digit
// is read once). Measured on the H200 (2026-11-29 s3): splitting the rotations over 2 / 4 / 8
// lanes with shuffle sums was slower (7 keys, N=2^14: 113 / 116 / 131 us against 109; N=2^16:
// 875 / 983 / 1204 us against 728), one lane per component slower still (the digit gathers
// doubled). s4 (7 distinct keys, bench/kernels_gpu.py): the grouped loads of key_inner_product
// and the 128-bit sums took N=2^16 dnum 4 from 754 to 706 us and 4 blocks per SM (64
// registers, FHE_LT_MIN_BLOCKS) to 683 us; N=2^14 stayed at 111-118 us (groups of 1/2/8
// digits and 3 blocks per SM: no better).
// Grid z = parts (a power of two): part z sums the rotations e = z, z + parts, ... (and part 0
// the unrotated entry) into out[z]; the parts' canonical sums add up mod q to the whole (the
// host sums them: CupyBackend._linear_transform_parts). More, shorter blocks where one part
// would leave a nearly empty last wave (s4, blocks of 256: N=2^14 had 576 blocks for 528
// slots, 110.9 us in one part, 106.3-106.6 in two).
// Blocks of 128 with 9 per SM (56 registers, a few spilled words) give 1188 slots, so the
// N=2^14 grid (1152 blocks) runs in one part and one wave: 7-key linear transform 103.9 / 105.6
// -> 97.6 / 99.2 us, two pairs side by side (H200, 2026-11-29 s6 call2); N=2^16 unchanged
// (661.4 -> 658.7 us). 8 per SM (64 registers, 1056 slots, two parts): 102.8 us.
// Axis order: digits [D, R, coeff]; w [1 + E, R, coeff]; c [2, L, coeff] (c_cs per component:
// L * n, or R * n for the components ntt_forward_and_modup transforms beside the digits); perms
// [E, coeff]; out [parts, 2, R, coeff]. In canonical, out canonical. Launch: grid (ceil(N / FHE_LT_BLOCK),
// R, parts), block FHE_LT_BLOCK.
// Block size and occupancy floor of keyswitch_linear_transform_accumulate (blocks per SM handed
// to ptxas; 0 = ptxas's choice). The host reads both defines (CupyBackend._lt_block,
// _lt_min_blocks); the s4 default was 256 and 4 (64 registers).
#ifndef FHE_LT_MIN_BLOCKS
#define FHE_LT_MIN_BLOCKS 9
#endif
#ifndef FHE_LT_BLOCK
#define FHE_LT_BLOCK 128
#endif
#if FHE_LT_MIN_BLOCKS > 0
#define FHE_LT_BOUNDS __launch_bounds__(FHE_LT_BLOCK, FHE_LT_MIN_BLOCKS)
#else
#define FHE_LT_BOUNDS
#endif
extern "C" __global__ void FHE_LT_BOUNDS keyswitch_linear_transform_accumulate(
    const u64* digits, const u64* key_ptrs, const u64* w, const u64* c, u64* out, const int* rowmap,
    const u64* consts, const int* keydig, const int* perms, const u64* pinv, int num_moduli, int n, int R, int L,
    int E, int num_digits, int key_rows, i64 c_cs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int r = blockIdx.y;
  const int part = blockIdx.z;  // rotations e = part, part + parts, ...; the unrotated entry in part 0
  const int parts = gridDim.z;
  const int id = rowmap[r];
  const Modulus m = load_modulus(consts, num_moduli, id);
  const i64 plane = (i64)R * n;
  const i64 row = (i64)r * n;
  const bool q_row = r < L;
  // sum_e w_e * IP_e and sum_e w_e * c0[perm_e] (+ w_0 * c0) summed exactly in 128 bits (as in
  // key_inner_product: high words folded mod q after every 32 of this part's rotations), one
  // REDC each at the end.
  u64 lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0, loc = 0, hic = 0;
  for (int e = part; e < E; e += parts) {
    const u64* key = reinterpret_cast<const u64*>(key_ptrs[e]);
    const int src = perms[(i64)e * n + i];
    u64 a0, a1;
    key_inner_product(digits + row + src, plane, key, keydig, num_digits, key_rows, id, n, i, m, a0, a1);
    const u64 we = w[(i64)(1 + e) * plane + row + i];
    mad_wide(lo0, hi0, a0, we);
    mad_wide(lo1, hi1, a1, we);
    if (q_row) mad_wide(loc, hic, c[row + src], we);
    if ((e & (32 * parts - 1)) >= 31 * parts) {  // parts is a power of two
      hi0 = reduce_u64(hi0, m.q, m.barrett);
      hi1 = reduce_u64(hi1, m.q, m.barrett);
      hic = reduce_u64(hic, m.q, m.barrett);
    }
  }
  u64 s0 = redc_wide(lo0, reduce_u64(hi0, m.q, m.barrett), m.q, m.qinv);
  u64 s1 = redc_wide(lo1, reduce_u64(hi1, m.q, m.barrett), m.q, m.qinv);
  if (q_row) {
    u64 t1 = 0;
    if (part == 0) {
      const u64 w0 = w[row + i];
      mad_wide(loc, hic, c[row + i], w0);
      t1 = mont_mul(c[c_cs + row + i], w0, m.q, m.qinv);
    }
    const u64 t0 = redc_wide(loc, reduce_u64(hic, m.q, m.barrett), m.q, m.qinv);
    s0 = add_mod(s0, mul_mod(t0, pinv[r], m.q, m.qinv, m.r2), m.q);
    s1 = add_mod(s1, mul_mod(t1, pinv[r], m.q, m.qinv, m.r2), m.q);
  }
  out += (i64)part * 2 * plane;
  out[row + i] = s0;
  out[plane + row + i] = s1;
}

// ---- ModUp's base conversion as byte-sliced integer matrix products (tensor cores) ----------
// The exact sum X_t = sum_j y_j W[j, t] + cnt negc[t] of keyswitch_base_convert_s* (same W, negc
// in Montgomery form, same REDC, so bit-identical) for groups of at most 9 sources below 2^48
// (ModUp's Q primes). Bytes: y_j = sum_a y_ja 256^a (a < 6), W = sum_b w_b 256^b (b < 8), so
//   X_t = sum_s 256^s C_s,  C_s = sum_(j, a) y_ja w_jt(s - a)   (s < 13; 0 <= s - a < 8),
// an int8 matrix product A [coefficients x 64 byte slots] x B [64 x (13 s x targets)] per target
// group of 8 (mma.sync m16n8k32 u8 x u8 -> s32, two k-steps of 32). Each C_s < 55 * 255^2 < 2^22
// is exact in the s32 accumulator; five consecutive ones make a u64 sum below 2^55, and three
// such sums at weights 2^0, 2^40, 2^80 the 128-bit X. X < 10 * 2^48 q_t < 2^64 q_t, so its high
// word is already below q_t: one REDC gives the canonical residue.
// Byte slots: lane l = 4 g + c of a warp (g = row group, c = thread in group) holds, for each of
// its two coefficients (m-tile rows g and g + 8), the 128-bit word y_c + y_(c+4) 2^48 + e_c 2^96
// with e_c = bytes 2c, 2c + 1 of y_8 for c < 3 and e_3 = cnt (y_j = 0 past the group's count):
// slot p (byte p of that word) is the A column k = 4c + (p & 3) + 16 ((p >> 2) & 1) of k-step
// p >> 3, which is where mma.m16n8k32 expects lane c's A bytes; the host lays out B the same
// way (_cupy_tables.modup_byte_table: per lane, for each target group, s and k-step, the u32
// pair (b0, b1) of the B fragment as one u64, B[k, n] = byte s - a(slot) of W[j(slot), target n]).
// Output fragment: lane (g, c) gets rows g, g + 8 x target columns 2c, 2c + 1 of its group.
//
// Table (u64, per group, byte_group_words(TG) words; TG = target groups of 8, the same for
// every group): [TG * 13 * 2 * 32) B fragments at ((tg * 13 + s) * 2 + ks) * 32 + lane;
// [+8 TG) output row of each target column (~0: padding); [+8 TG) x 2 q, qinv of the target
// column; [+9) w_j = (Q_g / s_j)^-1 mod s_j, [+9) Shoup(w_j), [+9) s_j, [+9) input row
// of source j, [+9) output row of source j (a source is a target: copied, c_self when given);
// [+3) the group's source count, its own target groups (<= TG: the others are all padding),
// and a zero word (keeps the block an even number of words, for 16-byte copies).
#define FHE_BYTE_S 13        // s = a + b < 6 + 8 - 1
#define FHE_BYTE_SOURCES 9   // at most 9 sources a group
__host__ __device__ __forceinline__ int byte_group_words(int tg) {
  return tg * (FHE_BYTE_S * 2 * 32 + 24) + 5 * FHE_BYTE_SOURCES + 3;
}

// d += A x B for one m16n8k32 tile: A's 4 u32 of this lane, B's 2.
__device__ __forceinline__ void mma_u8_m16n8k32(int (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // the host launches this kernel only on compute capability 8.0 or newer
#endif
}

// One s: d += A x B_s over both k-steps (a[h][w]: row half h, slot word w; bf: this lane's B words).
__device__ __forceinline__ void mma_byte_step(int (&d)[4], const unsigned (&a)[2][4], u64 b_lo, u64 b_hi) {
  mma_u8_m16n8k32(d, a[0][0], a[1][0], a[0][1], a[1][1], (unsigned)b_lo, (unsigned)(b_lo >> 32));
  mma_u8_m16n8k32(d, a[0][2], a[1][2], a[0][3], a[1][3], (unsigned)b_hi, (unsigned)(b_hi >> 32));
}

// Lane (g, c)'s A fragments of the m-tile of coefficients k0 .. k0 + 15 (rows g and g + 8:
// a[h], h = 0, 1; layout above) from the group's sources (src: the table's source words,
// count of them) in c (canonical).
__device__ __forceinline__ void byte_a_fragments(unsigned (&a)[2][4], const u64* cin, const u64* src, int count,
                                                 int n, int k0, int lane) {
  const int gr = lane >> 2;
  const int ci = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = k0 + gr + 8 * h;
    u64 y[3] = {0, 0, 0};  // y_c, y_(c+4), y_8
    unsigned neg = 0;
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const int j = i < 2 ? ci + 4 * i : 8;
      if (j < count) {
        y[i] = shoup_mul(cin[(i64)src[3 * FHE_BYTE_SOURCES + j] * n + k], src[j], src[FHE_BYTE_SOURCES + j],
                         src[2 * FHE_BYTE_SOURCES + j]);
        if (i < 2 || ci == 0) neg += is_negative_centered(y[i], src[2 * FHE_BYTE_SOURCES + j]) ? 1 : 0;
      }
    }
    neg += __shfl_xor_sync(0xffffffffu, neg, 1);
    neg += __shfl_xor_sync(0xffffffffu, neg, 2);
    const unsigned e = ci == 3 ? neg : (unsigned)(y[2] >> (16 * ci)) & 0xffffu;
    a[h][0] = (unsigned)y[0];
    a[h][1] = (unsigned)(y[0] >> 32) | ((unsigned)y[1] << 16);
    a[h][2] = (unsigned)(y[1] >> 16);
    a[h][3] = e;
  }
}

// One target group's sums of an m-tile: X = acc[0] + acc[1] 2^40 + acc[2] 2^80 for output i =
// 2 h + cc of this lane (row g + 8 h, target column 2 c + cc), acc[r] = sum over s = 5r .. 5r + 4
// of C_s 2^(8 (s - 5r)) (< 2^22 2^33 = 2^55: exact in a u64). bt: this lane's B words of the group.
__device__ __forceinline__ void byte_target_sums(u64 (&acc)[3][4], const unsigned (&a)[2][4], const u64* bt) {
#pragma unroll
  for (int s = 0; s < FHE_BYTE_S; ++s) {
    int d[4] = {0, 0, 0, 0};
    mma_byte_step(d, a, bt[(s * 2) * 32], bt[(s * 2 + 1) * 32]);
    const int r = s / 5, sh = 8 * (s % 5);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const u64 v = (u64)(unsigned)d[i] << sh;
      acc[r][i] = s % 5 == 0 ? v : acc[r][i] + v;
    }
  }
}

// The canonical residue of output i's X mod q (its target's modulus): xhi < q since X < 10 2^48 q
// < 2^64 q, so one REDC.
__device__ __forceinline__ u64 byte_target_value(const u64 (&acc)[3][4], int i, u64 q, u64 qinv) {
  u64 xlo = acc[0][i], xhi = 0;
  add_shifted<40>(xlo, xhi, acc[1][i]);
  add_shifted<80>(xlo, xhi, acc[2][i]);
  return redc_wide(xlo, xhi, q, qinv);
}

// dst[0 .. words) = src[0 .. words) by the whole block, words even and both addresses 16-byte
// aligned; the caller then synchronizes the block. On sm_80 and newer every 16-byte piece is one
// cp.async, all in flight at once (a plain copy loop waits on each load before its store: the
// bytes_mma table, ~3500 words a block, took thousands of cycles before the first m-tile).
__device__ __forceinline__ void copy_to_shared_async(u64* dst, const u64* src, int words) {
#if __CUDA_ARCH__ >= 800
  for (int i = 2 * threadIdx.x; i < words; i += 2 * blockDim.x) {
    u64 to;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(to) : "l"(dst + i));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)to), "l"(src + i) : "memory");
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
  for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
#endif
}

// The block's group (z = g * batch + b) of a bytes_mma launch: its block of the table copied
// into shared memory (tab, byte_group_words(tg_count) words; the block synchronized after) and
// the views of it the kernels read.
struct ByteGroup {
  const u64* trow;  // output row of each target column (~0: padding), 8 TG
  const u64* tq;    // q, qinv of each target column at +0, +8 TG
  const u64* src;   // w, Shoup(w), s, input row, output row of each source; count, own target groups
  int count, group_tgs, b;
};
__device__ __forceinline__ ByteGroup byte_group(u64* tab, const u64* __restrict__ table, int tg_count, int batch) {
  const int g = blockIdx.z / batch;
  const int gw = byte_group_words(tg_count);
  copy_to_shared_async(tab, table + (i64)g * gw, gw);
  __syncthreads();
  const u64* trow = tab + tg_count * (FHE_BYTE_S * 2 * 32);
  const u64* tq = trow + 8 * tg_count;
  const u64* src = tq + 16 * tg_count;
  return {trow, tq, src, (int)src[5 * FHE_BYTE_SOURCES], (int)src[5 * FHE_BYTE_SOURCES + 1], (int)(blockIdx.z % batch)};
}

// Stores one target group's outputs of an m-tile: lane (g, c) writes target columns 2c + cc of
// the group at rows g + 8 h (output i = 2 h + cc) to dst(cc, output row)[8 h], skipping padding.
template <class Dst>
__device__ __forceinline__ void byte_target_store(const u64 (&acc)[3][4], const ByteGroup& t, int tg, int tg_count,
                                                  int ci, const Dst& dst) {
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    const int col = tg * 8 + 2 * ci + cc;
    const u64 row = t.trow[col];
    if (row == ~0ULL) continue;  // padding
    const u64 q = t.tq[col], qinv = t.tq[8 * tg_count + col];
    u64* out = dst(cc, row);
#pragma unroll
    for (int h = 0; h < 2; ++h) out[8 * h] = byte_target_value(acc, 2 * h + cc, q, qinv);
  }
}

// keyswitch_base_convert_bytes_mma: the conversion of keyswitch_base_convert_s* (ModUp: targets
// = the R output rows, a group's own rows copied) on tensor cores. Axis order: c and c_self
// (null: c) [batch, rows_in, coeff] (in_bs per entry); out [G * batch, R, coeff] (out_bs per
// entry, z = g * batch + b). In canonical, out canonical. Needs n % 16 == 0 and compute
// capability 8.0. Launch: grid (ceil(n / FHE_BYTES_COEFFS), 1, G * batch), block 256, dynamic
// shared memory byte_group_words(tg_count) * 8 bytes (the group's block of the table, B fragments
// included: L1TEX waits on their global loads were 43% of the stalls, ncu 2026-11-30): warp w
// converts the m-tiles (16 coefficients) w, w + 8, .. of its block's FHE_BYTES_COEFFS.
// (512 and 256 measured alike on the H200, 1024 17% slower: N=2^16, 4 digits, 2026-11-30)
#ifndef FHE_BYTES_COEFFS
#define FHE_BYTES_COEFFS 512
#endif
// Blocks per SM ptxas must fit: 4 (at most 64 registers); 5 measured no faster (H200, 2026-11-30)
#ifndef FHE_BYTES_MIN_BLOCKS
#define FHE_BYTES_MIN_BLOCKS 4
#endif
#define FHE_BYTES_MMA_BOUNDS __launch_bounds__(256, FHE_BYTES_MIN_BLOCKS)
extern "C" __global__ void FHE_BYTES_MMA_BOUNDS keyswitch_base_convert_bytes_mma(
    const u64* c, const u64* c_self, u64* out, const u64* __restrict__ table, int tg_count, int n, int batch,
    i64 in_bs, i64 out_bs) {
  extern __shared__ u64 byte_table[];
  const ByteGroup t = byte_group(byte_table, table, tg_count, batch);
  const u64 *bf = byte_table, *src = t.src;
  const int count = t.count, group_tgs = t.group_tgs;
  const int lane = threadIdx.x & 31;
  const int gr = lane >> 2;
  const int ci = lane & 3;
  const u64* cin = c + t.b * in_bs;
  const u64* sin = (c_self ? c_self : c) + t.b * in_bs;
  u64* o = out + blockIdx.z * out_bs;
  for (int mt = threadIdx.x >> 5; mt < FHE_BYTES_COEFFS / 16; mt += 8) {
    const int k0 = blockIdx.x * FHE_BYTES_COEFFS + mt * 16;
    if (k0 >= n) break;  // n % 16 == 0: whole m-tiles
    unsigned a[2][4];
    byte_a_fragments(a, cin, src, count, n, k0, lane);
    for (int tg = 0; tg < group_tgs; ++tg) {
      u64 acc[3][4];
      byte_target_sums(acc, a, bf + tg * (FHE_BYTE_S * 2 * 32) + lane);
      byte_target_store(acc, t, tg, tg_count, ci, [&](int, u64 row) { return o + (i64)row * n + k0 + gr; });
    }
    // the group's own rows: copied (from c_self when given), lanes 0-15 and 16-31 two rows at a time
    for (int j = lane >> 4; j < count; j += 2)
      o[(i64)src[4 * FHE_BYTE_SOURCES + j] * n + k0 + (lane & 15)] =
          sin[(i64)src[3 * FHE_BYTE_SOURCES + j] * n + k0 + (lane & 15)];
  }
}

// keyswitch_base_convert_bytes_mma_columns: keyswitch_base_convert_bytes_mma followed by the
// first K = log_n - log_chunk forward NTT stages of every output row (1 <= K <= 4; the column
// stages of ntt_forward_column_stages(_x2), same arithmetic and output), so that the ModUp's
// forward NTT only runs its chunk stages after it: each converted value goes from the tensor
// cores through shared memory into the column stages instead of through a global row that the
// column kernel reads back. A block covers W = 256 >> K adjacent columns j from j0 =
// blockIdx.x W: 16 m-tiles (2^K column blocks c of W / 16 tiles; warp w converts tiles w and
// w + 8), converted one target group of 8 at a time into 8 shared slots of 2^K x W words, then
// column-transformed by lanes 2 j + h (K = 1: lane j; every lane of a warp on one slot: W >= 16).
// The group's own rows: copied from c_self when given (already transformed: the chunk kernel's
// row-skip table skips them), else column-transformed from c. rowmap: prime id of each output
// row (the ModUp's out_rows); consts, tw2 as ntt.cu's.
// In canonical; out: the column stages' words (canonical in float64 rows, [0, 4q) otherwise).
// Launch: grid (C / W, 1, G * batch), C = 2^log_chunk; block 256; dynamic shared memory
// (byte_group_words(tg_count) + 8 FHE_BYTES_COLUMN_SLOT) * 8 bytes.
// Measured on the H200 (N=2^16 dnum 4, 2026-11-30 s28, perf notes change 64) and not kept: two
// sets of W columns a block (each table copy serving twice the columns) 121 us against 108;
// two slot buffers, so that target groups alternate between them with one barrier a group,
// 110.0 against 107.7 us. Blocks an SM (FHE_BYTES_COLUMNS_MIN_BLOCKS, below): 4 (64 registers,
// 32 bytes spilled) against 3 (80 registers), 2026-12-01 s29, alternated twice: ModUp with the
// NTT hint 188.2-188.7 against 190.2-191.3 us, the engine's rotation 427.0-427.7 against
// 430.5-431.0 (perf notes change 65).
// Words a target slot: 2^K x W = 256, padded so that the four lane columns c of an mma output
// fragment (slots 2 c + cc) store into different banks (CupyBackend._BYTES_COLUMN_SLOT).
#define FHE_BYTES_COLUMN_SLOT 258
#ifndef FHE_BYTES_COLUMNS_MIN_BLOCKS
#define FHE_BYTES_COLUMNS_MIN_BLOCKS 4
#endif
#define FHE_BYTES_COLUMNS_BOUNDS __launch_bounds__(256, FHE_BYTES_COLUMNS_MIN_BLOCKS)
// What a target row holds at coefficient index x, read from its slot ([c][j - j0], row width W).
struct SlotLoad {
  const u64* slot;
  int log_chunk, j0, log_w;
  __device__ __forceinline__ u64 operator()(int x) const {
    return slot[((x >> log_chunk) << log_w) + (x & ((1 << log_chunk) - 1)) - j0];
  }
};
// Task `task` of a block's column pass over one row (prime id): lanes 2 j + h of column j0 + j for
// K >= 2 (forward_columns_body_x2), lane j for K = 1 (W = 128: one lane a column).
template <class Load>
__device__ __forceinline__ void bytes_column_task(const Load& in, u64* out, int id, const u64* __restrict__ consts,
                                                  const u64* __restrict__ tw2, int num_moduli, int log_n,
                                                  int log_chunk, int j0, int log_w, int task) {
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const TwiddleRow tw = twiddle_row(tw2, num_moduli, log_n, id);
  if (log_n - log_chunk >= 2)
    forward_columns<true>(in, out, q, tw, log_n, log_chunk, j0 + ((task >> 1) & ((1 << log_w) - 1)), task & 1);
  else
    forward_columns<false>(in, out, q, tw, log_n, log_chunk, j0 + (task & ((1 << log_w) - 1)), 0);
}
extern "C" __global__ void FHE_BYTES_COLUMNS_BOUNDS keyswitch_base_convert_bytes_mma_columns(
    const u64* c, const u64* c_self, u64* out, const u64* __restrict__ table, int tg_count, int n, int batch,
    i64 in_bs, i64 out_bs, const int* __restrict__ rowmap, const u64* __restrict__ consts,
    const u64* __restrict__ tw2, int num_moduli, int log_n, int log_chunk) {
  extern __shared__ u64 byte_table[];
  const ByteGroup t = byte_group(byte_table, table, tg_count, batch);
  u64* slots = byte_table + byte_group_words(tg_count);  // an even word count: 16-byte aligned
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gr = lane >> 2;
  const int ci = lane & 3;
  const int K = log_n - log_chunk;
  const int log_w = 8 - K;  // W = 256 >> K columns a block: 2^K column blocks of W / 16 m-tiles
  const int log_tasks = log_w + (K >= 2);  // log2 of a row's column tasks in a block (lanes 2 j + h, or j)
  const u64* cin = c + t.b * in_bs;
  u64* o = out + blockIdx.z * out_bs;
  const int j0 = blockIdx.x << log_w;
  unsigned a[2][2][4];  // the warp's m-tiles u = warp + 8 v: column block u >> (log_w - 4), tile u mod (W / 16)
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const int u = warp + 8 * v;
    const int k0 = ((u >> (log_w - 4)) << log_chunk) + j0 + 16 * (u & ((1 << (log_w - 4)) - 1));
    byte_a_fragments(a[v], cin, t.src, t.count, n, k0, lane);
  }
  for (int tg = 0; tg < t.group_tgs; ++tg) {
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      u64 acc[3][4];
      byte_target_sums(acc, a[v], byte_table + tg * (FHE_BYTE_S * 2 * 32) + lane);
      byte_target_store(acc, t, tg, tg_count, ci, [&](int cc, u64) {
        return slots + (2 * ci + cc) * FHE_BYTES_COLUMN_SLOT + 16 * (warp + 8 * v) + gr;
      });
    }
    __syncthreads();
    for (int task = threadIdx.x; task < (8 << log_tasks); task += blockDim.x) {
      const int s = task >> log_tasks;
      const u64 row = t.trow[tg * 8 + s];
      if (row == ~0ULL) continue;  // padding (a whole warp: a row has 32 tasks or more)
      bytes_column_task(SlotLoad{slots + s * FHE_BYTES_COLUMN_SLOT, log_chunk, j0, log_w}, o + (i64)row * n,
                        rowmap[row], consts, tw2, num_moduli, log_n, log_chunk, j0, log_w, task);
    }
    __syncthreads();  // the slots are free for the next target group
  }
  // the group's own rows
  if (c_self) {
    const u64* sin = c_self + t.b * in_bs;
    for (int task = threadIdx.x; task < (t.count << 8); task += blockDim.x) {  // 2^K x W = 256 words a row
      const int j = task >> 8, e = task & 255;
      const int x = ((e >> log_w) << log_chunk) + j0 + (e & ((1 << log_w) - 1));
      o[(i64)t.src[4 * FHE_BYTE_SOURCES + j] * n + x] = sin[(i64)t.src[3 * FHE_BYTE_SOURCES + j] * n + x];
    }
  } else {
    for (int task = threadIdx.x; task < (t.count << log_tasks); task += blockDim.x) {
      const int j = task >> log_tasks;
      const u64 row = t.src[4 * FHE_BYTE_SOURCES + j];
      bytes_column_task(RowLoad{cin + (i64)t.src[3 * FHE_BYTE_SOURCES + j] * n}, o + (i64)row * n, rowmap[row],
                        consts, tw2, num_moduli, log_n, log_chunk, j0, log_w, task);
    }
  }
}
