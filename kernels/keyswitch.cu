// Hybrid key switching: ModUp (balanced fast base conversion of each digit), key inner
// product (optionally through the NTT-domain Galois permutation) and rounding ModDown.
//
// Notation: L = Q rows of the input (`rows`), K = P primes, R = L + K output rows
// (`rows + p_rows`, rowmap of length R; rowmap[0..L) are the Q rows). D = active digits.
#include "modarith.cuh"
#include "ntt_stages.cuh"

using namespace fhe;

// ModUp tables of one rows tuple (built on the host, see cupy_backend._ModupTables):
//   dsize[d]                  number of primes of active digit d (<= dstride)
//   cols[d * dstride + j]     input limb (position in rows) of the j-th prime of digit d
//   selfidx[d * R + r]        j if output row r is prime j of digit d, else -1
//   wtab[(d * dstride + j) * R + r]  (Q_D / q_j mod m_r) * 2^64 mod m_r   (Montgomery form)
//   qdm[d * R + r]            Q_D mod m_r
// y holds (c_j * (Q_D / q_j)^-1 mod q_j) per input limb (rns_mul_scalar beforehand).
__device__ __forceinline__ u64 modup_extend_value(const u64* c, const u64* y, i64 base, int k, int d, int r,
                                                  int n, int R, int dstride, const int* dsize, const int* cols,
                                                  const int* selfidx, const u64* wtab, const u64* qdm,
                                                  const int* rowmap, const u64* consts, int num_moduli,
                                                  const Modulus& mr) {
  const int s = selfidx[d * R + r];
  if (s >= 0) return c[base + (i64)cols[d * dstride + s] * n + k];
  const int count = dsize[d];
  const u64 qd = qdm[d * R + r];
  u64 acc = 0;
  for (int j = 0; j < count; ++j) {
    const int col = cols[d * dstride + j];
    const u64 qj = consts[FHE_C_Q * num_moduli + rowmap[col]];
    const u64 yv = y[base + (i64)col * n + k];
    u64 t = mont_mul(yv, wtab[(d * dstride + j) * R + r], mr.q, mr.qinv);
    if (is_negative_centered(yv, qj)) t = sub_mod(t, qd, mr.q);
    acc = add_mod(acc, t, mr.q);
  }
  return acc;
}

// keyswitch_modup_extend: digits (coefficient domain) for every active digit and output row.
// Axis order: c, y [batch, L, coeff] (contiguous); out [D, batch, R, coeff].
// In canonical, out canonical. Launch: grid (ceil(N / 256), R, D * batch), block 256.
extern "C" __global__ void keyswitch_modup_extend(const u64* c, const u64* y, u64* out, const int* rowmap,
                                                  const u64* consts, const int* dsize, const int* cols,
                                                  const int* selfidx, const u64* wtab, const u64* qdm,
                                                  int num_moduli, int n, int L, int R, int batch, int dstride) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int r = blockIdx.y;
  const int d = blockIdx.z / batch;
  const int b = blockIdx.z % batch;
  const Modulus mr = load_modulus(consts, num_moduli, rowmap[r]);
  const i64 base = (i64)b * L * n;
  out[((i64)blockIdx.z * R + r) * n + k] = modup_extend_value(c, y, base, k, d, r, n, R, dstride, dsize, cols,
                                                              selfidx, wtab, qdm, rowmap, consts, num_moduli, mr);
}

template <int K>
__device__ __forceinline__ void modup_columns_body(const u64* c, const u64* y, u64* dst, i64 base, int j, int d,
                                                   int r, int log_chunk, int R, int dstride, const int* dsize,
                                                   const int* cols, const int* selfidx, const u64* wtab,
                                                   const u64* qdm, const int* rowmap, const u64* consts,
                                                   int num_moduli, const Modulus& mr, const u64* tw,
                                                   const u64* tw_sh) {
  const int n = 1 << (log_chunk + K);
  u64 v[1 << K];
#pragma unroll
  for (int cc = 0; cc < (1 << K); ++cc)
    v[cc] = modup_extend_value(c, y, base, (cc << log_chunk) + j, d, r, n, R, dstride, dsize, cols, selfidx, wtab,
                               qdm, rowmap, consts, num_moduli, mr);
  forward_column_stages<K>(v, tw, tw_sh, mr.q);
#pragma unroll
  for (int cc = 0; cc < (1 << K); ++cc) dst[(cc << log_chunk) + j] = v[cc];
}

// keyswitch_modup_extend_ntt_column_stages: keyswitch_modup_extend fused with the first
// K = log_n - log_chunk forward NTT stages (ntt_forward_column_stages); finish with
// ntt_forward_chunk_stages on `out`. Axis order as keyswitch_modup_extend.
// `out` points at (digit, batch) entry z_offset: a launch may cover a slice [z_offset, z_offset +
// gridDim.z) of the D * batch entries (L2-sized groups).
// In canonical; out harvey [0, 4q). Launch: grid (ceil(C / 128), R, entries), block 128.
extern "C" __global__ void keyswitch_modup_extend_ntt_column_stages(
    const u64* c, const u64* y, u64* out, const int* rowmap, const u64* consts, const int* dsize, const int* cols,
    const int* selfidx, const u64* wtab, const u64* qdm, const u64* tw, const u64* tw_sh, int num_moduli,
    int log_n, int log_chunk, int L, int R, int batch, int dstride, int z_offset) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= (1 << log_chunk)) return;
  const int n = 1 << log_n;
  const int r = blockIdx.y;
  const int zg = blockIdx.z + z_offset;  // global (digit, batch) index
  const int d = zg / batch;
  const int b = zg % batch;
  const int id = rowmap[r];
  const Modulus mr = load_modulus(consts, num_moduli, id);
  const i64 base = (i64)b * L * n;
  u64* dst = out + ((i64)blockIdx.z * R + r) * n;
  const u64* w = tw + (i64)id * n;
  const u64* wsh = tw_sh + (i64)id * n;
#define FHE_MODUP_COLUMNS(KK)                                                                                   \
  modup_columns_body<KK>(c, y, dst, base, j, d, r, log_chunk, R, dstride, dsize, cols, selfidx, wtab, qdm, rowmap, \
                         consts, num_moduli, mr, w, wsh)
  switch (log_n - log_chunk) {
    case 1: FHE_MODUP_COLUMNS(1); break;
    case 2: FHE_MODUP_COLUMNS(2); break;
    case 3: FHE_MODUP_COLUMNS(3); break;
    case 4: FHE_MODUP_COLUMNS(4); break;
    default: break;
  }
#undef FHE_MODUP_COLUMNS
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
  const u64 d = sub_mod(x[(i64)i * n], e, mq.q);
  out[(z * L + i) * n + k] = shoup_mul(d, pmod[L + i], pmod[2 * L + i], mq.q);
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
