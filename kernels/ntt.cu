// Negacyclic forward / inverse NTT over batched RNS polynomials.
//
// Axis order: [batch, limb, coeff]; polynomial (z, y) starts at z * batch_stride + y * N
// (limbs contiguous inside one batch entry). Row y is prime id rowmap[y].
// Grid: x = coefficient block, y = limb, z = batch entry (z <= 65535).
// One transform = 1 launch for N <= chunk (4096), else 2 launches (column + chunk stages).
// Thread layouts: the chunk kernels hold 2^FHE_LV coefficients a thread, their _v4 forms 4;
// the column kernels run one thread a column, their _x2 forms two. The host picks the _v4 and
// _x2 forms for launches too small to fill the GPU (CupyBackend._use_v4, _use_column_x2).
#include "modarith.cuh"
#include "ntt_stages.cuh"
#include "ntt_columns.cuh"

using namespace fhe;

// log2 of the coefficients each thread of the main chunk kernels holds (block C >> FHE_LV; the
// backend never picks a chunk smaller than 2^FHE_LV). Their _v4 forms hold 4 (block C / 4).
#ifndef FHE_LV
#define FHE_LV 3
#endif

// Qualifier of the read-only table pointers (rowmap, consts, twiddles) of the NTT kernels:
// __restrict__ lets the twiddle loads take the read-only path (LDG.CONSTANT) and be scheduled
// freely; measured on the H200 (2026-11-29 s3): N=2^16 ciphertext NTT 95.8 -> 88.0 us.
#ifndef FHE_RO
#define FHE_RO __restrict__
#endif

// Chunk-kernel grid order: (chunk, limb, batch entry), or for log_n >= FHE_NTT_BATCH_FAST_LOG_N
// (batch entry, chunk, limb), so that the blocks of one chunk of every batch entry (same prime,
// same twiddles) run back to back and the entries after the first find that chunk's twiddles in
// L2. That pays where the twiddle tables outgrow L2 beside the data: at N=2^16 (1 MiB a prime,
// 40 primes) the ciphertext inverse NTT took 5-7% less time, the dnum-4 rotation 2.3% less; at
// N=2^14 and 2^15 (tables that stay in L2) nothing was faster (0-1.7% slower, inside the noise
// of two identical builds there) (H200, 2026-11-30 s24, `ntt_order/`, `final/`). 0 = always,
// 99 = never. The host must match (CupyBackend._ntt_batch_fast).
#ifndef FHE_NTT_BATCH_FAST_LOG_N
#define FHE_NTT_BATCH_FAST_LOG_N 16
#endif

// Occupancy floors: minimum resident blocks per SM handed to ptxas through __launch_bounds__
// (the chunk kernels run up to 512 threads per block, the column kernels 128 or 64); 0 = no
// bound, ptxas's own choice (it then assumes 1024-thread blocks: at most 64 registers).
// The defaults are the measured best on the H200 (bench/kernels_gpu.py --ntt-variants,
// 2026-11-29 s3): chunk 3 (40 registers, a few spilled words; 3 blocks of 512 threads instead
// of 2): N=2^16 ciphertext NTT 88.0 -> 84.7 us, inverse 100.1 -> 92.0 us; column 0 (6 was no
// faster, 8 slower: it spills).
#ifndef FHE_NTT_CHUNK_MIN_BLOCKS
#define FHE_NTT_CHUNK_MIN_BLOCKS 3
#endif
#ifndef FHE_NTT_COLUMN_MIN_BLOCKS
#define FHE_NTT_COLUMN_MIN_BLOCKS 0
#endif
// The _v4 chunk kernels (4 coefficients per thread): blocks of up to 1024 threads, two per SM
// (32 registers).
#define FHE_NTT_V4_BOUNDS __launch_bounds__(1024, 2)
#if FHE_NTT_CHUNK_MIN_BLOCKS > 0
#define FHE_NTT_CHUNK_BOUNDS __launch_bounds__(4096 >> FHE_LV, FHE_NTT_CHUNK_MIN_BLOCKS)
#else
#define FHE_NTT_CHUNK_BOUNDS
#endif
// The _f64 chunk kernels (every row's prime below F64_MAX_Q: only the float64 arithmetic is
// compiled in, so ptxas fits them in 32 registers (8 bytes spilled in the forward kernel, none
// in the inverse) at 4 blocks of 512 threads, a full SM, where the main kernels, which carry the
// 64-bit path too, take 40 registers and 3 blocks). FHE_NTT_F64_CHUNK=0 or FHE_NTT_F64=0: the
// host never takes them (A/B).
#ifndef FHE_NTT_F64_CHUNK_MIN_BLOCKS
#define FHE_NTT_F64_CHUNK_MIN_BLOCKS 4
#endif
#define FHE_NTT_F64_CHUNK_BOUNDS __launch_bounds__(4096 >> FHE_LV, FHE_NTT_F64_CHUNK_MIN_BLOCKS)
#if FHE_NTT_COLUMN_MIN_BLOCKS > 0
#define FHE_NTT_COLUMN_BOUNDS __launch_bounds__(128, FHE_NTT_COLUMN_MIN_BLOCKS)
#else
#define FHE_NTT_COLUMN_BOUNDS
#endif

// Row-skip table of a transform (null: every launched row is transformed in place of its own
// index): skip[3 z + 0..2] = (start, count, rows) for batch entry z; the grid's row y is data
// row y, or y + count from y >= start on (rows start .. start + count - 1 are skipped: a ModUp's
// own-digit rows, written already transformed by the base conversion; in an inverse transform,
// the kept rows of a division by P q_0, which transforms back only rows 0 and L..), and rows
// >= `rows` (the entry's row count) are past the end. Returns the data row, or -1 for no work.
__device__ __forceinline__ int skipped_row(const int* FHE_RO skip, int z, int y) {
  if (skip == nullptr) return y;
  const int* e = skip + 3 * z;
  const int row = y >= e[0] ? y + e[1] : y;
  return row < e[2] ? row : -1;
}

// One row of a column kernel: its prime, twiddles (tw or itw) and the row's input and output.
struct ColumnRow {
  const u64* src;
  u64* dst;
  TwiddleRow w;
  u64 q;
  int id;  // prime id
};
// (y: the data row, int after a row-skip table or the grid's unsigned blockIdx.y; kept as
// given so the address arithmetic stays what each kernel computed before this helper)
template <class Row>
__device__ __forceinline__ ColumnRow column_row(const u64* in, u64* out, const int* FHE_RO rowmap,
                                                const u64* FHE_RO consts, const u64* FHE_RO w2, int num_moduli,
                                                int log_n, i64 in_bs, i64 out_bs, Row y) {
  const int N = 1 << log_n;
  const int id = rowmap[y];
  return {in + blockIdx.z * in_bs + (i64)y * N, out + blockIdx.z * out_bs + (i64)y * N,
          twiddle_row(w2, num_moduli, log_n, id), consts[FHE_C_Q * num_moduli + id], id};
}

template <int K>
__device__ __forceinline__ void forward_columns_store_x2(u64 (&v)[1 << (K - 1)], u64* out, u64 q, const u64x2* tw,
                                                         int log_chunk, int j, int h) {
  forward_columns_store_x2<K>(v, out, ForwardArithU64(q), tw, log_chunk, j, h);
}

// Lane h's inverse column stages of column j (its half loaded in the block layout, v[i] = x[i +
// h H], each word in [0, 2q) through ar.column_from_word); out: its pairs i = 2k + h as (a[k],
// b[k]) = x[i], x[i + H], before N^-1 (InverseArithU64: [0, 2q)).
template <int K, class A>
__device__ __forceinline__ void inverse_columns_load_x2(const u64* in, typename A::T (&a)[1 << (K - 2)],
                                                        typename A::T (&b)[1 << (K - 2)], const typename A::TW* itw,
                                                        const A& ar, int log_n, int log_chunk, int j, int h) {
  constexpr int H = 1 << (K - 1);
  typename A::T v[H];
#pragma unroll
  for (int i = 0; i < H; ++i) v[i] = ar.column_from_word(in[((i + h * H) << log_chunk) + j]);
  inverse_column_stages_x2<K>(v, a, b, itw, ar, log_n, h);
}
template <int K>
__device__ __forceinline__ void inverse_columns_load_x2(const u64* in, u64 (&a)[1 << (K - 2)],
                                                        u64 (&b)[1 << (K - 2)], const u64x2* itw, u64 q, int log_n,
                                                        int log_chunk, int j, int h) {
  inverse_columns_load_x2<K>(in, a, b, itw, InverseArithU64(q, 0, 0), log_n, log_chunk, j, h);
}

// ntt_forward_column_stages: the first K = log_n - log_chunk forward stages (strides >= C).
// Axis [batch, limb, coeff]. In: [0, 4q) (canonical accepted). Out: harvey [0, 4q).
// Launch: grid (ceil(C / block), limbs, batch), block 128; one thread per column j < C; with a
// row-skip table (skipped_row) grid y counts the transformed rows of the widest entry.
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_forward_column_stages(const u64* in, u64* out, const int* FHE_RO rowmap,
                                                     const u64* FHE_RO consts, const u64* FHE_RO tw2,
                                                     const int* FHE_RO skip, int num_moduli, int log_n,
                                                     int log_chunk, i64 in_bs, i64 out_bs) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = skipped_row(skip, blockIdx.z, blockIdx.y);
  if (j >= (1 << log_chunk) || y < 0) return;
  const ColumnRow r = column_row(in, out, rowmap, consts, tw2, num_moduli, log_n, in_bs, out_bs, y);
  forward_columns<false>(RowLoad{r.src}, r.dst, r.q, r.w, log_n, log_chunk, j, 0);
}

// ntt_forward_column_stages_x2: ntt_forward_column_stages with two threads per column (lanes
// 2j and 2j + 1; forward_column_stages_x2), for 2 <= K <= 4: twice the threads and half the
// chain per thread for a grid that leaves the GPU underfilled. Same layout, ranges and row-skip
// table. Launch: grid (ceil(2C / block), limbs, batch), block a multiple of 32 that divides 2C
// (both lanes of a column in one warp, every lane of a warp live for the shuffles).
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_forward_column_stages_x2(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = t >> 1;
  const int h = t & 1;
  const int y = skipped_row(skip, blockIdx.z, blockIdx.y);
  if (j >= (1 << log_chunk) || y < 0) return;  // uniform per warp (launch contract)
  const ColumnRow r = column_row(in, out, rowmap, consts, tw2, num_moduli, log_n, in_bs, out_bs, y);
  forward_columns<true>(RowLoad{r.src}, r.dst, r.q, r.w, log_n, log_chunk, j, h);
}

// ntt_forward_column_stages_rescale_spread(_x2): the column kernels of the forward NTT of a
// rounding division's correction by one prime q0, which they compute as they load it: row y
// (prime rowmap[y]) of entry z reads centered(c0[z], q0) mod q_y (q0 = consts[Q][dropped_id],
// tab[y] = q0 mod q_y: the rescale table of rns.cu, or the pinv table of a ModDown by one special
// prime) where ntt_forward_column_stages reads a row that rescale_spread_dropped (or
// keyswitch_base_convert_s1) wrote; no row-skip table. Axis order: c0 [batch, coeff] (c0_bs),
// out [batch, rows, coeff] (out_bs). Launch: as ntt_forward_column_stages(_x2).
template <bool X2>
__device__ __forceinline__ void forward_column_stages_rescale_spread(const u64* c0, u64* out, const int* FHE_RO rowmap,
                                                                     const u64* FHE_RO consts, const u64* FHE_RO tw2,
                                                                     const u64* FHE_RO tab, int num_moduli, int log_n,
                                                                     int log_chunk, int dropped_id, i64 c0_bs,
                                                                     i64 out_bs) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = X2 ? t >> 1 : t;
  const int y = blockIdx.y;
  if (j >= (1 << log_chunk)) return;  // uniform per warp for X2 (launch contract)
  const int id = rowmap[y];
  const SpreadLoad load{c0 + blockIdx.z * c0_bs, consts[FHE_C_Q * num_moduli + dropped_id], tab[y],
                               load_modulus(consts, num_moduli, id)};
  forward_columns<X2>(load, out + blockIdx.z * out_bs + (i64)y * (1 << log_n), load.md.q,
                      twiddle_row(tw2, num_moduli, log_n, id), log_n, log_chunk, j, t & 1);
}
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_forward_column_stages_rescale_spread(const u64* c0, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const u64* FHE_RO tab,
    int num_moduli, int log_n, int log_chunk, int dropped_id, i64 c0_bs, i64 out_bs) {
  forward_column_stages_rescale_spread<false>(c0, out, rowmap, consts, tw2, tab, num_moduli, log_n, log_chunk,
                                              dropped_id, c0_bs, out_bs);
}
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_forward_column_stages_rescale_spread_x2(const u64* c0,
    u64* out, const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const u64* FHE_RO tab,
    int num_moduli, int log_n, int log_chunk, int dropped_id, i64 c0_bs, i64 out_bs) {
  forward_column_stages_rescale_spread<true>(c0, out, rowmap, consts, tw2, tab, num_moduli, log_n, log_chunk,
                                             dropped_id, c0_bs, out_bs);
}

// ntt_inverse_column_stages_rescale_spread_x2: ntt_forward_column_stages_rescale_spread_x2 for a
// c0 that the inverse NTT's chunk stages left half done (ntt_inverse_chunk_stages on the dropped
// prime, same chunk): lanes 2j + h of row y first finish column j of c0 (its last K inverse stages
// and N^-1, mod q0), then reduce it (centered(., q0) mod q_y) and run the first K forward stages
// mod q_y. After inverse_column_stages_x2 lane h holds x[2k + h] and x[2k + h + H] (k < H / 2),
// which is the parity layout (x[2i + h], i < H) forward_column_stages_x2 starts from: no exchange.
// Every row y redoes column j's inverse stages from the same 2^K words of c0 (L1 and L2 hits), so
// the host takes this form only for launches too small to fill the GPU (its _x2 choice), where it
// saves the inverse column launch and a store and reload of c0. c0 is read only. Ranges: c0 lazy
// [0, 2q0) as the chunk stages leave it; out harvey [0, 4q_y). Args: those of
// ntt_forward_column_stages_rescale_spread_x2 with itw2 after tw2; launch as it.
template <int K>
__device__ __forceinline__ void inverse_spread_columns_x2(const u64* c0, u64* out, u64 q0, const u64x2* itw0,
                                                          u64 ninv, u64 ninv_sh, u64 q0_mod_q, const Modulus& md,
                                                          const u64x2* tw, int log_n, int log_chunk, int j, int h) {
  constexpr int H = 1 << (K - 1);
  u64 v[H], a[H / 2], b[H / 2];
  inverse_columns_load_x2<K>(c0, a, b, itw0, q0, log_n, log_chunk, j, h);
#pragma unroll
  for (int k = 0; k < H / 2; ++k) {
    v[k] = centered_mod(shoup_mul(a[k], ninv, ninv_sh, q0), q0, q0_mod_q, md);
    v[k + H / 2] = centered_mod(shoup_mul(b[k], ninv, ninv_sh, q0), q0, q0_mod_q, md);
  }
  forward_columns_store_x2<K>(v, out, md.q, tw, log_chunk, j, h);
}
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_inverse_column_stages_rescale_spread_x2(const u64* c0,
    u64* out, const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const u64* FHE_RO itw2,
    const u64* FHE_RO tab, int num_moduli, int log_n, int log_chunk, int dropped_id, i64 c0_bs, i64 out_bs) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = t >> 1;
  const int h = t & 1;
  const int y = blockIdx.y;
  if (j >= (1 << log_chunk)) return;  // uniform per warp (launch contract)
  const int id = rowmap[y];
  const Modulus md = load_modulus(consts, num_moduli, id);
  const u64 q0 = consts[FHE_C_Q * num_moduli + dropped_id];
  const u64 ninv = consts[FHE_C_NINV * num_moduli + dropped_id];
  const u64 ninv_sh = consts[FHE_C_NINV_SH * num_moduli + dropped_id];
  const u64* src = c0 + blockIdx.z * c0_bs;
  u64* dst = out + blockIdx.z * out_bs + (i64)y * (1 << log_n);
  const u64x2* itw0 = reinterpret_cast<const u64x2*>(itw2) + ((i64)dropped_id << log_n);
  const u64x2* tw = reinterpret_cast<const u64x2*>(tw2) + ((i64)id << log_n);
  switch (log_n - log_chunk) {
    case 2: inverse_spread_columns_x2<2>(src, dst, q0, itw0, ninv, ninv_sh, tab[y], md, tw, log_n, log_chunk, j, h); break;
    case 3: inverse_spread_columns_x2<3>(src, dst, q0, itw0, ninv, ninv_sh, tab[y], md, tw, log_n, log_chunk, j, h); break;
    case 4: inverse_spread_columns_x2<4>(src, dst, q0, itw0, ninv, ninv_sh, tab[y], md, tw, log_n, log_chunk, j, h); break;
    default: break;
  }
}

// ntt_forward_column_stages_modup_spread(_x2): the column kernels of a ModUp's forward NTT when
// every digit is one prime, which compute the digit's base conversion as they load it: row y
// (prime rowmap[y]) of entry z = g * batch + b of a digit group g reads centered(c[k, b, src_g],
// q_g) mod q_y, the output of keyswitch_base_convert_s1 for a group of one (its scale and weight
// are 1; the digit's own row, tab 0, reads c itself, which s1 copies). A component group g
// (q word 0) transforms rows y < L of component k itself (the ciphertext's own NTT in the same
// launches: ntt_forward_and_modup); its rows from L on are marked ~0 and left to the chunk
// kernel's row-skip table. tab: per group, rows + 2 words [q_g (0: a component group), k << 32 |
// src_g, q_g mod q_y (component group: 0, or ~0 past its rows) for y < rows]. Axis order: c [k,
// batch, L, coeff] (c_cs per component, c_bs per entry b), out [G * batch, rows, coeff] (out_bs
// per entry z). Launch: as ntt_forward_column_stages(_x2), grid z = G * batch.
template <bool X2>
__device__ __forceinline__ void forward_column_stages_modup_spread(const u64* c, u64* out, const int* FHE_RO rowmap,
                                                                   const u64* FHE_RO consts, const u64* FHE_RO tw2,
                                                                   const u64* FHE_RO tab, int num_moduli, int log_n,
                                                                   int log_chunk, int batch, int rows, i64 c_cs,
                                                                   i64 c_bs, i64 out_bs) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = X2 ? t >> 1 : t;
  const int y = blockIdx.y;
  if (j >= (1 << log_chunk)) return;  // uniform per warp for X2 (launch contract)
  const int g = blockIdx.z / batch, b = blockIdx.z % batch;
  const u64* group = tab + (i64)g * (rows + 2);
  const u64 q0_mod_q = group[2 + y];
  if (q0_mod_q == ~0ULL) return;  // past a component group's rows (uniform per block)
  const int id = rowmap[y];
  const Modulus md = load_modulus(consts, num_moduli, id);
  const i64 k = (i64)(group[1] >> 32), src = group[0] ? (i64)(unsigned)group[1] : (i64)y;
  const SpreadLoad load{c + k * c_cs + b * c_bs + (src << log_n), group[0] ? group[0] : md.q, q0_mod_q, md};
  forward_columns<X2>(load, out + blockIdx.z * out_bs + (i64)y * (1 << log_n), md.q,
                      twiddle_row(tw2, num_moduli, log_n, id), log_n, log_chunk, j, t & 1);
}
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_forward_column_stages_modup_spread(const u64* c, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const u64* FHE_RO tab,
    int num_moduli, int log_n, int log_chunk, int batch, int rows, i64 c_cs, i64 c_bs, i64 out_bs) {
  forward_column_stages_modup_spread<false>(c, out, rowmap, consts, tw2, tab, num_moduli, log_n, log_chunk, batch,
                                            rows, c_cs, c_bs, out_bs);
}
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_forward_column_stages_modup_spread_x2(const u64* c, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const u64* FHE_RO tab,
    int num_moduli, int log_n, int log_chunk, int batch, int rows, i64 c_cs, i64 c_bs, i64 out_bs) {
  forward_column_stages_modup_spread<true>(c, out, rowmap, consts, tw2, tab, num_moduli, log_n, log_chunk, batch,
                                           rows, c_cs, c_bs, out_bs);
}

// --- shared-memory chunk stages ----------------------------------------------------------
// A block transforms one chunk of C = 2^log_chunk coefficients with T = C >> LV threads
// (2^LV coefficients per thread; LV is a template parameter: FHE_LV for the main kernels, 2 for
// their _v4 forms). The log_chunk stages run in rounds of up to
// LV consecutive stages; in a round of RS stages each thread holds 2^(LV - RS)
// independent groups of 2^RS coefficients {x0 + k * 2^ltmin, k < 2^RS} (2^ltmin = the
// round's smallest stride) and does the RS stages in registers, so shared memory is touched
// once per round (two barriers per round instead of one per stage). Shared memory is padded
// by one word per 16 (sm_pad) so the 8-word-strided accesses of the ltmin = 0 round are free
// of bank conflicts. Forward: a short round (log_chunk % LV stages) first, read straight
// from global memory, then full rounds; the last full round has ltmin = 0 and writes each
// thread's contiguous coefficients with 16-byte stores. Inverse: the mirror image.
__device__ __forceinline__ int sm_pad(int x) { return x + (x >> 4); }

// Barriers of the shared-memory exchanges. An exchange is round_store (the finished round's
// layout), a barrier, round_load (the next round's layout). Only that barrier is needed: the
// next exchange's round_store uses the layout this round_load used, so each thread writes
// exactly the words it read itself (no cross-thread write-after-read), and after the last
// round_load nothing touches shared memory. The barrier itself can be a __syncwarp when both
// rounds keep each warp inside its own words: a full round (RS == LV, one group) with ltmin <= 5
// maps warp w to chunk positions [w 2^(5 + LV), (w + 1) 2^(5 + LV)) whatever its ltmin, so an
// exchange between two such rounds never crosses warps (needs whole warps: T >= 32).
// FHE_NTT_EXCHANGE_SYNC=0 restores a __syncthreads() after every store and every load (A/B).
#ifndef FHE_NTT_EXCHANGE_SYNC
#define FHE_NTT_EXCHANGE_SYNC 1
#endif
template <int LV, int LC>
__device__ __forceinline__ constexpr bool warp_local_round(int rs, int ltmin) {
  return LC - LV >= 5 && rs == LV && ltmin <= 5;
}
// The barrier between round_store (round RSA stages, smallest stride 2^LTA) and round_load
// (RSB, LTB).
template <int LV, int LC, int RSA, int LTA, int RSB, int LTB>
__device__ __forceinline__ void exchange_barrier() {
  if constexpr (FHE_NTT_EXCHANGE_SYNC && warp_local_round<LV, LC>(RSA, LTA) && warp_local_round<LV, LC>(RSB, LTB))
    __syncwarp();
  else
    __syncthreads();
}
// After round_load: nothing (FHE_NTT_EXCHANGE_SYNC=0: the old __syncthreads()).
__device__ __forceinline__ void after_round_load() {
#if !FHE_NTT_EXCHANGE_SYNC
  __syncthreads();
#endif
}

// (chunk, limb, batch entry) of this block of a chunk kernel (grid order: FHE_NTT_BATCH_FAST_LOG_N).
struct ChunkCoords {
  int chunk, limb, entry;
};
__device__ __forceinline__ ChunkCoords chunk_coords(int log_n) {
  if (log_n >= FHE_NTT_BATCH_FAST_LOG_N) return {(int)blockIdx.y, (int)blockIdx.z, (int)blockIdx.x};
  return {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
}

// Chunk position of register (g, k) of thread `tid` in a round of RS stages, smallest
// stride 2^ltmin, T threads: group G = tid + g * T.
template <int RS>
__device__ __forceinline__ int round_index(int tid, int g, int k, int ltmin, int T) {
  const int G = tid + g * T;
  return ((G >> ltmin) << (ltmin + RS)) | (G & ((1 << ltmin) - 1)) | (k << ltmin);
}
// round_index(.., k, ..) = round_index(.., 0, ..) | (k << ltmin) with disjoint bits, so
// sm_pad(round_index(k)) = sm_pad(round_index(0)) + sm_pad(k << ltmin): one per-thread base and
// compile-time offsets (the kernels below are instantiated per log_chunk, so ltmin is constant).

// Forward (Cooley-Tukey) round: chunk stages p .. p+RS-1 (global stage s = K + p + i,
// stride C >> (p + i + 1)). In/out [0, 4q). Twiddle index of stage i, group G = tid + g*T, pair
// (k, k + 2^lh) (lh = RS-1-i): tw index m + ((base + x) >> log2(2t)) with x = round_index(G, k)
// simplifies (base is a multiple of C) to ((B0 + (G >> ltmin)) << i) + (k >> (lh + 1)),
// B0 = 2^(K + p) + (base >> (log_chunk - p)); k >> (lh + 1) = kk >> lh is a compile-time constant.
// The groups g hold disjoint coefficients, so each group runs its RS stages in turn.
// A round's twiddles per group g: (2^RS - 1) pairs at w[g * (2^RS - 1) + ...] (the 2^(LV - RS)
// groups use at most 2^LV - 1 slots), loaded in one step and applied in the next. Issuing
// the loads before the round's shared-memory exchange instead measured no different on the
// H200 (2026-11-29 s3: ptxas already schedules the read-only loads early).
// Forward: stage i's 2^i pairs at offset 2^i - 1.
template <int LV, int RS, class TW>
__device__ __forceinline__ void forward_round_twiddles(TW (&w)[(1 << LV)], int tid, int T, int p, int log_n,
                                                       int log_chunk, int base, const TW* tw) {
  const int ltmin = log_chunk - p - RS;
  const unsigned b0 = (1u << (log_n - log_chunk + p)) + ((unsigned)base >> (log_chunk - p));
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
    const unsigned pg = b0 + ((unsigned)(tid + g * T) >> ltmin);
#pragma unroll
    for (int i = 0; i < RS; ++i) {
#pragma unroll
      for (int e = 0; e < (1 << i); ++e) w[g * ((1 << RS) - 1) + (1 << i) - 1 + e] = tw[(pg << i) + e];
    }
  }
}

template <int LV, int RS, class A>
__device__ __forceinline__ void forward_round_apply(typename A::T (&v)[(1 << LV)],
                                                    const typename A::TW (&w)[(1 << LV)], const A& ar) {
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
#pragma unroll
    for (int i = 0; i < RS; ++i) {
      const int lh = RS - 1 - i;  // log2 of the pair distance in k
#pragma unroll
      for (int kk = 0; kk < (1 << (RS - 1)); ++kk) {
        const int k = ((kk >> lh) << (lh + 1)) | (kk & ((1 << lh) - 1));
        const typename A::TW wt = w[g * ((1 << RS) - 1) + (1 << i) - 1 + (kk >> lh)];
        ar.butterfly(v[(g << RS) | k], v[(g << RS) | k | (1 << lh)], wt);
      }
    }
  }
}

// Inverse (Gentleman-Sande) round: chunk stages u = p .. p+RS-1 (stride 2^u). In/out [0, 2q).
// Twiddle index itw[(N >> (u + 1)) + ((base + x) >> (u + 1))], x = round_index(G, k) with
// ltmin = p, simplifies to ((B0 + (G >> p)) << (RS - 1 - i)) + (k >> (i + 1)),
// B0 = 2^(log_n - p - RS) + (base >> (p + RS)); k >> (i + 1) = kk >> i.
// Stage i's 2^(RS-1-i) pairs at offset 2^RS - 2^(RS-i).
template <int LV, int RS, class TW>
__device__ __forceinline__ void inverse_round_twiddles(TW (&w)[(1 << LV)], int tid, int T, int p, int log_n,
                                                       int base, const TW* itw) {
  const unsigned b0 = (1u << (log_n - p - RS)) + ((unsigned)base >> (p + RS));
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
    const unsigned pg = b0 + ((unsigned)(tid + g * T) >> p);
#pragma unroll
    for (int i = 0; i < RS; ++i) {
#pragma unroll
      for (int e = 0; e < (1 << (RS - 1 - i)); ++e)
        w[g * ((1 << RS) - 1) + (1 << RS) - (1 << (RS - i)) + e] = itw[(pg << (RS - 1 - i)) + e];
    }
  }
}

template <int LV, int RS, class A>
__device__ __forceinline__ void inverse_round_apply(typename A::T (&v)[(1 << LV)],
                                                    const typename A::TW (&w)[(1 << LV)], const A& ar) {
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
#pragma unroll
    for (int i = 0; i < RS; ++i) {
#pragma unroll
      for (int kk = 0; kk < (1 << (RS - 1)); ++kk) {
        const int k = ((kk >> i) << (i + 1)) | (kk & ((1 << i) - 1));
        const typename A::TW wt = w[g * ((1 << RS) - 1) + (1 << RS) - (1 << (RS - i)) + (kk >> i)];
        ar.butterfly(v[(g << RS) | k], v[(g << RS) | k | (1 << i)], wt);
      }
    }
  }
}

template <int LV, int RS, class W>
__device__ __forceinline__ void round_load(W (&v)[(1 << LV)], const W* sm, int tid, int T, int ltmin) {
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
    const W* s = sm + sm_pad(round_index<RS>(tid, g, 0, ltmin, T));
#pragma unroll
    for (int k = 0; k < (1 << RS); ++k) v[(g << RS) | k] = s[sm_pad(k << ltmin)];
  }
}

template <int LV, int RS, class W>
__device__ __forceinline__ void round_store(const W (&v)[(1 << LV)], W* sm, int tid, int T, int ltmin) {
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
    W* s = sm + sm_pad(round_index<RS>(tid, g, 0, ltmin, T));
#pragma unroll
    for (int k = 0; k < (1 << RS); ++k) s[sm_pad(k << ltmin)] = v[(g << RS) | k];
  }
}

// Global -> registers for a round (coalesced across threads when 2^ltmin >= 32), each word
// through the arithmetic's from_word.
template <int LV, int RS, class A>
__device__ __forceinline__ void global_load(typename A::T (&v)[(1 << LV)], const u64* src, int tid, int T, int ltmin,
                                            const A& ar) {
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RS); ++g) {
    const u64* s = src + round_index<RS>(tid, g, 0, ltmin, T);
#pragma unroll
    for (int k = 0; k < (1 << RS); ++k) v[(g << RS) | k] = ar.from_word(s[k << ltmin]);
  }
}

// Forward chunk stages of one chunk, LC = log_chunk known at compile time (every round's ltmin,
// the thread count and the shared-memory offsets are constants). In [0, 4q); out canonical.
// Rounds: a short round of LC % LV stages first (a full one when LC % LV == 0), read
// straight from global memory, then full rounds; the last has ltmin = 0 and writes each thread's
// contiguous coefficients with 16-byte stores.
// The output of a chunk (canonical values): each thread's 2^LV contiguous coefficients from
// chunk position tid << LV, as pairs (k, k + 1) through store(k, a, b).
template <int LV>
struct ChunkStore {  // the NTT values themselves, 16-byte stores into the chunk at dst
  u64* dst;
  __device__ __forceinline__ void operator()(int k, u64 a, u64 b) const {
    u64x2 pair;
    pair.a = a;
    pair.b = b;
    reinterpret_cast<u64x2*>(dst + ((int)threadIdx.x << LV))[k >> 1] = pair;
  }
};

// Forward full rounds p = P, P + LV, .. < LC (chunk stages p .. p + LV - 1; ltmin LC - p - LV),
// each after an exchange from the previous round's layout (the first round's: RS0 stages).
template <int LV, int LC, int P, class A>
__device__ __forceinline__ void forward_full_rounds(typename A::T (&v)[(1 << LV)], typename A::TW (&t)[(1 << LV)],
                                                    typename A::T* sm, int tid, int log_n, int base,
                                                    const typename A::TW* w, const A& ar) {
  if constexpr (P < LC) {
    constexpr int T = 1 << (LC - LV);
    constexpr int RS0 = LC % LV ? LC % LV : LV;
    constexpr int RSA = P == RS0 ? RS0 : LV;  // the previous round's stages and ltmin
    constexpr int LTA = LC - P;
    constexpr int LTB = LC - P - LV;
    round_store<LV, RSA>(v, sm, tid, T, LTA);
    exchange_barrier<LV, LC, RSA, LTA, LV, LTB>();
    round_load<LV, LV>(v, sm, tid, T, LTB);
    after_round_load();
    forward_round_twiddles<LV, LV>(t, tid, T, P, log_n, LC, base, w);
    forward_round_apply<LV, LV>(v, t, ar);
    forward_full_rounds<LV, LC, P + LV>(v, t, sm, tid, log_n, base, w, ar);
  }
}

template <int LV, int LC, class Store, class A>
__device__ __forceinline__ void forward_chunk(const u64* src, Store store, u64* sm_words, int tid, int log_n,
                                              int base, const typename A::TW* w, const A& ar) {
  constexpr int T = 1 << (LC >= LV ? LC - LV : 0);
  constexpr int RS0 = LC % LV ? LC % LV : LV;
  typename A::T v[(1 << LV)];
  typename A::T* sm = reinterpret_cast<typename A::T*>(sm_words);
  typename A::TW t[(1 << LV)];
  forward_round_twiddles<LV, RS0>(t, tid, T, 0, log_n, LC, base, w);
  global_load<LV, RS0>(v, src, tid, T, LC - RS0, ar);
  forward_round_apply<LV, RS0>(v, t, ar);
  forward_full_rounds<LV, LC, RS0>(v, t, sm, tid, log_n, base, w, ar);
#pragma unroll
  for (int k = 0; k < (1 << LV); k += 2)  // last round: ltmin = 0
    store(k, ar.canonical(v[k]), ar.canonical(v[k + 1]));
}

#define FHE_CHUNK_DISPATCH(BODY)                                                                \
  switch (log_chunk) {                                                                          \
    case 3: BODY(3); break;                                                                     \
    case 4: BODY(4); break;                                                                     \
    case 5: BODY(5); break;                                                                     \
    case 6: BODY(6); break;                                                                     \
    case 7: BODY(7); break;                                                                     \
    case 8: BODY(8); break;                                                                     \
    case 9: BODY(9); break;                                                                     \
    case 10: BODY(10); break;                                                                   \
    case 11: BODY(11); break;                                                                   \
    case 12: BODY(12); break;                                                                   \
    default: break;                                                                             \
  }
// The _f64 chunk kernels' chunks: 2^11 and 2^12 words only, the chunks of launches that fill
// the GPU (the host takes them for those: two instantiations keep them at 32 registers, 8
// bytes spilled in the forward kernel, none in the inverse; with 2^10 beside them ptxas spilled
// 32 bytes a thread).
#define FHE_F64_CHUNK_DISPATCH(BODY) \
  if (log_chunk == 12) BODY(12); else if (log_chunk == 11) BODY(11)

// The forward chunk stages of one block: its row's prime and twiddles, its chunk of the input;
// run() dispatches on log_chunk and hands the output to a ChunkStore-like functor. F64: whether
// a modulus below F64_MAX_Q takes the float64 arithmetic (the fused kernels' FHE_NTT_F64_FUSED).
// FHE_NTT_F64_FUSED=0 keeps the chunk kernels fused with a ModDown's combine or a key inner
// product on the 64-bit arithmetic (their stores' registers beside the float64 path's spill).
#ifndef FHE_NTT_F64_FUSED
#define FHE_NTT_F64_FUSED FHE_NTT_F64
#endif
struct ForwardChunk {
  const u64* src;
  TwiddleRow w;
  u64 q;
  int base;
  // F64_ONLY: the row's prime is below F64_MAX_Q (the caller's contract): no 64-bit path.
  template <int LV, bool F64 = FHE_NTT_F64, bool F64_ONLY = false, class Store>
  __device__ __forceinline__ void run(const Store& store, int log_n, int log_chunk) const {
    extern __shared__ u64 sm[];
    const int tid = threadIdx.x;
#define FHE_FWD(LC) forward_chunk<LV, LC>(src, store, sm, tid, log_n, base, ar.row(w), ar)
    if constexpr (F64_ONLY) {
      const ForwardArithF64 ar(q);
      FHE_F64_CHUNK_DISPATCH(FHE_FWD);
    } else {
      FHE_WITH_ROW_ARITH(ForwardArithF64, ForwardArithU64, F64, q, (q), FHE_CHUNK_DISPATCH(FHE_FWD));
    }
#undef FHE_FWD
  }
};
__device__ __forceinline__ ForwardChunk forward_chunk_of(const u64* in, const int* FHE_RO rowmap,
                                                         const u64* FHE_RO consts, const u64* FHE_RO tw2,
                                                         int num_moduli, int log_n, int log_chunk, i64 in_bs,
                                                         ChunkCoords at, int limb) {
  const int N = 1 << log_n;
  const int id = rowmap[limb];
  const int base = at.chunk << log_chunk;
  return {in + at.entry * in_bs + (i64)limb * N + base, twiddle_row(tw2, num_moduli, log_n, id),
          consts[FHE_C_Q * num_moduli + id], base};
}

// ntt_forward_chunk_stages: the last log_chunk forward stages on contiguous chunks of
// C = 2^log_chunk coefficients (registers + shared memory); output canonical.
// Axis [batch, limb, coeff]. In: [0, 4q) (output of the column stages, or canonical when
// log_chunk == log_n). Out: canonical [0, q). May run in place (in == out).
// Launch: grid (N / C, limbs, batch) ((batch, N / C, limbs) from FHE_NTT_BATCH_FAST_LOG_N), block
// C >> FHE_LV (3 <= log_chunk <= 12), dynamic shared memory (C + C / 16) * 8 bytes; row-skip
// table as in ntt_forward_column_stages.
// ntt_forward_chunk_stages_v4: the same with 4 coefficients per thread (block C / 4, up to
// 1024 threads, two blocks and 32 registers per SM: twice the warps for a small grid). The host
// takes it for launches of few coefficients (CupyBackend.ntt_v4_coefficients; measured on the
// H200, 2026-11-29 s6 call4: N=2^14 rotation 88.0-89.7 -> 75.0-77.6 us, 7 hoisted key switches
// 122 -> 111 us; a whole N=2^16 ciphertext, 4.5 M coefficients, slower: chunk kernel 60.4 ->
// 70.3 us).
template <int LV, bool F64_ONLY = false>
__device__ __forceinline__ void forward_chunk_stages(const u64* in, u64* out, const int* FHE_RO rowmap,
                                                     const u64* FHE_RO consts, const u64* FHE_RO tw2,
                                                     const int* FHE_RO skip, int num_moduli, int log_n,
                                                     int log_chunk, i64 in_bs, i64 out_bs) {
  const ChunkCoords at = chunk_coords(log_n);
  const int limb = skipped_row(skip, at.entry, at.limb);
  if (limb < 0) return;  // uniform per block: before any barrier
  const ForwardChunk c = forward_chunk_of(in, rowmap, consts, tw2, num_moduli, log_n, log_chunk, in_bs, at, limb);
  const ChunkStore<LV> store{out + at.entry * out_bs + (i64)limb * (1 << log_n) + c.base};
  c.run<LV, FHE_NTT_F64, F64_ONLY>(store, log_n, log_chunk);
}
extern "C" __global__ void FHE_NTT_CHUNK_BOUNDS ntt_forward_chunk_stages(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  forward_chunk_stages<FHE_LV>(in, out, rowmap, consts, tw2, skip, num_moduli, log_n, log_chunk, in_bs,
    out_bs);
}
// ntt_forward_chunk_stages_f64: the same for launches whose every row's prime is below
// F64_MAX_Q (the host's contract: CupyBackend._f64_rows), float64 butterflies only, in chunks
// of 2^11 or 2^12 words (FHE_F64_CHUNK_DISPATCH; another chunk: no work).
extern "C" __global__ void FHE_NTT_F64_CHUNK_BOUNDS ntt_forward_chunk_stages_f64(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  forward_chunk_stages<FHE_LV, true>(in, out, rowmap, consts, tw2, skip, num_moduli, log_n, log_chunk, in_bs,
    out_bs);
}
extern "C" __global__ void FHE_NTT_V4_BOUNDS ntt_forward_chunk_stages_v4(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  forward_chunk_stages<2>(in, out, rowmap, consts, tw2, skip, num_moduli, log_n, log_chunk, in_bs, out_bs);
}

// The last step of an NTT-domain rounding ModDown as the output of the forward chunk stages of
// e (keyswitch.cu keyswitch_moddown_combine, same formula): y = (x - NTT(e)) * P^-1 mod q,
// plus c0[perm] on component 0 when c0 is given. Pointers are at this thread's first
// coefficient (x, out) or row (c0: + perm[pos], perm: the entry's row at this position).
struct CombineStore {
  const u64* x;
  u64* out;
  const u64* c0;
  const int* perm;
  u64 q, pinv, pinv_sh;
  __device__ __forceinline__ u64 one(int k, u64 e) const {
    u64 y = shoup_mul(sub_mod(x[k], e, q), pinv, pinv_sh, q);
    if (c0 != nullptr) y = add_mod(y, c0[perm[k]], q);
    return y;
  }
  __device__ __forceinline__ void operator()(int k, u64 a, u64 b) const {
    u64x2 pair;
    pair.a = one(k, a);
    pair.b = one(k + 1, b);
    reinterpret_cast<u64x2*>(out)[k >> 1] = pair;
  }
};

// ntt_forward_chunk_stages_moddown_combine: ntt_forward_chunk_stages of e (the base conversion
// of the P rows, after the column stages) fused with keyswitch_moddown_combine, so NTT(e) is
// never stored. Entry z = (ent * 2 + comp) * batch + b of e [entries, L, coeff] (in_bs per
// entry); x = the inner product [entries, R, coeff] (x_bs per entry, Q rows first); out entry
// (ent, comp) at ent * out_es + comp * out_cs, then [batch, L, coeff]; c0 [batch, L, coeff] and
// perms [E, coeff] or null; pinv as in keyswitch_moddown_combine. Out may alias e (each block
// reads its whole chunk before it writes). Launch: as ntt_forward_chunk_stages over L rows.
// The host uses it unless the build defines FHE_MODDOWN_FUSED_COMBINE=0 (A/B against the
// separate keyswitch_moddown_combine).
// ntt_forward_chunk_stages_moddown_combine_v4: the same with 4 coefficients per thread (as
// ntt_forward_chunk_stages_v4).
template <int LV>
__device__ __forceinline__ void forward_chunk_stages_moddown_combine(
    const u64* e, const u64* x, u64* out, const int* FHE_RO rowmap, const u64* FHE_RO consts,
    const u64* FHE_RO tw2, const u64* FHE_RO pinv, const u64* c0, const int* perms, int num_moduli, int log_n,
    int log_chunk, int L, int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  const int N = 1 << log_n;
  const ChunkCoords at = chunk_coords(log_n);
  const int i = at.limb;
  const ForwardChunk c = forward_chunk_of(e, rowmap, consts, tw2, num_moduli, log_n, log_chunk, in_bs, at, i);
  const int ent = at.entry / (2 * batch);
  const int comp = (at.entry / batch) % 2;
  const int b = at.entry % batch;
  const int pos = c.base + ((int)threadIdx.x << LV);  // this thread's first output coefficient
  const bool rotate_c0 = c0 != nullptr && comp == 0;
  const CombineStore store{x + at.entry * x_bs + (i64)i * N + pos,
                           out + ent * out_es + comp * out_cs + ((i64)b * L + i) * N + pos,
                           rotate_c0 ? c0 + ((i64)b * L + i) * N : nullptr,
                           rotate_c0 ? perms + (i64)ent * N + pos : nullptr,
                           c.q, pinv[L + i], pinv[2 * L + i]};
  c.run<LV, FHE_NTT_F64_FUSED>(store, log_n, log_chunk);
}
extern "C" __global__ void FHE_NTT_CHUNK_BOUNDS ntt_forward_chunk_stages_moddown_combine(const u64* e,
    const u64* x, u64* out, const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2,
    const u64* FHE_RO pinv, const u64* c0, const int* perms, int num_moduli, int log_n, int log_chunk, int L,
    int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  forward_chunk_stages_moddown_combine<FHE_LV>(e, x, out, rowmap, consts, tw2, pinv, c0, perms, num_moduli,
    log_n, log_chunk, L, batch, in_bs, x_bs, out_es, out_cs);
}
extern "C" __global__ void FHE_NTT_V4_BOUNDS ntt_forward_chunk_stages_moddown_combine_v4(const u64* e,
    const u64* x, u64* out, const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2,
    const u64* FHE_RO pinv, const u64* c0, const int* perms, int num_moduli, int log_n, int log_chunk, int L,
    int batch, i64 in_bs, i64 x_bs, i64 out_es, i64 out_cs) {
  forward_chunk_stages_moddown_combine<2>(e, x, out, rowmap, consts, tw2, pinv, c0, perms, num_moduli, log_n,
    log_chunk, L, batch, in_bs, x_bs, out_es, out_cs);
}

// The key inner product of a ModUp as the output of its forward chunk stages: each digit's
// NTT values (canonical) times the key words of that digit at the same positions, summed over
// the digits in registers (acc0, acc1: one word a coefficient a component), so the digits are
// never stored. Pointers are at this thread's first coefficient of the digit's key rows.
template <int LV>
struct KeyProductStore {
  const u64* k0;
  const u64* k1;
  u64 (&acc0)[1 << LV];
  u64 (&acc1)[1 << LV];
  u64 q, qinv;
  __device__ __forceinline__ void operator()(int k, u64 a, u64 b) const {
    const ulonglong2 w0 = __ldcs(reinterpret_cast<const ulonglong2*>(k0) + (k >> 1));  // streamed: read once
    const ulonglong2 w1 = __ldcs(reinterpret_cast<const ulonglong2*>(k1) + (k >> 1));
    acc0[k] = add_mod(acc0[k], mont_mul(a, w0.x, q, qinv), q);
    acc0[k + 1] = add_mod(acc0[k + 1], mont_mul(b, w0.y, q, qinv), q);
    acc1[k] = add_mod(acc1[k], mont_mul(a, w1.x, q, qinv), q);
    acc1[k + 1] = add_mod(acc1[k + 1], mont_mul(b, w1.y, q, qinv), q);
  }
};

// ntt_forward_chunk_stages_key_inner_product: the forward chunk stages of every digit of a
// one-prime ModUp (after its column kernel) fused with the key inner product of one key:
// out[k, r, i] = sum_d NTT(digit_d)[r, i] * key[keydig[d], k, rowmap[r], i] * 2^-64 mod q_r
// (k = 0, 1; the key in Montgomery form), the sum keyswitch.cu's keyswitch_inner_product_many
// computes with the identity permutation, bit for bit (every partial sum is a canonical residue).
// One block per (chunk, row) loops over the digits, so the digits' NTT values never reach
// memory: the ModUp's chunk-kernel store and the inner product's digit load are gone. A
// rotation's Galois permutation is applied before the ModUp (to c in the coefficient domain:
// for one-prime digits ModUp(sigma(c)) = sigma(ModUp(c)) exactly), so the key is read in order.
// Axis order: in [D, R, coeff] (in_bs per digit: the column kernel's output); key [dnum, 2,
// key_rows, coeff]; out [2, R, coeff]. Launch: grid (N / C, R), block C / 4 (4 coefficients a
// thread, as ntt_forward_chunk_stages_v4), dynamic shared memory (C + C / 16) * 8 bytes.
// Its bounds for ptxas: blocks of at most FHE_NTT_KIP_THREADS threads (the host declines a
// chunk of more than 4x that), FHE_NTT_KIP_MIN_BLOCKS of them resident per SM.
#ifndef FHE_NTT_KIP_THREADS
#define FHE_NTT_KIP_THREADS 1024
#endif
#ifndef FHE_NTT_KIP_MIN_BLOCKS
#define FHE_NTT_KIP_MIN_BLOCKS 1
#endif
#define FHE_NTT_KIP_BOUNDS __launch_bounds__(FHE_NTT_KIP_THREADS, FHE_NTT_KIP_MIN_BLOCKS)
extern "C" __global__ void FHE_NTT_KIP_BOUNDS ntt_forward_chunk_stages_key_inner_product(const u64* in,
    const u64* key, u64* out, const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO tw2,
    const int* FHE_RO keydig, int num_moduli, int log_n, int log_chunk, int num_digits, int key_rows, i64 in_bs) {
  constexpr int LV = 2;
  const int N = 1 << log_n;
  const int limb = blockIdx.y;
  const int id = rowmap[limb];
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const u64 qinv = consts[FHE_C_QINV * num_moduli + id];
  const int pos = ((int)blockIdx.x << log_chunk) + ((int)threadIdx.x << LV);
  u64 acc0[1 << LV], acc1[1 << LV];
#pragma unroll
  for (int k = 0; k < (1 << LV); ++k) acc0[k] = acc1[k] = 0;
  for (int d = 0; d < num_digits; ++d) {
    if (d > 0) __syncthreads();  // the previous digit's last shared-memory reads are done
    const ForwardChunk c = forward_chunk_of(in, rowmap, consts, tw2, num_moduli, log_n, log_chunk, in_bs,
                                            ChunkCoords{(int)blockIdx.x, limb, d}, limb);
    const u64* k0 = key + ((i64)keydig[d] * 2 * key_rows + id) * N + pos;
    const KeyProductStore<LV> store{k0, k0 + (i64)key_rows * N, acc0, acc1, q, qinv};
    c.run<LV, FHE_NTT_F64_FUSED>(store, log_n, log_chunk);
  }
  u64x2* o0 = reinterpret_cast<u64x2*>(out + (i64)limb * N + pos);
  u64x2* o1 = reinterpret_cast<u64x2*>(out + ((i64)gridDim.y + limb) * N + pos);
#pragma unroll
  for (int k = 0; k < (1 << LV); k += 2) {
    o0[k >> 1] = u64x2{acc0[k], acc0[k + 1]};
    o1[k >> 1] = u64x2{acc1[k], acc1[k + 1]};
  }
}

// Inverse chunk stages of one chunk, LC = log_chunk known at compile time. In canonical;
// out lazy [0, 2q), or times N^-1 and canonical when `whole` (LC == log_n).
// Rounds: full rounds from ltmin = 0 (16-byte global loads), then a short round of
// LC % LV stages if any.
// Inverse full rounds p = P, P + LV, .. < LC - LC % LV (chunk stages p .. p + LV - 1, ltmin p),
// each after an exchange from the previous full round's layout (ltmin p - LV).
template <int LV, int LC, int P, class A>
__device__ __forceinline__ void inverse_full_rounds(typename A::T (&v)[(1 << LV)], typename A::TW (&t)[(1 << LV)],
                                                    typename A::T* sm, int tid, int log_n, int base,
                                                    const typename A::TW* w, const A& ar) {
  if constexpr (P < LC - LC % LV) {
    constexpr int T = 1 << (LC - LV);
    round_store<LV, LV>(v, sm, tid, T, P - LV);
    exchange_barrier<LV, LC, LV, P - LV, LV, P>();
    round_load<LV, LV>(v, sm, tid, T, P);
    after_round_load();
    ar.begin_round(v);
    inverse_round_twiddles<LV, LV>(t, tid, T, P, log_n, base, w);
    inverse_round_apply<LV, LV>(v, t, ar);
    inverse_full_rounds<LV, LC, P + LV>(v, t, sm, tid, log_n, base, w, ar);
  }
}

template <int LV, int LC, class A>
__device__ __forceinline__ void inverse_chunk(const u64* src, u64* dst, u64* sm_words, int tid, int log_n, int base,
                                              const typename A::TW* w, const A& ar, bool whole) {
  constexpr int T = 1 << (LC >= LV ? LC - LV : 0);
  constexpr int REST = LC % LV;
  constexpr int FULL_END = LC - REST;  // full rounds cover chunk stages [0, FULL_END)
  constexpr int RSL = REST ? REST : LV;  // stages of the last round
  constexpr int LTL = REST ? FULL_END : FULL_END - LV;  // its ltmin
  typename A::T v[(1 << LV)];
  typename A::T* sm = reinterpret_cast<typename A::T*>(sm_words);
  typename A::TW t[(1 << LV)];
  inverse_round_twiddles<LV, LV>(t, tid, T, 0, log_n, base, w);
  {  // round 0 (ltmin = 0): each thread's (1 << LV) coefficients are contiguous
    const u64x2* s2 = reinterpret_cast<const u64x2*>(src + (tid << LV));
#pragma unroll
    for (int k = 0; k < (1 << LV); k += 2) {
      const u64x2 pair = s2[k >> 1];
      v[k] = ar.from_word(pair.a);
      v[k + 1] = ar.from_word(pair.b);
    }
  }
  inverse_round_apply<LV, LV>(v, t, ar);
  inverse_full_rounds<LV, LC, LV>(v, t, sm, tid, log_n, base, w, ar);
  if constexpr (REST != 0) {
    round_store<LV, LV>(v, sm, tid, T, FULL_END - LV);
    exchange_barrier<LV, LC, LV, FULL_END - LV, REST, FULL_END>();
    round_load<LV, REST>(v, sm, tid, T, FULL_END);
    ar.begin_round(v);
    inverse_round_twiddles<LV, REST>(t, tid, T, FULL_END, log_n, base, w);
    inverse_round_apply<LV, REST>(v, t, ar);
  }
#pragma unroll
  for (int g = 0; g < ((1 << LV) >> RSL); ++g) {
    u64* d = dst + round_index<RSL>(tid, g, 0, LTL, T);
#pragma unroll
    for (int k = 0; k < (1 << RSL); ++k) {
      d[k << LTL] = ar.output(v[(g << RSL) | k], whole);
    }
  }
}

// ntt_inverse_chunk_stages: the first log_chunk inverse stages (strides < C) on contiguous
// chunks (registers + shared memory). When log_chunk == log_n this is the whole inverse
// transform and the output is multiplied by N^-1 and canonical; otherwise the output is lazy
// [0, 2q). Axis [batch, limb, coeff]. In: canonical. May run in place. With a row-skip table
// (skipped_row) grid rows count the transformed rows, as in the forward kernels.
// Launch: grid (N / C, limbs, batch) ((batch, N / C, limbs) from FHE_NTT_BATCH_FAST_LOG_N), block
// C >> FHE_LV (3 <= log_chunk <= 12), dynamic shared memory (C + C / 16) * 8 bytes.
// ntt_inverse_chunk_stages_v4: the same with 4 coefficients per thread (block C / 4; as
// ntt_forward_chunk_stages_v4).
template <int LV, bool F64_ONLY = false>
__device__ __forceinline__ void inverse_chunk_stages(const u64* in, u64* out, const int* FHE_RO rowmap,
                                                     const u64* FHE_RO consts, const u64* FHE_RO itw2,
                                                     const int* FHE_RO skip, int num_moduli, int log_n,
                                                     int log_chunk, i64 in_bs, i64 out_bs) {
  extern __shared__ u64 sm[];
  const int N = 1 << log_n;
  const int tid = threadIdx.x;
  const ChunkCoords at = chunk_coords(log_n);
  const int limb = skipped_row(skip, at.entry, at.limb);
  if (limb < 0) return;  // uniform per block: before any barrier
  const int id = rowmap[limb];
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const int base = at.chunk << log_chunk;
  const u64* src = in + at.entry * in_bs + (i64)limb * N + base;
  u64* dst = out + at.entry * out_bs + (i64)limb * N + base;
  const TwiddleRow w = twiddle_row(itw2, num_moduli, log_n, id);
  const bool whole = log_chunk == log_n;
  const u64 ninv = whole ? consts[FHE_C_NINV * num_moduli + id] : 0;
  const u64 ninv_sh = whole ? consts[FHE_C_NINV_SH * num_moduli + id] : 0;
#define FHE_INV(LC) inverse_chunk<LV, LC>(src, dst, sm, tid, log_n, base, ar.row(w), ar, whole)
  if constexpr (F64_ONLY) {
    const InverseArithF64 ar(q, ninv, ninv_sh);
    FHE_F64_CHUNK_DISPATCH(FHE_INV);
  } else {
    FHE_WITH_ROW_ARITH(InverseArithF64, InverseArithU64, FHE_NTT_F64, q, (q, ninv, ninv_sh), FHE_CHUNK_DISPATCH(FHE_INV));
  }
#undef FHE_INV
}
extern "C" __global__ void FHE_NTT_CHUNK_BOUNDS ntt_inverse_chunk_stages(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO itw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  inverse_chunk_stages<FHE_LV>(in, out, rowmap, consts, itw2, skip, num_moduli, log_n, log_chunk, in_bs, out_bs);
}
// ntt_inverse_chunk_stages_f64: the same for rows whose primes are all below F64_MAX_Q (as
// ntt_forward_chunk_stages_f64).
extern "C" __global__ void FHE_NTT_F64_CHUNK_BOUNDS ntt_inverse_chunk_stages_f64(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO itw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  inverse_chunk_stages<FHE_LV, true>(in, out, rowmap, consts, itw2, skip, num_moduli, log_n, log_chunk, in_bs,
    out_bs);
}
extern "C" __global__ void FHE_NTT_V4_BOUNDS ntt_inverse_chunk_stages_v4(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO itw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  inverse_chunk_stages<2>(in, out, rowmap, consts, itw2, skip, num_moduli, log_n, log_chunk, in_bs, out_bs);
}
#undef FHE_CHUNK_DISPATCH

template <int K, class A>
__device__ __forceinline__ void inverse_columns_body(const u64* in, u64* out, const A& ar, const typename A::TW* itw,
                                                     int log_n, int log_chunk, int j) {
  typename A::T v[1 << K];
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) v[c] = ar.column_from_word(in[(c << log_chunk) + j]);
  inverse_column_stages<K>(v, itw, ar, log_n);
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) out[(c << log_chunk) + j] = ar.output(v[c], true);
}

template <int K, class A>
__device__ __forceinline__ void inverse_columns_body_x2(const u64* in, u64* out, const A& ar,
                                                        const typename A::TW* itw, int log_n, int log_chunk, int j,
                                                        int h) {
  constexpr int H = 1 << (K - 1);
  typename A::T a[H / 2], b[H / 2];
  inverse_columns_load_x2<K>(in, a, b, itw, ar, log_n, log_chunk, j, h);
#pragma unroll
  for (int k = 0; k < H / 2; ++k) {  // pair i = 2k + h: x[i], x[i + H]
    out[((2 * k + h) << log_chunk) + j] = ar.output(a[k], true);
    out[((2 * k + h + H) << log_chunk) + j] = ar.output(b[k], true);
  }
}

// Column j's inverse column stages (X2: lane h of two a column), then N^-1, in the row's
// arithmetic (FHE_NTT_F64_COLUMN: float64 below F64_MAX_Q, from x - q; canonical out).
template <int K, bool X2>
__device__ __forceinline__ void inverse_columns(const ColumnRow& r, u64 ninv, u64 ninv_sh, int log_n, int log_chunk,
                                                int j, int h) {
  if constexpr (X2)
    FHE_WITH_ROW_ARITH(InverseArithF64, InverseArithU64, FHE_NTT_F64_COLUMN, r.q, (r.q, ninv, ninv_sh),
                       (inverse_columns_body_x2<K>(r.src, r.dst, ar, ar.row(r.w), log_n, log_chunk, j, h)));
  else
    FHE_WITH_ROW_ARITH(InverseArithF64, InverseArithU64, FHE_NTT_F64_COLUMN, r.q, (r.q, ninv, ninv_sh),
                       (inverse_columns_body<K>(r.src, r.dst, ar, ar.row(r.w), log_n, log_chunk, j)));
}

// ntt_inverse_column_stages: the last K = log_n - log_chunk inverse stages (strides >= C),
// then the factor N^-1. Axis [batch, limb, coeff]. In: lazy [0, 2q). Out: canonical.
// Launch: grid (ceil(C / block), limbs, batch), block 128; one thread per column j < C; with
// a row-skip table (skipped_row) grid y counts the transformed rows.
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_inverse_column_stages(const u64* in, u64* out, const int* FHE_RO rowmap,
                                                     const u64* FHE_RO consts, const u64* FHE_RO itw2,
                                                     const int* FHE_RO skip, int num_moduli, int log_n,
                                                     int log_chunk, i64 in_bs, i64 out_bs) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = skipped_row(skip, blockIdx.z, blockIdx.y);
  if (j >= (1 << log_chunk) || y < 0) return;
  const ColumnRow r = column_row(in, out, rowmap, consts, itw2, num_moduli, log_n, in_bs, out_bs, y);
  const u64 ninv = consts[FHE_C_NINV * num_moduli + r.id];
  const u64 ninv_sh = consts[FHE_C_NINV_SH * num_moduli + r.id];
  switch (log_n - log_chunk) {
    case 1: inverse_columns<1, false>(r, ninv, ninv_sh, log_n, log_chunk, j, 0); break;
    case 2: inverse_columns<2, false>(r, ninv, ninv_sh, log_n, log_chunk, j, 0); break;
    case 3: inverse_columns<3, false>(r, ninv, ninv_sh, log_n, log_chunk, j, 0); break;
    case 4: inverse_columns<4, false>(r, ninv, ninv_sh, log_n, log_chunk, j, 0); break;
    default: break;
  }
}

// ntt_inverse_column_stages_x2: ntt_inverse_column_stages with two threads per column (lanes
// 2j and 2j + 1; inverse_column_stages_x2), for 2 <= K <= 4. Same layout and ranges. Launch as
// ntt_forward_column_stages_x2.
extern "C" __global__ void FHE_NTT_COLUMN_BOUNDS ntt_inverse_column_stages_x2(const u64* in, u64* out,
    const int* FHE_RO rowmap, const u64* FHE_RO consts, const u64* FHE_RO itw2, const int* FHE_RO skip,
    int num_moduli, int log_n, int log_chunk, i64 in_bs, i64 out_bs) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = t >> 1;
  const int h = t & 1;
  const int y = skipped_row(skip, blockIdx.z, blockIdx.y);
  if (j >= (1 << log_chunk) || y < 0) return;  // uniform per warp (launch contract)
  const ColumnRow r = column_row(in, out, rowmap, consts, itw2, num_moduli, log_n, in_bs, out_bs, y);
  const u64 ninv = consts[FHE_C_NINV * num_moduli + r.id];
  const u64 ninv_sh = consts[FHE_C_NINV_SH * num_moduli + r.id];
  switch (log_n - log_chunk) {
    case 2: inverse_columns<2, true>(r, ninv, ninv_sh, log_n, log_chunk, j, h); break;
    case 3: inverse_columns<3, true>(r, ninv, ninv_sh, log_n, log_chunk, j, h); break;
    case 4: inverse_columns<4, true>(r, ninv, ninv_sh, log_n, log_chunk, j, h); break;
    default: break;
  }
}
