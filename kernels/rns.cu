// Element-wise RNS arithmetic, batch sum, tensor product and rescale.
//
// Axis order: [batch, limb, coeff]. Element (z, y, k) of an operand lives at
// z * batch_stride + y * N + k (batch_stride 0 broadcasts one [L, N] operand over the batch).
// Row y is reduced modulo consts[Q][rowmap[y]] (see modarith.cuh for the table layout).
// Launch geometry (all arithmetic kernels here): grid (ceil(N / 256), limbs, batch), block 256,
// one thread per coefficient; grid y/z <= 65535.
#include "modarith.cuh"

using namespace fhe;

#define FHE_ELEMENTWISE_PROLOGUE                                    \
  const int k = blockIdx.x * blockDim.x + threadIdx.x;              \
  if (k >= n) return;                                               \
  const int y = blockIdx.y;                                         \
  const i64 z = blockIdx.z;                                         \
  const Modulus md = load_modulus(consts, num_moduli, rowmap[y]);   \
  const i64 row = (i64)y * n + k;

// rns_add: out = a + b mod q. In canonical, out canonical. out may alias a or b.
extern "C" __global__ void rns_add(const u64* a, const u64* b, u64* out, const int* rowmap, const u64* consts,
                                   int num_moduli, int n, i64 a_bs, i64 b_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = add_mod(a[z * a_bs + row], b[z * b_bs + row], md.q);
}

// rns_sub: out = a - b mod q. In canonical, out canonical. out may alias a or b.
extern "C" __global__ void rns_sub(const u64* a, const u64* b, u64* out, const int* rowmap, const u64* consts,
                                   int num_moduli, int n, i64 a_bs, i64 b_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = sub_mod(a[z * a_bs + row], b[z * b_bs + row], md.q);
}

// rns_mul: out = a * b mod q (standard form: two Montgomery products, the second by R^2).
// In canonical, out canonical. out may alias a or b.
extern "C" __global__ void rns_mul(const u64* a, const u64* b, u64* out, const int* rowmap, const u64* consts,
                                   int num_moduli, int n, i64 a_bs, i64 b_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = mul_mod(a[z * a_bs + row], b[z * b_bs + row], md.q, md.qinv, md.r2);
}

// rns_mul_montgomery: out = a * b * 2^-64 mod q. In canonical, out canonical. May alias.
extern "C" __global__ void rns_mul_montgomery(const u64* a, const u64* b, u64* out, const int* rowmap,
                                              const u64* consts, int num_moduli, int n, i64 a_bs, i64 b_bs,
                                              i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = mont_mul(a[z * a_bs + row], b[z * b_bs + row], md.q, md.qinv);
}

// rns_neg: out = -a mod q. In canonical, out canonical. May alias.
extern "C" __global__ void rns_neg(const u64* a, u64* out, const int* rowmap, const u64* consts, int num_moduli,
                                   int n, i64 a_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = neg_mod(a[z * a_bs + row], md.q);
}

// rns_to_montgomery: out = a * 2^64 mod q (Montgomery product by R^2). In/out canonical.
extern "C" __global__ void rns_to_montgomery(const u64* a, u64* out, const int* rowmap, const u64* consts,
                                             int num_moduli, int n, i64 a_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = mont_mul(a[z * a_bs + row], md.r2, md.q, md.qinv);
}

// rns_from_montgomery: out = a * 2^-64 mod q (Montgomery product by 1). In/out canonical.
extern "C" __global__ void rns_from_montgomery(const u64* a, u64* out, const int* rowmap, const u64* consts,
                                               int num_moduli, int n, i64 a_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = mont_mul(a[z * a_bs + row], 1ULL, md.q, md.qinv);
}

// rns_mul_scalar: out = a * w_y mod q with one Shoup constant per limb:
// scal[y] = w_y in [0, q), scal[limbs + y] = floor(w_y * 2^64 / q). In/out canonical. May alias.
extern "C" __global__ void rns_mul_scalar(const u64* a, u64* out, const u64* scal, const int* rowmap,
                                          const u64* consts, int num_moduli, int n, int limbs, i64 a_bs,
                                          i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  out[z * out_bs + row] = shoup_mul(a[z * a_bs + row], scal[y], scal[limbs + y], md.q);
}

// rns_sum_batch: out[o, i] = sum_c a[o, c, i] mod q over `count` planes.
// Axis order: in [outer, count, inner, limb, coeff], out [outer, inner, limb, coeff];
// grid z = outer * inner. In canonical, out canonical.
extern "C" __global__ void rns_sum_batch(const u64* a, u64* out, const int* rowmap, const u64* consts,
                                         int num_moduli, int n, int limbs, int count, int inner) {
  FHE_ELEMENTWISE_PROLOGUE
  const i64 plane = (i64)limbs * n;
  const i64 o = z / inner;
  const i64 in = z % inner;
  const u64* src = a + (o * count * inner + in) * plane + row;
  const i64 step = (i64)inner * plane;
  u64 acc = 0;
  for (int c = 0; c < count; ++c) acc = add_mod(acc, src[c * step], md.q);
  out[z * plane + row] = acc;
}

// rns_mul_montgomery_sum: out[o] = sum_c a[o, c] * b[c] * 2^-64 mod q over `count` planes (a
// plaintext-weighted batch sum: rns_mul_montgomery and rns_sum_batch in one pass).
// Axis order: a [outer, count, limb, coeff], b [count, limb, coeff] with its entries b_plane words
// apart (limbs * n when contiguous; more for the Q limbs of a QP-basis plaintext, read in place),
// out [outer, limb, coeff]; grid z = outer. In canonical, out canonical. out must not alias a or b.
extern "C" __global__ void rns_mul_montgomery_sum(const u64* a, const u64* b, u64* out, const int* rowmap,
                                                  const u64* consts, int num_moduli, int n, int limbs, int count,
                                                  i64 b_plane) {
  FHE_ELEMENTWISE_PROLOGUE
  const i64 plane = (i64)limbs * n;
  const u64* pa = a + z * count * plane + row;
  const u64* pb = b + row;
  u64 acc = 0;
#pragma unroll 4
  for (int c = 0; c < count; ++c) acc = add_mod(acc, mont_mul(pa[c * plane], pb[c * b_plane], md.q, md.qinv), md.q);
  out[z * plane + row] = acc;
}

// rns_tensor_product: (a0 b0, a0 b1 + a1 b0, a1 b1) mod q, standard form.
// Axis order: a, b [2, batch, limb, coeff]; out [3, batch, limb, coeff]; comp_stride =
// batch * limbs * n elements. In canonical, out canonical.
extern "C" __global__ void rns_tensor_product(const u64* a, const u64* b, u64* out, const int* rowmap,
                                              const u64* consts, int num_moduli, int n, int limbs,
                                              i64 comp_stride) {
  FHE_ELEMENTWISE_PROLOGUE
  const i64 idx = z * limbs * n + row;
  const u64 a0 = a[idx], a1 = a[comp_stride + idx];
  const u64 b0 = b[idx], b1 = b[comp_stride + idx];
  const u64 d0 = mont_mul(a0, b0, md.q, md.qinv);
  const u64 d1 = add_mod(mont_mul(a0, b1, md.q, md.qinv), mont_mul(a1, b0, md.q, md.qinv), md.q);
  const u64 d2 = mont_mul(a1, b1, md.q, md.qinv);
  out[idx] = mont_mul(d0, md.r2, md.q, md.qinv);
  out[comp_stride + idx] = mont_mul(d1, md.r2, md.q, md.qinv);
  out[2 * comp_stride + idx] = mont_mul(d2, md.r2, md.q, md.qinv);
}

// Per remaining row y of a rescale: tab[y] = q0 mod q_y, tab[L' + y] = q0^-1 mod q_y,
// tab[2L' + y] = Shoup companion of q0^-1 (L' = remaining limbs); the correction of row y is
// centered_mod(c0, q0, tab[y], md) (modarith.cuh).

// rescale_drop_first_coefficient: c'_y = (c_{y+1} - (centered(c_0, q0) mod q_y)) * q0^-1 mod q_y.
// Axis order: in [batch, L, coeff] (in_bs), out [batch, L - 1, coeff] (out_bs); rowmap and grid
// y cover the L - 1 remaining rows; q0 = consts[Q][dropped_id]. In/out canonical.
extern "C" __global__ void rescale_drop_first_coefficient(const u64* in, u64* out, const int* rowmap,
                                                          const u64* consts, const u64* tab, int num_moduli,
                                                          int n, int remaining, int dropped_id, i64 in_bs,
                                                          i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  const u64 q0 = consts[FHE_C_Q * num_moduli + dropped_id];
  const u64 c0 = in[z * in_bs + k];
  const u64 ci = in[z * in_bs + row + n];
  const u64 r = centered_mod(c0, q0, tab[y], md);
  out[z * out_bs + row] = shoup_mul(sub_mod(ci, r, md.q), tab[remaining + y], tab[2 * remaining + y], md.q);
}

// rescale_spread_dropped: out[z, y] = centered(c0[z], q0) mod q_y (coefficient domain), the
// correction a rescale in the NTT domain transforms forward (its combine (a - NTT(r)) * q0^-1
// is the ModDown's: keyswitch.cu keyswitch_moddown_combine, or the output step of
// ntt_forward_chunk_stages_moddown_combine). ntt.cu ntt_forward_column_stages_rescale_spread
// computes it in the forward NTT's first kernel instead (one launch group). Axis order: c0 [batch, coeff]
// (c0_bs), out [batch, L - 1, coeff]. In/out canonical.
extern "C" __global__ void rescale_spread_dropped(const u64* c0, u64* out, const int* rowmap, const u64* consts,
                                                  const u64* tab, int num_moduli, int n, int dropped_id,
                                                  i64 c0_bs, i64 out_bs) {
  FHE_ELEMENTWISE_PROLOGUE
  const u64 q0 = consts[FHE_C_Q * num_moduli + dropped_id];
  out[z * out_bs + row] = centered_mod(c0[z * c0_bs + k], q0, tab[y], md);
}

// rns_centered_crt_to_double: the centred integer of each coefficient's residues over L rows,
// as float64 (decoding). Garner's mixed radix of (x + H) mod Q (H = (Q - 1) / 2), minus the
// digits of H, evaluated by Horner's rule from the top digit; bit-identical to the host's
// encoding.CrtReconstructor (the same canonical digits; float64 products and sums rounded
// one at a time, never fused). Axis order: x [batch, L, coeff] canonical, out [batch, coeff].
// Table (u64, from _cupy_tables.crt_table): row i at 5 i: q_i, H mod q_i, H's digit i (an int64),
// (M_i)^-1 mod q_i and its Shoup companion (M_i = q_0 .. q_(i-1)); then for k < i the pair
// (M_k mod q_i, Shoup) at 5 L + 2 (i (i - 1) / 2 + k). L <= FHE_CRT_MAX_LIMBS.
// Launch: grid (ceil(N / 256), 1, batch), block 256.
#define FHE_CRT_MAX_LIMBS 64
extern "C" __global__ void rns_centered_crt_to_double(const u64* x, double* out, const u64* table, int L, int n) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const i64 z = blockIdx.z;
  const u64* xi = x + z * (i64)L * n + k;
  u64 digit[FHE_CRT_MAX_LIMBS];
  for (int i = 0; i < L; ++i) {
    const u64* row = table + 5 * i;
    const u64 q = row[0];
    u64 v = add_mod(xi[(i64)i * n], row[1], q);
    const u64* pair = table + 5 * L + (i * (i - 1));  // 2 (i (i - 1) / 2) words before row i's pairs
    for (int j = 0; j < i; ++j) v = sub_mod(v, shoup_mul(digit[j], pair[2 * j], pair[2 * j + 1], q), q);
    digit[i] = i ? shoup_mul(v, row[3], row[4], q) : v;
  }
  double acc = 0.0;
  for (int i = L - 1; i >= 0; --i) {
    const double d = __ll2double_rn((i64)digit[i] - (i64)table[5 * i + 2]);
    acc = i == L - 1 ? d : __dadd_rn(__dmul_rn(acc, __ull2double_rn(table[5 * i])), d);
  }
  out[z * n + k] = acc;
}
