// Galois automorphisms X -> X^g of batched RNS polynomials.
//
// Axis order: [batch, limb, coeff]; element (z, y, k) at z * batch_stride + y * N + k.
// Index tables are precomputed on the host per (N, g) and cached on the device.
// Launch geometry: grid (ceil(N / 256), limbs, batch), block 256; one thread per output index.
#include "modarith.cuh"

using namespace fhe;

// automorphism_ntt_permute: out[k] = in[perm[k]] (bit-reversed NTT storage, pure permutation).
// In canonical, out canonical. out must not alias in.
extern "C" __global__ void automorphism_ntt_permute(const u64* in, u64* out, const int* perm, int n, i64 in_bs,
                                                    i64 out_bs) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const i64 z = blockIdx.z;
  const i64 poly = (i64)blockIdx.y * n;
  out[z * out_bs + poly + k] = in[z * in_bs + poly + perm[k]];
}

// automorphism_coefficient_signed: out[k] = (-1)^s * in[src], with src = srcmap[k] & 0x7fffffff
// and s = bit 31 of srcmap[k] (coefficient domain, X^j -> X^(j g mod 2N)).
// In canonical, out canonical. out must not alias in.
extern "C" __global__ void automorphism_coefficient_signed(const u64* in, u64* out, const unsigned* srcmap,
                                                           const int* rowmap, const u64* consts, int num_moduli,
                                                           int n, i64 in_bs, i64 out_bs) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const i64 z = blockIdx.z;
  const i64 poly = (i64)blockIdx.y * n;
  const unsigned m = srcmap[k];
  const u64 v = in[z * in_bs + poly + (m & 0x7fffffffu)];
  const u64 q = consts[FHE_C_Q * num_moduli + rowmap[blockIdx.y]];
  out[z * out_bs + poly + k] = (m >> 31) ? neg_mod(v, q) : v;
}

// automorphism_coefficient_add_many: out[e, b] += automorphism_{g_e}(in[b]) for E Galois
// elements at once (coefficient domain; srcmaps [E, coeff] as automorphism_coefficient_signed;
// the c0 half of E hoisted rotations). in [batch, L, coeff]; out entry (e, b) starts at
// e * out_es + b * out_bs. In canonical, out canonical (in place). out must not alias in.
// Launch: grid (ceil(N / 256), L, E * batch), block 256.
extern "C" __global__ void automorphism_coefficient_add_many(const u64* in, u64* out, const unsigned* srcmaps,
                                                             const int* rowmap, const u64* consts, int num_moduli,
                                                             int n, int batch, i64 in_bs, i64 out_es, i64 out_bs) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const int e = blockIdx.z / batch;
  const int b = blockIdx.z % batch;
  const i64 poly = (i64)blockIdx.y * n;
  const unsigned m = srcmaps[(i64)e * n + k];
  const u64 v = in[b * in_bs + poly + (m & 0x7fffffffu)];
  const u64 q = consts[FHE_C_Q * num_moduli + rowmap[blockIdx.y]];
  u64* o = out + e * out_es + b * out_bs + poly + k;
  *o = add_mod(*o, (m >> 31) ? neg_mod(v, q) : v, q);
}
