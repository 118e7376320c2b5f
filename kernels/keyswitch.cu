// Hybrid key switching: ModUp (balanced fast base conversion of each digit), key inner
// product (optionally through the NTT-domain Galois permutation) and rounding ModDown.
//
// Notation: L = Q rows of the input (`rows`), K = P primes, R = L + K output rows
// (`rows + p_rows`, rowmap of length R; rowmap[0..L) are the Q rows). D = active digits.
#include "modarith.cuh"
#include "ntt_stages.cuh"

using namespace fhe;

// ModUp tables of one rows tuple (built on the host, see cupy_backend.modup_tables):
//   dsize[d]                  number of primes of active digit d (<= dstride)
//   cols[d * dstride + j]     input limb (position in rows) of the j-th prime of digit d (0-padded)
//   selfidx[d * R + r]        j if output row r is prime j of digit d, else -1
//   wtab[(d * dstride + j) * R + r]  (Q_D / q_j mod m_r) * 2^64 mod m_r   (Montgomery form)
//   negc[d * R + r]           (-Q_D) * 2^64 mod m_r                       (Montgomery form)
// y holds (c_j * (Q_D / q_j)^-1 mod q_j) per input limb (rns_mul_scalar beforehand).
//
// Base conversion of one coefficient into output row r (not a row of digit d):
//   digit[r] = sum_j centered(y_j, q_j) * (Q_D / q_j) mod m_r
//            = REDC( sum_j y_j * wtab[j, r] + cnt * negc[r] )      (cnt = #{j : y_j > q_j / 2})
// since centered(y_j) * (Q_D / q_j) = y_j * (Q_D / q_j) - Q_D for the negative terms. The sum is
// accumulated exactly in 128 bits (every product < 2^122), the high word is reduced mod m_r
// every 16 terms and once at the end (adds multiples of 2^64 * m_r: same residue), then one
// REDC (x < m_r * 2^64) gives the canonical residue: bit-identical to any exact reduction.
//
// Each thread computes RB consecutive output rows r0 .. r0 + RB - 1 of one coefficient from one
// load of each y_j. The block's constants are staged in shared memory (u64 words, S = dstride):
//   [0, RB*S)        weights sw[rb * S + j] = wtab[(d * S + j) * R + r0 + rb]
//   [RB*S, +S)       thresholds q_j >> 1
//   [RB*S + S, +S)   input offsets cols[j] * n
//   [RB*S + 2S, +6RB) per row rb: q, qinv, barrett, negc, self offset (cols[s] * n or ~0), prime id
// Rows r0 + rb >= R (last group) are computed on row R - 1 and not stored.
__device__ __forceinline__ int modup_smem_words(int rb, int dstride) { return rb * dstride + 2 * dstride + 6 * rb; }

__device__ __forceinline__ void modup_stage_tables(u64* sm, int RB, int d, int r0, int n, int R, int dstride,
                                                   const int* dsize, const int* cols, const int* selfidx,
                                                   const u64* wtab, const u64* negc, const int* rowmap,
                                                   const u64* consts, int num_moduli) {
  const int S = dstride;
  const int count = dsize[d];
  for (int i = threadIdx.x; i < RB * S; i += blockDim.x) {
    const int rb = i / S, j = i - rb * S;
    const int r = min(r0 + rb, R - 1);
    sm[i] = j < count ? wtab[((i64)d * S + j) * R + r] : 0;
  }
  for (int j = threadIdx.x; j < S; j += blockDim.x) {
    const int col = cols[d * S + j];
    sm[RB * S + j] = consts[FHE_C_Q * num_moduli + rowmap[col]] >> 1;
    sm[RB * S + S + j] = (u64)((i64)col * n);
  }
  if (threadIdx.x < RB) {
    const int rb = threadIdx.x;
    const int r = min(r0 + rb, R - 1);
    const int id = rowmap[r];
    u64* pr = sm + RB * S + 2 * S;
    pr[rb] = consts[FHE_C_Q * num_moduli + id];
    pr[RB + rb] = consts[FHE_C_QINV * num_moduli + id];
    pr[2 * RB + rb] = consts[FHE_C_BARRETT * num_moduli + id];
    pr[3 * RB + rb] = negc[d * R + r];
    const int s = selfidx[d * R + r];
    pr[4 * RB + rb] = s >= 0 ? (u64)((i64)cols[d * S + s] * n) : ~0ULL;
    pr[5 * RB + rb] = (u64)id;
  }
  __syncthreads();
}

// The RB output rows of the coefficient at offset `pos` (= batch base + coefficient index).
// In canonical, out canonical.
template <int RB>
__device__ __forceinline__ void modup_extend_rows(const u64* c, const u64* y, i64 pos, const u64* sm, int count,
                                                  int S, u64 (&out)[RB]) {
  const u64* sthr = sm + RB * S;
  const u64* soff = sthr + S;
  const u64* pr = soff + S;
  u64 lo[RB], hi[RB];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) lo[rb] = hi[rb] = 0;
  u64 cnt = 0;
  for (int j = 0; j < count; ++j) {
    const u64 yv = y[pos + (i64)soff[j]];
    cnt += yv > sthr[j] ? 1 : 0;
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) mad_wide(lo[rb], hi[rb], yv, sm[rb * S + j]);
    if ((j & 15) == 15) {
#pragma unroll
      for (int rb = 0; rb < RB; ++rb) hi[rb] = reduce_u64(hi[rb], pr[rb], pr[2 * RB + rb]);
    }
  }
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) {
    const u64 q = pr[rb];
    mad_wide(lo[rb], hi[rb], cnt, pr[3 * RB + rb]);
    const u64 h = reduce_u64(hi[rb], q, pr[2 * RB + rb]);
    const u64 v = redc_wide(lo[rb], h, q, pr[RB + rb]);
    const u64 so = pr[4 * RB + rb];
    out[rb] = so != ~0ULL ? c[pos + (i64)so] : v;
  }
}

// Output rows r0 .. r0 + RB - 1 of column j: values x = j + cc * C (cc < 2^K) of each row, the
// first K forward NTT stages in registers (K = 0: none), stored to dst [R, N] (this entry).
template <int K, int RB>
__device__ __forceinline__ void modup_columns_body(const u64* c, const u64* y, u64* dst, i64 base, int j,
                                                   int log_chunk, int n, int r0, int R, const u64* sm, int count,
                                                   int S, const u64* tw2) {
  const u64* pr = sm + RB * S + 2 * S;
  u64 v[RB][1 << K];
#pragma unroll
  for (int cc = 0; cc < (1 << K); ++cc) {
    u64 o[RB];
    modup_extend_rows<RB>(c, y, base + (cc << log_chunk) + j, sm, count, S, o);
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) v[rb][cc] = o[rb];
  }
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) {
    if (r0 + rb >= R) break;
    if constexpr (K > 0) {
      const i64 id = (i64)pr[5 * RB + rb];
      forward_column_stages<K>(v[rb], reinterpret_cast<const u64x2*>(tw2) + id * n, pr[rb]);
    }
    u64* row = dst + (i64)(r0 + rb) * n;
#pragma unroll
    for (int cc = 0; cc < (1 << K); ++cc) row[(cc << log_chunk) + j] = v[rb][cc];
  }
}

// keyswitch_modup_extend: digits (coefficient domain) for every active digit and output row.
// Axis order: c, y [batch, L, coeff] (contiguous); out [D, batch, R, coeff].
// In canonical, out canonical. Launch: grid (ceil(N / 256), ceil(R / rb), D * batch), block 256,
// rb in {2, 4} output rows per thread, dynamic shared memory modup_smem_words(rb, dstride) * 8 bytes.
extern "C" __global__ void keyswitch_modup_extend(const u64* c, const u64* y, u64* out, const int* rowmap,
                                                  const u64* consts, const int* dsize, const int* cols,
                                                  const int* selfidx, const u64* wtab, const u64* negc,
                                                  int num_moduli, int n, int L, int R, int batch, int dstride,
                                                  int rb) {
  extern __shared__ u64 sm[];
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  const int r0 = blockIdx.y * rb;
  const int d = blockIdx.z / batch;
  const int b = blockIdx.z % batch;
  modup_stage_tables(sm, rb, d, r0, n, R, dstride, dsize, cols, selfidx, wtab, negc, rowmap, consts, num_moduli);
  if (k >= n) return;
  const i64 base = (i64)b * L * n;
  u64* dst = out + (i64)blockIdx.z * R * n;
  const int count = dsize[d];
  if (rb == 2) modup_columns_body<0, 2>(c, y, dst, base, k, 0, n, r0, R, sm, count, dstride, nullptr);
  else modup_columns_body<0, 4>(c, y, dst, base, k, 0, n, r0, R, sm, count, dstride, nullptr);
}

// Shared body of the two fused entry points below: KMIN <= K = log_n - log_chunk <= KMAX.
template <int KMIN, int KMAX>
__device__ __forceinline__ void modup_extend_columns_kernel(const u64* c, const u64* y, u64* out, const int* rowmap,
                                                            const u64* consts, const int* dsize, const int* cols,
                                                            const int* selfidx, const u64* wtab, const u64* negc,
                                                            const u64* tw2, int num_moduli,
                                                            int log_n, int log_chunk, int L, int R, int batch,
                                                            int dstride, int z_offset) {
  constexpr int RB = 2;  // rows per thread: 4 would exceed 128 registers with K >= 3
  extern __shared__ u64 sm[];
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int n = 1 << log_n;
  const int r0 = blockIdx.y * RB;
  const int zg = blockIdx.z + z_offset;  // global (digit, batch) index
  const int d = zg / batch;
  const int b = zg % batch;
  modup_stage_tables(sm, RB, d, r0, n, R, dstride, dsize, cols, selfidx, wtab, negc, rowmap, consts, num_moduli);
  if (j >= (1 << log_chunk)) return;
  const i64 base = (i64)b * L * n;
  u64* dst = out + (i64)blockIdx.z * R * n;
  const int count = dsize[d];
  const int K = log_n - log_chunk;
#define FHE_MODUP_COLUMNS(KK)                                                                                  \
  if (KK >= KMIN && KK <= KMAX && K == KK)                                                                     \
  modup_columns_body<(KK >= KMIN && KK <= KMAX ? KK : KMIN), RB>(c, y, dst, base, j, log_chunk, n, r0, R, sm,  \
                                                                 count, dstride, tw2)
  FHE_MODUP_COLUMNS(1);
  FHE_MODUP_COLUMNS(2);
  FHE_MODUP_COLUMNS(3);
  FHE_MODUP_COLUMNS(4);
#undef FHE_MODUP_COLUMNS
}

// keyswitch_modup_extend_ntt_column_stages: keyswitch_modup_extend fused with the first
// K = log_n - log_chunk forward NTT stages (ntt_forward_column_stages), 1 <= K <= 3; finish
// with ntt_forward_chunk_stages on `out`. Axis order as keyswitch_modup_extend.
// `out` points at (digit, batch) entry z_offset: a launch may cover a slice [z_offset, z_offset +
// gridDim.z) of the D * batch entries (L2-sized groups).
// In canonical; out harvey [0, 4q). Launch: grid (ceil(C / block), ceil(R / 2), entries),
// block 128 or 64 (2 output rows per thread), dynamic shared memory modup_smem_words(2, dstride) * 8 bytes.
extern "C" __global__ void keyswitch_modup_extend_ntt_column_stages(
    const u64* c, const u64* y, u64* out, const int* rowmap, const u64* consts, const int* dsize, const int* cols,
    const int* selfidx, const u64* wtab, const u64* negc, const u64* tw2, int num_moduli,
    int log_n, int log_chunk, int L, int R, int batch, int dstride, int z_offset) {
  modup_extend_columns_kernel<1, 3>(c, y, out, rowmap, consts, dsize, cols, selfidx, wtab, negc, tw2,
                                    num_moduli, log_n, log_chunk, L, R, batch, dstride, z_offset);
}

// keyswitch_modup_extend_ntt_column_stages_k4: the same for K = 4 (its own entry point so the
// K <= 3 instantiations do not raise its register count: 128 instead of 168).
extern "C" __global__ void keyswitch_modup_extend_ntt_column_stages_k4(
    const u64* c, const u64* y, u64* out, const int* rowmap, const u64* consts, const int* dsize, const int* cols,
    const int* selfidx, const u64* wtab, const u64* negc, const u64* tw2, int num_moduli,
    int log_n, int log_chunk, int L, int R, int batch, int dstride, int z_offset) {
  modup_extend_columns_kernel<4, 4>(c, y, out, rowmap, consts, dsize, cols, selfidx, wtab, negc, tw2,
                                    num_moduli, log_n, log_chunk, L, R, batch, dstride, z_offset);
}

// keyswitch_inner_product: acc_k[b, r] = sum_d digit_d[b, r, perm(i)] * key[keydig[d], k, rowmap[r]]
// (Montgomery product: the key is in Montgomery form), k = 0, 1, NTT domain.
// Axis order: digits [D, batch, R, coeff]; key [dnum, 2, key_rows, coeff] (key row = prime id);
// out [2, batch, R, coeff]. perm == nullptr means identity (no Galois gather).
// In canonical, out canonical. Launch: grid (ceil(N / 256), R, batch), block 256.
extern "C" __global__ void keyswitch_inner_product(const u64* digits, const u64* key, u64* out, const int* rowmap,
                                                   const u64* consts, const int* keydig, const int* perm,
                                                   int num_moduli, int n, int R, int batch, int num_digits,
                                                   int key_rows) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int r = blockIdx.y;
  const int b = blockIdx.z;
  const int id = rowmap[r];
  const Modulus mr = load_modulus(consts, num_moduli, id);
  const int src = perm ? perm[k] : k;
  const i64 digit_stride = (i64)batch * R * n;
  const u64* dig = digits + ((i64)b * R + r) * n + src;
  u64 acc0 = 0, acc1 = 0;
  for (int d = 0; d < num_digits; ++d) {
    const u64 x = dig[d * digit_stride];
    const i64 kbase = ((i64)keydig[d] * 2 * key_rows + id) * n + k;
    acc0 = add_mod(acc0, mont_mul(x, key[kbase], mr.q, mr.qinv), mr.q);
    acc1 = add_mod(acc1, mont_mul(x, key[kbase + (i64)key_rows * n], mr.q, mr.qinv), mr.q);
  }
  const i64 o = ((i64)b * R + r) * n + k;
  out[o] = acc0;
  out[digit_stride + o] = acc1;
}

// moddown_extension: e_i = sum_j centered(x_pj * (P/p_j)^-1 mod p_j, p_j) * (P / p_j) mod q_i
// for one coefficient k (x points at row 0 of one [R, coeff] polynomial plus k; its K P rows
// L..R-1 are read, in the coefficient domain). Table md as keyswitch_moddown_rounding.
__device__ __forceinline__ u64 moddown_extension(const u64* x, const int* rowmap, const u64* consts,
                                                 const u64* md, int num_moduli, int n, int L, int K, int i,
                                                 const Modulus& mq) {
  const u64* wtab = md + 2 * K;
  const u64* pmod = wtab + K * L;
  u64 e = 0;
  for (int j = 0; j < K; ++j) {
    const u64 pj = consts[FHE_C_Q * num_moduli + rowmap[L + j]];
    const u64 yv = shoup_mul(x[(i64)(L + j) * n], md[j], md[K + j], pj);
    u64 t = mont_mul(yv, wtab[j * L + i], mq.q, mq.qinv);
    if (is_negative_centered(yv, pj)) t = sub_mod(t, pmod[i], mq.q);
    e = add_mod(e, t, mq.q);
  }
  return e;
}

// keyswitch_moddown_rounding: y_i = (x_i - e_i) * P^-1 mod q_i with
// e_i = sum_j centered(x_pj * (P/p_j)^-1 mod p_j, p_j) * (P / p_j) mod q_i (coefficient domain).
// Axis order: in [batch, R, coeff] (Q rows then the K P rows); out [batch, L, coeff].
// Table md (u64): [0, K) (P/p_j)^-1 mod p_j; [K, 2K) Shoup companions; [2K, 2K + K*L)
// (P/p_j mod q_i) * 2^64 mod q_i at j * L + i; then P mod q_i [L]; P^-1 mod q_i [L]; Shoup [L].
// In canonical, out canonical. Launch: grid (ceil(N / 256), L, batch), block 256.
extern "C" __global__ void keyswitch_moddown_rounding(const u64* in, u64* out, const int* rowmap, const u64* consts,
                                                      const u64* md, int num_moduli, int n, int L, int K) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int i = blockIdx.y;
  const i64 z = blockIdx.z;
  const int R = L + K;
  const Modulus mq = load_modulus(consts, num_moduli, rowmap[i]);
  const u64* x = in + z * R * n + k;
  const u64* pmod = md + 2 * K + K * L;
  const u64 e = moddown_extension(x, rowmap, consts, md, num_moduli, n, L, K, i, mq);
  const u64 d = sub_mod(x[(i64)i * n], e, mq.q);
  out[(z * L + i) * n + k] = shoup_mul(d, pmod[L + i], pmod[2 * L + i], mq.q);
}

// keyswitch_moddown_extend: the first half of the NTT-domain ModDown: e[z, i] =
// moddown_extension of the coefficient-domain P rows of in[z] (its Q rows are not read; they
// stay in the NTT domain). Axis order: in [batch, R, coeff], e [batch, L, coeff]. Table md as
// keyswitch_moddown_rounding. In canonical, e canonical. Launch: grid (ceil(N / 256), L, batch),
// block 256.
extern "C" __global__ void keyswitch_moddown_extend(const u64* in, u64* e, const int* rowmap, const u64* consts,
                                                    const u64* md, int num_moduli, int n, int L, int K) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int i = blockIdx.y;
  const i64 z = blockIdx.z;
  const Modulus mq = load_modulus(consts, num_moduli, rowmap[i]);
  e[(z * L + i) * n + k] = moddown_extension(in + z * (L + K) * n + k, rowmap, consts, md, num_moduli, n, L, K,
                                             i, mq);
}

// keyswitch_moddown_combine_ntt: the second half of the NTT-domain ModDown, for E entries of
// (y0, y1): out[z, i] = (x[z, i] - e[z, i]) * P^-1 mod q_i with x the NTT-domain Q rows of the
// inner product and e = NTT(keyswitch_moddown_extend); equal to the NTT of
// keyswitch_moddown_rounding's output (both steps are linear mod q_i). With c0 (not null),
// component 0 of entry ent also gets c0[b, i, perms[ent, k]] (the NTT-domain automorphism of
// c0: the c0 half of a hoisted rotation).
// Axis order: x [E, 2, batch, R, coeff]; e and out [E, 2, batch, L, coeff] (z = (ent * 2 +
// comp) * batch + b); c0 [batch, L, coeff]; perms [E, coeff]. Table md as
// keyswitch_moddown_rounding. In canonical, out canonical; out may alias e.
// Launch: grid (ceil(N / 256), L, E * 2 * batch), block 256.
extern "C" __global__ void keyswitch_moddown_combine_ntt(const u64* x, const u64* e, u64* out, const int* rowmap,
                                                         const u64* consts, const u64* md, const u64* c0,
                                                         const int* perms, int num_moduli, int n, int L, int K,
                                                         int batch) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int i = blockIdx.y;
  const i64 z = blockIdx.z;
  const Modulus mq = load_modulus(consts, num_moduli, rowmap[i]);
  const u64* pmod = md + 2 * K + K * L;
  const i64 o = (z * L + i) * n + k;
  const u64 d = sub_mod(x[(z * (L + K) + i) * n + k], e[o], mq.q);
  u64 y = shoup_mul(d, pmod[L + i], pmod[2 * L + i], mq.q);
  const int ent = (int)(z / (2 * batch));
  const int comp = (int)((z / batch) % 2);
  if (c0 != nullptr && comp == 0) {
    const i64 b = z % batch;
    y = add_mod(y, c0[(b * L + i) * n + perms[(i64)ent * n + k]], mq.q);
  }
  out[o] = y;
}

// keyswitch_inner_product_many: keyswitch_inner_product for E (key, Galois permutation)
// pairs of one set of digits in one launch (batched hoisted rotations):
// acc[e, k, b, r] = sum_d digit_d[b, r, perms[e, i]] * key_e[keydig[d], k, rowmap[r]].
// key_ptrs[e] = device address of key e ([dnum, 2, key_rows, coeff], contiguous);
// perms [E, coeff] (identity rows for no permutation).
// Axis order: digits [D, batch, R, coeff]; out [E, 2, batch, R, coeff].
// In canonical, out canonical. Launch: grid (ceil(N / 256), R, E * batch), block 256.
extern "C" __global__ void keyswitch_inner_product_many(const u64* digits, const u64* key_ptrs, u64* out,
                                                        const int* rowmap, const u64* consts, const int* keydig,
                                                        const int* perms, int num_moduli, int n, int R, int batch,
                                                        int num_digits, int key_rows) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int r = blockIdx.y;
  const int e = blockIdx.z / batch;
  const int b = blockIdx.z % batch;
  const int id = rowmap[r];
  const Modulus mr = load_modulus(consts, num_moduli, id);
  const u64* key = reinterpret_cast<const u64*>(key_ptrs[e]);
  const int src = perms[(i64)e * n + k];
  const i64 digit_stride = (i64)batch * R * n;
  const u64* dig = digits + ((i64)b * R + r) * n + src;
  u64 acc0 = 0, acc1 = 0;
  for (int d = 0; d < num_digits; ++d) {
    const u64 x = dig[d * digit_stride];
    const i64 kbase = ((i64)keydig[d] * 2 * key_rows + id) * n + k;
    acc0 = add_mod(acc0, mont_mul(x, key[kbase], mr.q, mr.qinv), mr.q);
    acc1 = add_mod(acc1, mont_mul(x, key[kbase + (i64)key_rows * n], mr.q, mr.qinv), mr.q);
  }
  u64* o = out + (i64)e * 2 * digit_stride + ((i64)b * R + r) * n + k;
  o[0] = acc0;
  o[digit_stride] = acc1;
}
