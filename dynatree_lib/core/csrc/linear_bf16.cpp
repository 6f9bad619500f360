// dynatree::linear_bf16(x, w_packed): x [k, d] @ w.T in bf16 for a few rows at memory speed (AVX512-BF16);
// dynatree::attention_bf16(q, k, v, mask): grouped-query attention of a few new tokens over a bf16 cache;
// dynatree::forward_bf16(...): a whole Llama forward with both, in one parallel region (see "the whole forward").
//
// Why: decoding reads every weight once per forward, so a forward of k <= 16 tokens should cost about what
// one token costs. oneDNN's bf16 matmul on plain weights re-lays the weight out on every call (about half
// of bandwidth); its prepacked form needs inductor's freezing, which keeps graphs out of the on-disk cache.
// Here the weight is packed once, as an ordinary tensor, into [n/16, d/2, 16, 2]: one 64-byte load holds
// two input features for 16 outputs, which VDPBF16PS multiplies by two broadcast features of a row of x
// and adds into 16 fp32 sums. No horizontal sums; the weight streams from memory once per call.
//
// Every output element accumulates in the same order (even and odd feature pairs, each ascending, then their
// sum) whatever k is, so a row's result does not depend on how many rows came with it (batch invariance: a
// token verified inside a tree gets the bits it gets alone).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace {

// 16 bf16 values as fp32 and back (rounding to nearest even), and an fp32 vector rounded to bf16 in place.
inline __m512 load16(const c10::BFloat16* p) { return _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)p)); }
inline __m512 round16(__m512 v) { return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(v)); }  // to bf16 and back
inline void store16(c10::BFloat16* p, __m512 v) { _mm256_storeu_si256((__m256i*)p, (__m256i)_mm512_cvtneps_pbh(v)); }

// Software prefetch distance, in 64-byte lines. The hardware prefetcher falls behind once each line feeds
// several rows (measured on the cpu profile's weights, 2 cores: 16 rows 17.3 -> 10.2 ms, 8 rows 10.6 -> 8.4;
// one row unchanged); 64 lines beat 32 and 16 for 8 and 16 rows (+5% and +9%, one block at a time).
// Prefetching past the end of the weight is harmless.
constexpr int64_t kPrefetch = 64;
// Where a weight line is used by one pass only (at most 8 rows), it is prefetched non-temporally: it then
// does not displace the shared L3's other contents (the KV cache, the activations, a draft model's weights)
// on its way out. The cpu profile's one-token target forward, 2 cores, medians of 20 calls in alternating
// rounds against the T0 hint: 2-4% faster (8.62 -> 8.36 ms at 36 GB/s). A line that a second 8-row pass reads
// again keeps the T0 hint.

// K rows of x against 16-output blocks [b0, b1), one block at a time: each thread reads its share of the weight
// as one sequential stream. Interleaving 2 or 4 blocks (more independent sums per row, as this kernel first
// did) read slower: 1 GB of the target's weight shapes, 2 cores, GB/s for 1 / 2 / 4 / 8 / 16 rows: interleaved
// 39 / 40 / 39 / 37 / 34, one block 43 / 46 / 44 / 44 / 37, torch's fp32 sum over 1 GB 44-46 in the same runs.
// Each row keeps two sums, over even and over odd feature pairs, added at the end: with one sum a row is one
// chain of dependent VDPBF16PS (6-cycle latency), which capped one row at ~70 GB/s from cache and so at the
// memory's speed whenever the VM's memory ran fast (measured, weights in L2/L3, 2 cores, GB/s for 1 / 2 / 4
// rows: one sum 68-78 / 66-75 / 64-65, two sums 113-126 / 106-114 / 85-98; 8 and 16 rows compute-bound either
// way). Hence at most 8 rows a pass (16 sums in registers); more rows take more passes over a block that
// sits in L1/L2. Every output adds its products in one order whatever the rows: the same bits alone or batched.
// Add: the output is a residual stream, out = bf16(out + bf16(x @ w.T)) (eager's rounding of `x + linear(..)`).
template <int K, bool Add = false, _mm_hint Hint = _MM_HINT_T0>
void rows(const uint32_t* x, int64_t d2, const __m512i* w, c10::BFloat16* out, int64_t ostride, int64_t b0,
          int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    __m512 even[K], odd[K];
    for (int j = 0; j < K; ++j) even[j] = odd[j] = _mm512_setzero_ps();
    const __m512i* p = w + b * d2;
    int64_t c = 0;
    for (; c + 1 < d2; c += 2) {
      _mm_prefetch((const char*)(p + c + kPrefetch), Hint);
      _mm_prefetch((const char*)(p + c + 1 + kPrefetch), Hint);
      const __m512bh v0 = (__m512bh)_mm512_loadu_si512(p + c), v1 = (__m512bh)_mm512_loadu_si512(p + c + 1);
      for (int j = 0; j < K; ++j) {
        even[j] = _mm512_dpbf16_ps(even[j], v0, (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c]));
        odd[j] = _mm512_dpbf16_ps(odd[j], v1, (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c + 1]));
      }
    }
    if (c < d2) {  // an odd number of feature pairs: the last one goes to the even sum
      const __m512bh v0 = (__m512bh)_mm512_loadu_si512(p + c);
      for (int j = 0; j < K; ++j)
        even[j] = _mm512_dpbf16_ps(even[j], v0, (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c]));
    }
    for (int j = 0; j < K; ++j) {
      c10::BFloat16* o = out + j * ostride + b * 16;
      const __m512 y = _mm512_add_ps(even[j], odd[j]);
      store16(o, Add ? _mm512_add_ps(round16(y), load16(o)) : y);
    }
  }
}

constexpr int kPass = 8;  // rows per pass over a block
using RowsFn = void (*)(const uint32_t*, int64_t, const __m512i*, c10::BFloat16*, int64_t, int64_t, int64_t);
template <bool Add, _mm_hint Hint>  // rows<K> by K, for one epilogue and one prefetch hint
constexpr RowsFn kRows[kPass + 1] = {nullptr,          rows<1, Add, Hint>, rows<2, Add, Hint>, rows<3, Add, Hint>,
                                     rows<4, Add, Hint>, rows<5, Add, Hint>, rows<6, Add, Hint>, rows<7, Add, Hint>,
                                     rows<8, Add, Hint>};

// k rows of x [k, 2 * d2] against output blocks [b0, b1): each stretch of 8 blocks serves every 8-row pass while
// it sits in cache, so the weight streams from memory once whatever k is.
void linear_blocks(const uint32_t* x, int64_t k, int64_t d2, const __m512i* w, c10::BFloat16* out, int64_t os,
                   int64_t b0, int64_t b1, bool add = false) {
  const bool once = k <= kPass;  // one pass: each weight line is read once (non-temporal prefetch)
  const RowsFn* fns = add ? (once ? kRows<true, _MM_HINT_NTA> : kRows<true, _MM_HINT_T0>)
                           : (once ? kRows<false, _MM_HINT_NTA> : kRows<false, _MM_HINT_T0>);
  for (int64_t s = b0; s < b1; s += 8) {
    const int64_t e = std::min<int64_t>(s + 8, b1);
    for (int64_t j = 0; j < k; j += kPass) fns[std::min<int64_t>(kPass, k - j)](x + j * d2, d2, w, out + j * os, os, s, e);
  }
}

at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.device().is_cpu(),
              "linear_bf16: x must be a 2-D bf16 CPU tensor");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == 32 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(),
              "linear_bf16: w must be packed by dynatree_lib.core.kernels.pack");
  TORCH_CHECK(x.size(1) == 2 * w.size(1), "linear_bf16: x has ", x.size(1), " features, w ", 2 * w.size(1));
  const auto xc = x.contiguous();
  const int64_t k = xc.size(0), d2 = w.size(1), nblk = w.size(0), os = nblk * 16;
  auto out = at::empty({k, os}, x.options());
  const auto* xp = reinterpret_cast<const uint32_t*>(xc.data_ptr<c10::BFloat16>());
  const auto* wp = reinterpret_cast<const __m512i*>(w.data_ptr<c10::BFloat16>());
  auto* op = out.data_ptr<c10::BFloat16>();
  // Blocks of outputs split between threads; for more than 8 rows (a tree, a prompt) each stretch of 8 blocks
  // is used by every 8-row pass while it sits in cache, so the weight still streams from memory once.
  at::parallel_for(0, nblk, 8, [&](int64_t b0, int64_t b1) { linear_blocks(xp, k, d2, wp, op, os, b0, b1); });
  return out;
}

// Shapes for tracing: symbolic sizes stay symbolic (one compiled graph serves every tree size).
at::Tensor linear_bf16_meta(const at::Tensor& x, const at::Tensor& w) {
  return at::empty_symint({x.sym_size(0), w.sym_size(0) * 16}, x.options());
}


// ---- attention ----
// Why: a tree's attention over the cache with ATen's bmm copies each layer's cache slice first (the slice
// of a [KV, slots, hd] buffer is not contiguous), ~30 us per product, two per layer: ~1.8 ms of a
// multi-token forward of the cpu profile's target. Here each query row reads its KV head's rows in place.
// Each output row is computed from its query, the visible cache rows and its mask row alone, in a fixed
// order: a hidden slot's weight is exactly 0 (skipped, or +0 that leaves a sum unchanged) and the softmax sum
// runs over visible slots by rank, so a row gets the same bits alone or inside a tree.

// exp(x) for x <= 0 (Cephes' expf polynomial, ~1 ulp); lanes with x < -87 give exactly 0.
inline __m512 exp_nonpos(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

constexpr float kHidden = -1e30f;  // mask entries at or below this hide a slot (the mask uses finfo.min)

// In-register transpose of a 16 x 16 matrix of 32-bit elements (4 stages; stage b swaps bit b of the row
// index with bit b of the lane index).
inline void transpose16(__m512i* r) {
  static const auto idx = [] {
    std::array<std::array<int32_t, 16>, 8> t{};  // [stage][lo, hi]
    for (int s = 0, b = 8; b >= 1; b >>= 1, ++s)
      for (int l = 0; l < 16; ++l) {
        t[2 * s][l] = (l & b) ? 16 + l - b : l;
        t[2 * s + 1][l] = (l & b) ? 16 + l : l + b;
      }
    return t;
  }();
  for (int s = 0, b = 8; b >= 1; b >>= 1, ++s) {
    const __m512i ilo = _mm512_loadu_si512(idx[2 * s].data()), ihi = _mm512_loadu_si512(idx[2 * s + 1].data());
    for (int i = 0; i < 16; ++i) {
      if (i & b) continue;
      const __m512i a = r[i], c = r[i + b];
      r[i] = _mm512_permutex2var_epi32(a, ilo, c);
      r[i + b] = _mm512_permutex2var_epi32(a, ihi, c);
    }
  }
}

constexpr int kChunk = 16;  // rows per attention task: the per-task arrays below are sized by it

// Rows [r0, r1) (at most kChunk) of the g * n rows (head-major: row = head_in_group * n + token) that share KV
// head kh; C is the head size in 16-lane vectors. Every (row, slot) score, weight and (row, feature) sum is computed by the same
// operations in the same order whatever the rows around it, so the layout of the loops below is free: it is
// chosen for throughput on a 2-core Zen 4. Per layer (9 query / 3 KV heads, hd 64), 1 thread, this kernel against
// the first one (one row's dot-product chain at a time, a compress straight to memory, the value sums in memory),
// bitwise equal: 1 row over 300 slots 16.6 / 28.1 us, 4 rows over 450 53 / 122, 16 rows over 450 192 / 470.
template <int C>
void attend(const c10::BFloat16* qp, int64_t qs0, int64_t qs1, const c10::BFloat16* K, int64_t ks,
            const c10::BFloat16* V, int64_t vs, const c10::BFloat16* mp, int64_t ms, c10::BFloat16* op, int64_t os,
            int64_t h0, int64_t n, int64_t kv, int64_t r0, int64_t r1, float scale, float* S, float* dense) {
  constexpr int P = 8 * C, hd = 16 * C;  // feature pairs, features
  const int64_t R = r1 - r0, kvp = (kv + 15) / 16 * 16;
  alignas(64) uint32_t qpairs[kChunk][P];
  int64_t tok[kChunk];  // each row's token (its mask row)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t h = h0 + (r0 + r) / n;
    tok[r] = (r0 + r) % n;
    std::memcpy(qpairs[r], qp + h * qs0 + tok[r] * qs1, hd * sizeof(c10::BFloat16));
  }
  // scores, 16 slots at a time: the K tile is transposed once into [pair][slot] and serves every row; rows go
  // 4 at a time so that 4 independent dot-product chains overlap (one row's chain is latency-bound)
  alignas(64) __m512i T[P];
  __m512 mx[kChunk];
  for (int64_t r = 0; r < R; ++r) mx[r] = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < kvp; j += 16) {
    const int64_t m = std::min<int64_t>(16, kv - j);
    for (int c = 0; c < P; c += 16) {
      __m512i* t = T + c;
      for (int64_t l = 0; l < 16; ++l)
        t[l] = l < m ? _mm512_loadu_si512(K + (j + l) * ks + 2 * c) : _mm512_setzero_si512();
      transpose16(t);
    }
    const __mmask16 live = (__mmask16)((1u << m) - 1);
    for (int64_t r = 0; r < R; r += 4) {
      const int nb = (int)std::min<int64_t>(4, R - r);
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int c = 0; c < P; ++c) {
        const __m512bh t = (__m512bh)T[c];
        acc[0] = _mm512_dpbf16_ps(acc[0], t, (__m512bh)_mm512_set1_epi32((int)qpairs[r][c]));
        if (nb > 1) acc[1] = _mm512_dpbf16_ps(acc[1], t, (__m512bh)_mm512_set1_epi32((int)qpairs[r + 1][c]));
        if (nb > 2) acc[2] = _mm512_dpbf16_ps(acc[2], t, (__m512bh)_mm512_set1_epi32((int)qpairs[r + 2][c]));
        if (nb > 3) acc[3] = _mm512_dpbf16_ps(acc[3], t, (__m512bh)_mm512_set1_epi32((int)qpairs[r + 3][c]));
      }
      for (int b = 0; b < nb; ++b) {
        // mask row slots j..j+15 as fp32 (bf16 -> fp32 is a 16-bit shift)
        const __m256i mb = _mm256_maskz_loadu_epi16(live, mp + tok[r + b] * ms + j);
        const __m512 mk = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(mb), 16));
        const __mmask16 vis = live & _mm512_cmp_ps_mask(mk, _mm512_set1_ps(kHidden), _CMP_GT_OQ);
        const __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis,
                                             _mm512_fmadd_ps(acc[b], _mm512_set1_ps(scale), mk));
        _mm512_storeu_ps(S + (r + b) * kvp + j, sc);
        mx[r + b] = _mm512_max_ps(mx[r + b], sc);
      }
    }
  }
  // softmax weights in place; their sum adds the nonzero weights in slot order, 16 lanes by rank (not by
  // slot: in a tree a node's ancestors sit at other slots than the same tokens in a plain sequence, but
  // their ranks among visible slots are the same). The nonzero weights are packed in a register and stored
  // whole (a compress straight to memory is microcoded on Zen 4: ~3x slower softmax).
  float inv[kChunk];
  for (int64_t r = 0; r < R; ++r) {
    float* s = S + r * kvp;
    const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx[r]));
    int64_t cnt = 0;
    for (int64_t j = 0; j < kvp; j += 16) {
      const __m512 e = exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
      _mm512_storeu_ps(s + j, e);
      const __mmask16 nz = _mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_NEQ_OQ);
      _mm512_storeu_ps(dense + cnt, _mm512_maskz_compress_ps(nz, e));
      cnt += __builtin_popcount((unsigned)nz);
    }
    __m512 sum = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= cnt; j += 16) sum = _mm512_add_ps(sum, _mm512_loadu_ps(dense + j));
    if (j < cnt) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps((__mmask16)((1u << (cnt - j)) - 1), dense + j));
    inv[r] = 1.0f / _mm512_reduce_add_ps(sum);
  }
  // weighted sums of V rows, NB rows at a time with their C-vector sums in registers; each V row is
  // converted once per block. A slot's term is added even where this row's weight is 0 (a block mate sees the
  // slot): p * v is then +-0, which leaves the sum's bits unchanged unless the sum is itself a zero (every
  // earlier term underflowed), and then at most its sign flips. Tiles that no row of the block sees are skipped.
  constexpr int NB = C <= 4 ? 4 : 16 / C;
  for (int64_t b0 = 0; b0 < R; b0 += NB) {
    const int nb = (int)std::min<int64_t>(NB, R - b0);
    __m512 o[NB][C];
    for (int b = 0; b < NB; ++b)
      for (int c = 0; c < C; ++c) o[b][c] = _mm512_setzero_ps();
    const float* sb = S + b0 * kvp;
    for (int64_t j = 0; j < kv; j += 16) {
      __mmask16 seen = 0;
      for (int b = 0; b < nb; ++b)
        seen |= _mm512_cmp_ps_mask(_mm512_loadu_ps(sb + b * kvp + j), _mm512_setzero_ps(), _CMP_NEQ_OQ);
      if (!seen) continue;
      const int64_t m = std::min<int64_t>(16, kv - j);
      for (int64_t l = j; l < j + m; ++l) {
        const auto* vr = V + l * vs;
        __m512 vf[C];
        for (int c = 0; c < C; ++c)
          vf[c] = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)(vr + 16 * c)));
        for (int b = 0; b < NB; ++b) {  // a constant bound: unrolled, so the sums stay in registers
          if (b >= nb) break;
          const __m512 p = _mm512_set1_ps(sb[b * kvp + l]);
          for (int c = 0; c < C; ++c) o[b][c] = _mm512_fmadd_ps(p, vf[c], o[b][c]);
        }
      }
    }
    for (int b = 0; b < nb; ++b) {
      const int64_t h = h0 + (r0 + b0 + b) / n, i = tok[b0 + b];
      const __m512 iv = _mm512_set1_ps(inv[b0 + b]);
      for (int c = 0; c < C; ++c)
        _mm256_storeu_si256((__m256i*)(op + i * os + h * hd + 16 * c),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(o[b][c], iv)));
    }
  }
}

using AttendFn = void (*)(const c10::BFloat16*, int64_t, int64_t, const c10::BFloat16*, int64_t, const c10::BFloat16*,
                          int64_t, const c10::BFloat16*, int64_t, c10::BFloat16*, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, float, float*, float*);
constexpr AttendFn kAttend[17] = {nullptr, nullptr, attend<2>,  nullptr, attend<4>,  nullptr, attend<6>,  nullptr, attend<8>,
                                  nullptr, attend<10>, nullptr, attend<12>, nullptr, attend<14>, nullptr, attend<16>};

at::Tensor attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && mask.dim() == 2,
              "attention_bf16: q [H, n, hd], k and v [KV, kv, hd], mask [n, kv]");
  for (const auto* t : {&q, &k, &v, &mask})
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->device().is_cpu(), "attention_bf16: bf16 CPU tensors only");
  const int64_t H = q.size(0), n = q.size(1), hd = q.size(2), KV = k.size(0), kv = k.size(1);
  TORCH_CHECK(hd % 32 == 0 && hd <= 256, "attention_bf16: head dim must be a multiple of 32 up to 256, got ", hd);
  TORCH_CHECK(KV > 0 && H % KV == 0, "attention_bf16: ", H, " query heads over ", KV, " KV heads");
  TORCH_CHECK(v.sizes() == k.sizes() && k.size(2) == hd, "attention_bf16: k, v must be [", KV, ", kv, ", hd, "]");
  TORCH_CHECK(mask.size(0) == n && mask.size(1) == kv && kv > 0, "attention_bf16: mask must be [", n, ", ", kv, "]");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1 && mask.stride(1) == 1,
              "attention_bf16: the last dim of every operand must be contiguous");
  const int64_t g = H / KV, rows = g * n;
  auto out = at::empty({n, H * hd}, q.options());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // tasks: (KV head, chunk of up to kChunk of its rows); threads only when there is work enough to wake them
  // (measured with the first kernel: SmolLM2's 3 KV heads, 2 cores, us per layer, one thread below 32768 /
  // below 2048 row-slot-heads: 8 rows over 200 slots 63 / 41, over 400 124 / 75; 16 rows over 200 120 / 73;
  // 1 row over 400 28 / 23)
  const int64_t chunk = kChunk, per = (rows + chunk - 1) / chunk, tasks = KV * per;
  const int64_t grain = rows * kv * KV < 2048 ? tasks : 1;
  const int64_t kvp = (kv + 15) / 16 * 16;
  const AttendFn fn = kAttend[hd / 16];
  at::parallel_for(0, tasks, grain, [&](int64_t t0, int64_t t1) {
    // per thread: the chunk's scores [kChunk, kvp] and the packed weights of one row
    std::vector<float> S(chunk * kvp), dense(kvp + 16);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t kh = t / per, r0 = (t % per) * chunk;
      fn(q.data_ptr<c10::BFloat16>(), q.stride(0), q.stride(1), k.data_ptr<c10::BFloat16>() + kh * k.stride(0),
         k.stride(1), v.data_ptr<c10::BFloat16>() + kh * v.stride(0), v.stride(1), mask.data_ptr<c10::BFloat16>(),
         mask.stride(0), out.data_ptr<c10::BFloat16>(), H * hd, kh * g, n, kv, r0, std::min(rows, r0 + chunk), scale,
         S.data(), dense.data());
    }
  });
  return out;
}

at::Tensor attention_bf16_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  return at::empty_symint({q.sym_size(1), q.sym_size(0) * q.sym_size(2)}, q.options());
}


// ---- the whole forward ----
// Why: a compiled graph of the same layers calls ~12 kernels a layer (matmuls, attention, norms, RoPE, the
// cache writes, SiLU, residual adds), each its own parallel region: on 2 cores a region costs ~5-7 us to start
// and its weight stream restarts cold, so the cpu profile's one-token forward ran at 1.6-1.9x its bandwidth bound
// although each matmul alone reads at memory speed. Here the whole forward is one parallel region: every thread
// streams its share of each weight in turn and the threads meet at a barrier (7 a layer) between the steps that
// need a whole row: 1.0-1.4 ms less a one-token forward (tools/forward_bench.py). The arithmetic is the graph's,
// rounded where eager rounds (RMSNorm statistics in fp32, RoPE and SiLU from bf16 operands, bf16 residual adds),
// and every row is computed from its own inputs in a fixed order: a token's bits do not depend on the rows that
// come with it.

// RMSNorm of a row (d a multiple of 16): bf16(w * bf16(x * rsqrt(mean(x^2) + eps))), as transformers' Llama.
void rms_row(const c10::BFloat16* x, const c10::BFloat16* w, int64_t d, float eps, c10::BFloat16* out) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; i += 16) acc = _mm512_fmadd_ps(load16(x + i), load16(x + i), acc);
  const __m512 r = _mm512_set1_ps(1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / static_cast<float>(d) + eps));
  for (int64_t i = 0; i < d; i += 16) store16(out + i, _mm512_mul_ps(load16(w + i), round16(_mm512_mul_ps(load16(x + i), r))));
}

// RoPE of one head (rotate-half; hd a multiple of 32): bf16(bf16(x * cos) + bf16(rot(x) * sin)), written to out
// (which may be x).
void rope_head(const c10::BFloat16* x, const c10::BFloat16* cs, const c10::BFloat16* sn, int64_t hd,
               c10::BFloat16* out) {
  __m512 y[16];
  const int64_t h = hd / 2;
  for (int64_t i = 0; i < hd; i += 16) {
    const __m512 v = load16(x + i), other = load16(x + (i < h ? i + h : i - h));
    const __m512 rot = i < h ? _mm512_sub_ps(_mm512_setzero_ps(), other) : other;
    y[i / 16] = _mm512_add_ps(round16(_mm512_mul_ps(v, load16(cs + i))), round16(_mm512_mul_ps(rot, load16(sn + i))));
  }
  for (int64_t i = 0; i < hd; i += 16) store16(out + i, y[i / 16]);
}

// bf16(bf16(silu(g)) * u) for columns [c0, c1) of a row (multiples of 16); silu(g) = g / (1 + exp(-g)) in fp32.
void silu_mul(const c10::BFloat16* g, const c10::BFloat16* u, int64_t c0, int64_t c1, c10::BFloat16* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t c = c0; c < c1; c += 16) {
    const __m512 gv = load16(g + c);
    const __m512 e = exp_nonpos(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(gv)));  // exp(-|g|)
    const __mmask16 neg = _mm512_cmp_ps_mask(gv, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 sig = _mm512_div_ps(_mm512_mask_mov_ps(one, neg, e), _mm512_add_ps(one, e));
    store16(out + c, _mm512_mul_ps(round16(_mm512_mul_ps(gv, sig)), load16(u + c)));
  }
}

// The first index of the largest of row[c0, c1) (c1 - c0 a positive multiple of 16), with that value: each lane
// keeps its first maximum (strictly greater replaces), then the lowest index among the lanes holding the
// largest value: torch's argmax of the same numbers (NaN aside: a NaN is never taken here).
std::pair<float, int64_t> argmax_range(const c10::BFloat16* row, int64_t c0, int64_t c1) {
  const __m512i step = _mm512_set1_epi32(16);
  __m512i bi = _mm512_add_epi32(_mm512_set1_epi32((int)c0),
                                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512 bv = load16(row + c0);
  __m512i ci = bi;
  for (int64_t c = c0 + 16; c < c1; c += 16) {
    ci = _mm512_add_epi32(ci, step);
    const __m512 v = load16(row + c);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ);
    bv = _mm512_mask_mov_ps(bv, gt, v);
    bi = _mm512_mask_mov_epi32(bi, gt, ci);
  }
  const float mx = _mm512_reduce_max_ps(bv);
  const __mmask16 at = _mm512_cmp_ps_mask(bv, _mm512_set1_ps(mx), _CMP_EQ_OQ);
  return {mx, _mm512_mask_reduce_min_epi32(at, bi)};
}

// Logits of `tokens` at `positions`, their keys and values written to cache `slots` (rows of the flat caches,
// [layer, KV head, slot]), attending through the additive `mask` [q, kv] to slots [0, kv). Weights packed by
// kernels.pack and stacked over layers; `last_only`: logits of the last token only; `greedy`: each row's argmax
// (int64, the first index of the largest logit) instead of its logits, found by each thread in the columns it
// computed while they are still in its cache (a [q, V] copy to fp32 and torch's argmax cost 60 us a row here).
at::Tensor forward_bf16(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& slots,
                        const at::Tensor& mask, const at::Tensor& embed, const at::Tensor& wqkv, const at::Tensor& wo,
                        const at::Tensor& w13, const at::Tensor& w2, const at::Tensor& ln1, const at::Tensor& ln2,
                        const at::Tensor& norm, const at::Tensor& head, const at::Tensor& kc, const at::Tensor& vc,
                        const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t KV, double eps,
                        bool last_only, bool greedy) {
  for (const auto* t : {&tokens, &positions, &slots})
    TORCH_CHECK(t->dim() == 1 && t->scalar_type() == at::kLong && t->is_contiguous(),
                "forward_bf16: tokens, positions, slots must be contiguous 1-D int64");
  for (const auto* t : {&mask, &embed, &wqkv, &wo, &w13, &w2, &ln1, &ln2, &norm, &head, &kc, &vc, &cos, &sin})
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->device().is_cpu() && t->is_contiguous(),
                "forward_bf16: contiguous bf16 CPU tensors only");
  TORCH_CHECK(embed.dim() == 2 && mask.dim() == 2 && kc.dim() == 2 && cos.dim() == 2 && ln1.dim() == 2 &&
                  norm.dim() == 1 && head.dim() == 3 && wqkv.dim() == 4 && wo.dim() == 4 && w13.dim() == 4 &&
                  w2.dim() == 4,
              "forward_bf16: weights must be packed by dynatree_lib.core.kernels.pack and stacked over layers");
  const int64_t q = tokens.size(0), d = embed.size(1), L = wqkv.size(0), hd = kc.size(1), kv = mask.size(1);
  TORCH_CHECK(q > 0 && positions.size(0) == q && slots.size(0) == q && mask.size(0) == q,
              "forward_bf16: ", q, " tokens need as many positions and slots and a [", q, ", kv] mask");
  TORCH_CHECK(hd % 32 == 0 && hd <= 256 && KV > 0 && H % KV == 0 && d % 16 == 0 && L > 0, "forward_bf16: head dim ",
              hd, ", hidden size ", d, ", ", H, " / ", KV, " heads, ", L, " layers");
  const int64_t d2 = d / 2, ncol = (H + 2 * KV) * hd, inter = w13.size(1) * 8, n_slots = kc.size(0) / (L * KV);
  TORCH_CHECK(inter % 16 == 0, "forward_bf16: intermediate size ", inter, " is not a multiple of 16");
  TORCH_CHECK(wqkv.size(1) * 16 == ncol && wqkv.size(2) == d2 && wo.size(1) * 16 == d &&
                  wo.size(2) * 2 == H * hd && w13.size(2) == d2 && w2.size(1) * 16 == d && w2.size(2) * 2 == inter &&
                  head.size(1) == d2 && ln1.size(1) == d && norm.size(0) == d,
              "forward_bf16: weights must be packed by dynatree_lib.core.kernels.pack and stacked over layers");
  TORCH_CHECK(kc.sizes() == vc.sizes() && kc.size(0) == L * KV * n_slots && cos.size(1) == hd,
              "forward_bf16: caches must be [layers * KV heads * slots, head dim]");
  const auto* tk = tokens.data_ptr<int64_t>();
  const auto* ps = positions.data_ptr<int64_t>();
  const auto* sl = slots.data_ptr<int64_t>();
  for (int64_t r = 0; r < q; ++r) {
    TORCH_CHECK(tk[r] >= 0 && tk[r] < embed.size(0), "forward_bf16: token id ", tk[r], " outside the vocabulary");
    TORCH_CHECK(ps[r] >= 0 && ps[r] < cos.size(0), "forward_bf16: position ", ps[r], " past the RoPE table");
    TORCH_CHECK(sl[r] >= 0 && sl[r] < kv && kv <= n_slots, "forward_bf16: slot ", sl[r], " outside the mask");
  }
  using bf16 = c10::BFloat16;
  auto opt = embed.options();
  const int64_t nout = last_only ? 1 : q, V = head.size(0) * 16;
  auto x = at::empty({q, d}, opt), qkv = at::empty({q, ncol}, opt), att = at::empty({q, H * hd}, opt);
  auto h13 = at::empty({q, 2 * inter}, opt), act = at::empty({q, inter}, opt), out = at::empty({nout, V}, opt);
  auto ids_t = at::empty({greedy ? nout : 0}, tokens.options());
  int64_t* ids = ids_t.data_ptr<int64_t>();
  const int nt = std::max(1, at::get_num_threads());
  auto xn = at::empty({nt, q, d}, opt);  // each thread's normalised rows (computed by every thread: no barrier)
  std::vector<std::pair<float, int64_t>> best(greedy ? static_cast<size_t>(nt) * nout : 0);  // [thread, row]
  // attention tasks: (chunk of a KV head's rows, KV head), chunk-major so that threads taking every T-th task get
  // equal shares; more, smaller chunks where that evens the count out and a chunk keeps >= 4 rows (a task's fixed
  // cost is its pass over the keys: for one token, 3 KV heads on 2 threads, splitting rows did not pay, measured)
  const int64_t g = H / KV, arows = g * q;
  int64_t per = (arows + kChunk - 1) / kChunk;
  while ((KV * per) % nt != 0 && (arows + per) / (per + 1) >= 4) ++per;
  const int64_t chunk = (arows + per - 1) / per, tasks = KV * per;
  const int64_t kvp = (kv + 15) / 16 * 16;
  std::vector<float> scratch(static_cast<size_t>(nt) * (kChunk * kvp + kvp + 16));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const AttendFn attend_fn = kAttend[hd / 16];
  bf16 *X = x.data_ptr<bf16>(), *QKV = qkv.data_ptr<bf16>(), *ATT = att.data_ptr<bf16>(), *H13 = h13.data_ptr<bf16>();
  bf16 *ACT = act.data_ptr<bf16>(), *OUT = out.data_ptr<bf16>(), *KC = kc.data_ptr<bf16>(), *VC = vc.data_ptr<bf16>();
  const bf16 *EMB = embed.data_ptr<bf16>(), *MASK = mask.data_ptr<bf16>(), *COS = cos.data_ptr<bf16>(),
             *SIN = sin.data_ptr<bf16>(), *LN1 = ln1.data_ptr<bf16>(), *LN2 = ln2.data_ptr<bf16>();
  const auto* WQKV = reinterpret_cast<const __m512i*>(wqkv.data_ptr<bf16>());
  const auto* WO = reinterpret_cast<const __m512i*>(wo.data_ptr<bf16>());
  const auto* W13 = reinterpret_cast<const __m512i*>(w13.data_ptr<bf16>());
  const auto* W2 = reinterpret_cast<const __m512i*>(w2.data_ptr<bf16>());
  const auto* HEAD = reinterpret_cast<const __m512i*>(head.data_ptr<bf16>());
  const int64_t sqkv = wqkv[0].numel() / 32, so = wo[0].numel() / 32, s13 = w13[0].numel() / 32, s2 = w2[0].numel() / 32;
  const float feps = static_cast<float>(eps);
  const int64_t ms = mask.stride(0);

#pragma omp parallel num_threads(nt)
  {
    const int T = omp_get_num_threads(), t = omp_get_thread_num();
    // this thread's share of n output blocks (contiguous: one stream per weight)
    auto share = [&](int64_t n, int64_t& b0, int64_t& b1) { b0 = n * t / T, b1 = n * (t + 1) / T; };
    bf16* XN = xn.data_ptr<bf16>() + t * q * d;
    float* S = scratch.data() + t * (kChunk * kvp + kvp + 16);
    const auto* XNu = reinterpret_cast<const uint32_t*>(XN);
    int64_t b0, b1;
    for (int64_t r = t; r < q; r += T) std::memcpy(X + r * d, EMB + tk[r] * d, d * sizeof(bf16));
#pragma omp barrier
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t r = 0; r < q; ++r) rms_row(X + r * d, LN1 + i * d, d, feps, XN + r * d);
      share(ncol / 16, b0, b1);
      linear_blocks(XNu, q, d2, WQKV + i * sqkv, QKV, ncol, b0, b1);
#pragma omp barrier
      // RoPE of the queries in place, the keys into the cache; the values copied there
      for (int64_t it = t; it < q * (H + 2 * KV); it += T) {
        const int64_t r = it / (H + 2 * KV), hh = it % (H + 2 * KV);
        bf16* src = QKV + r * ncol + hh * hd;
        const bf16 *cs = COS + ps[r] * hd, *sn = SIN + ps[r] * hd;
        if (hh < H) {
          rope_head(src, cs, sn, hd, src);
        } else {
          const bool key = hh < H + KV;
          const int64_t kh = key ? hh - H : hh - H - KV;
          bf16* dst = (key ? KC : VC) + ((i * KV + kh) * n_slots + sl[r]) * hd;
          if (key) rope_head(src, cs, sn, hd, dst);
          else std::memcpy(dst, src, hd * sizeof(bf16));
        }
      }
#pragma omp barrier
      for (int64_t task = t; task < tasks; task += T) {
        const int64_t kh = task % KV, r0 = (task / KV) * chunk;
        const int64_t base = (i * KV + kh) * n_slots * hd;
        if (r0 < arows)
          attend_fn(QKV, hd, ncol, KC + base, hd, VC + base, hd, MASK, ms, ATT, H * hd, kh * g, q, kv, r0,
                    std::min(arows, r0 + chunk), scale, S, S + kChunk * kvp);
      }
#pragma omp barrier
      share(d / 16, b0, b1);
      linear_blocks(reinterpret_cast<const uint32_t*>(ATT), q, H * hd / 2, WO + i * so, X, d, b0, b1, true);
#pragma omp barrier
      for (int64_t r = 0; r < q; ++r) rms_row(X + r * d, LN2 + i * d, d, feps, XN + r * d);
      share(2 * inter / 16, b0, b1);
      linear_blocks(XNu, q, d2, W13 + i * s13, H13, 2 * inter, b0, b1);
#pragma omp barrier
      share(inter / 16, b0, b1);
      for (int64_t r = 0; r < q; ++r)
        silu_mul(H13 + r * 2 * inter, H13 + r * 2 * inter + inter, 16 * b0, 16 * b1, ACT + r * inter);
#pragma omp barrier
      share(d / 16, b0, b1);
      linear_blocks(reinterpret_cast<const uint32_t*>(ACT), q, inter / 2, W2 + i * s2, X, d, b0, b1, true);
#pragma omp barrier
    }
    for (int64_t r = q - nout; r < q; ++r) rms_row(X + r * d, norm.data_ptr<bf16>(), d, feps, XN + (r - q + nout) * d);
    share(V / 16, b0, b1);
    linear_blocks(XNu, nout, d2, HEAD, OUT, V, b0, b1);
    if (greedy) {
      for (int64_t r = 0; r < nout; ++r)
        best[t * nout + r] = b0 < b1 ? argmax_range(OUT + r * V, 16 * b0, 16 * b1) : std::make_pair(-INFINITY, int64_t{-1});
#pragma omp barrier
#pragma omp for
      for (int64_t r = 0; r < nout; ++r) {  // the threads' columns ascend: a tie keeps the earlier thread's index
        std::pair<float, int64_t> b{-INFINITY, -1};
        for (int u = 0; u < T; ++u) {
          const auto& c = best[u * nout + r];
          if (c.second >= 0 && (b.second < 0 || c.first > b.first)) b = c;
        }
        ids[r] = b.second;
      }
    }
  }
  return greedy ? ids_t : out;
}

at::Tensor forward_bf16_meta(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& slots,
                             const at::Tensor& mask, const at::Tensor& embed, const at::Tensor& wqkv,
                             const at::Tensor& wo, const at::Tensor& w13, const at::Tensor& w2, const at::Tensor& ln1,
                             const at::Tensor& ln2, const at::Tensor& norm, const at::Tensor& head,
                             const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& cos, const at::Tensor& sin,
                             int64_t H, int64_t KV, double eps, bool last_only, bool greedy) {
  const c10::SymInt rows = last_only ? c10::SymInt(1) : tokens.sym_size(0);
  if (greedy) return at::empty_symint({rows}, tokens.options());
  return at::empty_symint({rows, head.sym_size(0) * 16}, embed.options());
}

}  // namespace

TORCH_LIBRARY(dynatree, m) {
  m.def("linear_bf16(Tensor x, Tensor w) -> Tensor");
  m.def("attention_bf16(Tensor q, Tensor k, Tensor v, Tensor mask) -> Tensor");
  m.def("forward_bf16(Tensor tokens, Tensor positions, Tensor slots, Tensor mask, Tensor embed, Tensor wqkv, "
        "Tensor wo, Tensor w13, Tensor w2, Tensor ln1, Tensor ln2, Tensor norm, Tensor head, Tensor(a!) kc, "
        "Tensor(b!) vc, Tensor cos, Tensor sin, int H, int KV, float eps, bool last_only, bool greedy=False) -> Tensor");
}
TORCH_LIBRARY_IMPL(dynatree, CPU, m) {
  m.impl("linear_bf16", linear_bf16);
  m.impl("attention_bf16", attention_bf16);
  m.impl("forward_bf16", forward_bf16);
}
TORCH_LIBRARY_IMPL(dynatree, Meta, m) {
  m.impl("linear_bf16", linear_bf16_meta);
  m.impl("attention_bf16", attention_bf16_meta);
  m.impl("forward_bf16", forward_bf16_meta);
}
