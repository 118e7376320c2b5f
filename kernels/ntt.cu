// Negacyclic forward / inverse NTT over batched RNS polynomials.
//
// Axis order: [batch, limb, coeff]; polynomial (z, y) starts at z * batch_stride + y * N
// (limbs contiguous inside one batch entry). Row y is prime id rowmap[y].
// Grid: x = coefficient block, y = limb, z = batch entry (z <= 65535).
// One transform = 1 launch for N <= chunk (4096), else 2 launches (column + chunk stages).
#include "modarith.cuh"
#include "ntt_stages.cuh"

using namespace fhe;

template <int K>
__device__ __forceinline__ void forward_columns_body(const u64* in, u64* out, u64 q, const u64* tw,
                                                     const u64* tw_sh, int log_chunk, int j) {
  const int C = 1 << log_chunk;
  u64 v[1 << K];
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) v[c] = in[(c << log_chunk) + j];
  forward_column_stages<K>(v, tw, tw_sh, q);
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) out[c * C + j] = v[c];
}

// ntt_forward_column_stages: the first K = log_n - log_chunk forward stages (strides >= C).
// Axis [batch, limb, coeff]. In: [0, 4q) (canonical accepted). Out: harvey [0, 4q).
// Launch: grid (ceil(C / block), limbs, batch), block 128; one thread per column j < C.
extern "C" __global__ void ntt_forward_column_stages(const u64* in, u64* out, const int* rowmap,
                                                     const u64* consts, const u64* tw, const u64* tw_sh,
                                                     int num_moduli, int log_n, int log_chunk, i64 in_bs,
                                                     i64 out_bs) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= (1 << log_chunk)) return;
  const int N = 1 << log_n;
  const int id = rowmap[blockIdx.y];
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const u64* src = in + blockIdx.z * in_bs + (i64)blockIdx.y * N;
  u64* dst = out + blockIdx.z * out_bs + (i64)blockIdx.y * N;
  const u64* w = tw + (i64)id * N;
  const u64* wsh = tw_sh + (i64)id * N;
  switch (log_n - log_chunk) {
    case 1: forward_columns_body<1>(src, dst, q, w, wsh, log_chunk, j); break;
    case 2: forward_columns_body<2>(src, dst, q, w, wsh, log_chunk, j); break;
    case 3: forward_columns_body<3>(src, dst, q, w, wsh, log_chunk, j); break;
    case 4: forward_columns_body<4>(src, dst, q, w, wsh, log_chunk, j); break;
    case 5: forward_columns_body<5>(src, dst, q, w, wsh, log_chunk, j); break;
    default: break;
  }
}

// ntt_forward_chunk_stages: the last log_chunk forward stages on contiguous chunks of
// C = 2^log_chunk coefficients in shared memory; output canonical.
// Axis [batch, limb, coeff]. In: [0, 4q) (output of the column stages, or canonical when
// log_chunk == log_n). Out: canonical [0, q). May run in place (in == out).
// Launch: grid (N / C, limbs, batch), block min(512, C / 2), dynamic shared memory C * 8 bytes.
extern "C" __global__ void ntt_forward_chunk_stages(const u64* in, u64* out, const int* rowmap,
                                                    const u64* consts, const u64* tw, const u64* tw_sh,
                                                    int num_moduli, int log_n, int log_chunk, i64 in_bs,
                                                    i64 out_bs) {
  extern __shared__ u64 sm[];
  const int N = 1 << log_n;
  const int C = 1 << log_chunk;
  const int chunk = blockIdx.x;
  const int id = rowmap[blockIdx.y];
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const u64 two_q = 2 * q;
  const u64* src = in + blockIdx.z * in_bs + (i64)blockIdx.y * N + ((i64)chunk << log_chunk);
  u64* dst = out + blockIdx.z * out_bs + (i64)blockIdx.y * N + ((i64)chunk << log_chunk);
  for (int i = threadIdx.x; i < C; i += blockDim.x) sm[i] = src[i];
  __syncthreads();
  forward_chunk_stages(sm, chunk, log_n, log_chunk, tw + (i64)id * N, tw_sh + (i64)id * N, q);
  for (int i = threadIdx.x; i < C; i += blockDim.x) dst[i] = reduce_from_4q(sm[i], q, two_q);
}

// ntt_inverse_chunk_stages: the first log_chunk inverse stages (strides < C) on contiguous
// chunks in shared memory. When log_chunk == log_n this is the whole inverse transform and
// the output is multiplied by N^-1 and canonical; otherwise the output is lazy [0, 2q).
// Axis [batch, limb, coeff]. In: canonical. May run in place.
// Launch: grid (N / C, limbs, batch), block min(512, C / 2), dynamic shared memory C * 8 bytes.
extern "C" __global__ void ntt_inverse_chunk_stages(const u64* in, u64* out, const int* rowmap,
                                                    const u64* consts, const u64* itw, const u64* itw_sh,
                                                    int num_moduli, int log_n, int log_chunk, i64 in_bs,
                                                    i64 out_bs) {
  extern __shared__ u64 sm[];
  const int N = 1 << log_n;
  const int C = 1 << log_chunk;
  const int chunk = blockIdx.x;
  const int id = rowmap[blockIdx.y];
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const u64* src = in + blockIdx.z * in_bs + (i64)blockIdx.y * N + ((i64)chunk << log_chunk);
  u64* dst = out + blockIdx.z * out_bs + (i64)blockIdx.y * N + ((i64)chunk << log_chunk);
  for (int i = threadIdx.x; i < C; i += blockDim.x) sm[i] = src[i];
  __syncthreads();
  inverse_chunk_stages(sm, chunk, log_n, log_chunk, itw + (i64)id * N, itw_sh + (i64)id * N, q);
  if (log_chunk == log_n) {
    const u64 ninv = consts[FHE_C_NINV * num_moduli + id];
    const u64 ninv_sh = consts[FHE_C_NINV_SH * num_moduli + id];
    for (int i = threadIdx.x; i < C; i += blockDim.x) dst[i] = shoup_mul(sm[i], ninv, ninv_sh, q);
  } else {
    for (int i = threadIdx.x; i < C; i += blockDim.x) dst[i] = sm[i];
  }
}

template <int K>
__device__ __forceinline__ void inverse_columns_body(const u64* in, u64* out, u64 q, const u64* itw,
                                                     const u64* itw_sh, u64 ninv, u64 ninv_sh, int log_n,
                                                     int log_chunk, int j) {
  u64 v[1 << K];
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) v[c] = in[(c << log_chunk) + j];
  inverse_column_stages<K>(v, itw, itw_sh, q, log_n);
#pragma unroll
  for (int c = 0; c < (1 << K); ++c) out[(c << log_chunk) + j] = shoup_mul(v[c], ninv, ninv_sh, q);
}

// ntt_inverse_column_stages: the last K = log_n - log_chunk inverse stages (strides >= C),
// then the factor N^-1. Axis [batch, limb, coeff]. In: lazy [0, 2q). Out: canonical.
// Launch: grid (ceil(C / block), limbs, batch), block 128; one thread per column j < C.
extern "C" __global__ void ntt_inverse_column_stages(const u64* in, u64* out, const int* rowmap,
                                                     const u64* consts, const u64* itw, const u64* itw_sh,
                                                     int num_moduli, int log_n, int log_chunk, i64 in_bs,
                                                     i64 out_bs) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= (1 << log_chunk)) return;
  const int N = 1 << log_n;
  const int id = rowmap[blockIdx.y];
  const u64 q = consts[FHE_C_Q * num_moduli + id];
  const u64 ninv = consts[FHE_C_NINV * num_moduli + id];
  const u64 ninv_sh = consts[FHE_C_NINV_SH * num_moduli + id];
  const u64* src = in + blockIdx.z * in_bs + (i64)blockIdx.y * N;
  u64* dst = out + blockIdx.z * out_bs + (i64)blockIdx.y * N;
  const u64* w = itw + (i64)id * N;
  const u64* wsh = itw_sh + (i64)id * N;
  switch (log_n - log_chunk) {
    case 1: inverse_columns_body<1>(src, dst, q, w, wsh, ninv, ninv_sh, log_n, log_chunk, j); break;
    case 2: inverse_columns_body<2>(src, dst, q, w, wsh, ninv, ninv_sh, log_n, log_chunk, j); break;
    case 3: inverse_columns_body<3>(src, dst, q, w, wsh, ninv, ninv_sh, log_n, log_chunk, j); break;
    case 4: inverse_columns_body<4>(src, dst, q, w, wsh, ninv, ninv_sh, log_n, log_chunk, j); break;
    case 5: inverse_columns_body<5>(src, dst, q, w, wsh, ninv, ninv_sh, log_n, log_chunk, j); break;
    default: break;
  }
}
