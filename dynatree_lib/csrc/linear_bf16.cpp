// dynatree::linear_bf16(x, w_packed): x [k, d] @ w.T in bf16 for a few rows at memory speed (AVX512-BF16).
//
// Why: decoding reads every weight once per forward, so a forward of k <= 16 tokens should cost about what
// one token costs. oneDNN's bf16 matmul on plain weights re-lays the weight out on every call (about half
// of bandwidth); its prepacked form needs inductor's freezing, which keeps graphs out of the on-disk cache.
// Here the weight is packed once, as an ordinary tensor, into [n/16, d/2, 16, 2]: one 64-byte load holds
// two input features for 16 outputs, which VDPBF16PS multiplies by two broadcast features of a row of x
// and adds into 16 fp32 sums. No horizontal sums; the weight streams once per 16 rows of x.
//
// Every output element accumulates in the same order (feature pairs ascending) whatever k is, so a row's
// result does not depend on how many rows came with it (batch invariance: a token verified inside a tree
// gets the bits it gets alone).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

namespace {

// K rows of x against NB consecutive 16-output blocks, for blocks [b0, b1).
template <int K, int NB>
void tile(const uint32_t* x, int64_t d2, const __m512i* w, c10::BFloat16* out, int64_t ostride, int64_t b0,
          int64_t b1) {
  int64_t b = b0;
  for (; b + NB <= b1; b += NB) {
    __m512 acc[NB][K];
    for (int i = 0; i < NB; ++i)
      for (int j = 0; j < K; ++j) acc[i][j] = _mm512_setzero_ps();
    const __m512i* p = w + b * d2;
    for (int64_t c = 0; c < d2; ++c) {
      __m512bh v[NB];
      for (int i = 0; i < NB; ++i) v[i] = (__m512bh)_mm512_loadu_si512(p + i * d2 + c);
      for (int j = 0; j < K; ++j) {
        const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c]);
        for (int i = 0; i < NB; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], v[i], xb);
      }
    }
    for (int j = 0; j < K; ++j)
      for (int i = 0; i < NB; ++i)
        _mm256_storeu_si256((__m256i*)(out + j * ostride + (b + i) * 16), (__m256i)_mm512_cvtneps_pbh(acc[i][j]));
  }
  if (b < b1) tile<K, 1>(x, d2, w, out, ostride, b, b1);
}

template <int K>
void rows(const uint32_t* x, int64_t d2, const __m512i* w, c10::BFloat16* out, int64_t os, int64_t b0, int64_t b1) {
  constexpr int NB = K <= 2 ? 4 : (K <= 8 ? 2 : 1);  // at most 16 accumulators
  tile<K, NB>(x, d2, w, out, os, b0, b1);
}

using RowsFn = void (*)(const uint32_t*, int64_t, const __m512i*, c10::BFloat16*, int64_t, int64_t, int64_t);
constexpr RowsFn kRows[17] = {nullptr,  rows<1>,  rows<2>,  rows<3>,  rows<4>,  rows<5>,  rows<6>,  rows<7>, rows<8>,
                              rows<9>, rows<10>, rows<11>, rows<12>, rows<13>, rows<14>, rows<15>, rows<16>};

at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.device().is_cpu(),
              "linear_bf16: x must be a 2-D bf16 CPU tensor");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == 32 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(),
              "linear_bf16: w must be packed by dynatree_lib.kernels.pack");
  TORCH_CHECK(x.size(1) == 2 * w.size(1), "linear_bf16: x has ", x.size(1), " features, w ", 2 * w.size(1));
  const auto xc = x.contiguous();
  const int64_t k = xc.size(0), d2 = w.size(1), nblk = w.size(0), os = nblk * 16;
  auto out = at::empty({k, os}, x.options());
  const auto* xp = reinterpret_cast<const uint32_t*>(xc.data_ptr<c10::BFloat16>());
  const auto* wp = reinterpret_cast<const __m512i*>(w.data_ptr<c10::BFloat16>());
  auto* op = out.data_ptr<c10::BFloat16>();
  // Blocks of outputs split between threads; for more than 16 rows (a prompt) each stretch of 8 blocks is
  // used by every 16-row group while it sits in cache, so the weight still streams from memory once.
  at::parallel_for(0, nblk, 8, [&](int64_t b0, int64_t b1) {
    for (int64_t s = b0; s < b1; s += 8) {
      const int64_t e = std::min<int64_t>(s + 8, b1);
      for (int64_t j = 0; j < k; j += 16)
        kRows[std::min<int64_t>(16, k - j)](xp + j * d2, d2, wp, op + j * os, os, s, e);
    }
  });
  return out;
}

// Shapes for tracing: symbolic sizes stay symbolic (one compiled graph serves every tree size).
at::Tensor linear_bf16_meta(const at::Tensor& x, const at::Tensor& w) {
  return at::empty_symint({x.sym_size(0), w.sym_size(0) * 16}, x.options());
}

}  // namespace

TORCH_LIBRARY(dynatree, m) { m.def("linear_bf16(Tensor x, Tensor w) -> Tensor"); }
TORCH_LIBRARY_IMPL(dynatree, CPU, m) { m.impl("linear_bf16", linear_bf16); }
TORCH_LIBRARY_IMPL(dynatree, Meta, m) { m.impl("linear_bf16", linear_bf16_meta); }
