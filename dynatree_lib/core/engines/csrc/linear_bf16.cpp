// dynatree::linear_bf16(x, w_packed): x [k, d] @ w.T in bf16 for a few rows at memory speed (AVX512-BF16);
// dynatree::attention_bf16(q, k, v, mask): grouped-query attention of a few new tokens over a bf16 cache;
// dynatree::forward_bf16(...): a whole Llama forward with both, in one parallel region (see "the whole forward");
// dynatree::eagle3_bf16(...): an EAGLE-3 head's step (its one layer, norm and head) by the same code (see HeadRequest),
// its weights in bf16 or, where they lie on int8 rows (see "int8 rows"), as those int8 values.
//
// Why: decoding reads every weight once per forward, so a forward of k <= 16 tokens should cost about what
// one token costs. oneDNN's bf16 matmul on plain weights re-lays the weight out on every call, so it cannot
// read at memory speed; its prepacked form needs inductor's freezing, which keeps graphs out of the on-disk cache.
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
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

namespace {

// 16 bf16 values as fp32 and back (rounding to nearest even), and an fp32 vector rounded to bf16 in place.
inline __m512 load16(const c10::BFloat16* p) { return _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i*)p)); }
inline __m512 round16(__m512 v) { return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(v)); }  // to bf16 and back
inline void store16(c10::BFloat16* p, __m512 v) { _mm256_storeu_si256((__m256i*)p, (__m256i)_mm512_cvtneps_pbh(v)); }

// Software prefetch distance, in 64-byte lines. The hardware prefetcher falls behind once each line feeds
// several rows, so the kernel asks for each line this far ahead of its use. Prefetching past the end of the
// weight is harmless.
constexpr int64_t kPrefetch = 64;
// Where a weight line is used by one pass only (at most 8 rows), it is prefetched non-temporally: it then
// does not displace the shared L3's other contents (the KV cache, the activations, a draft model's weights)
// on its way out. A line that a second 8-row pass reads again keeps the T0 hint.

// ---- int8 rows ----
// A weight whose every row is int8 values times one power of two (kernels.int8_rows) is held as those int8 values,
// packed as a bf16 weight is (a 32-byte line: two input features for 16 outputs), and each output's power of two.
// A line's int8 values become bf16 exactly (small integers), VDPBF16PS sums their products with x, and the sums
// are scaled by the outputs' powers of two at the end: scaling by a power of two commutes with every fp32 rounding
// while nothing is subnormal or overflows (VDPBF16PS flushes subnormals, which the unscaled sums may not be), so the
// result is bit for bit what the same kernel computes from the bf16 weight (the int8 values times their powers of
// two), from half the bytes.
inline __m512bh int8_line(const __m256i* p) {
  const __m256i q = _mm256_loadu_si256(p);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  return _mm512_cvtne2ps_pbh(hi, lo);  // outputs 0-7 (lo) in the low half, 8-15 in the high half
}

// A weight as the kernels read it: its packed lines (bf16: 64 bytes; int8: 32) and, for int8 rows, each output's
// power of two (null for bf16).
struct Weight {
  const char* lines;
  const float* scale;
};

// K rows of x against 16-output blocks [b0, b1), one block at a time: each thread reads its share of the weight
// as one sequential stream (interleaving 2 or 4 blocks, for more independent sums per row, breaks the stream
// into several and reads slower). Each row keeps two sums, over even and over odd feature pairs, added at the
// end: with one sum a row is one chain of dependent VDPBF16PS (each waits for the last one's result), which is
// latency-bound: slower than the weights arrive when they come from cache. Hence at most 8 rows a pass
// (16 sums in registers); more rows take more passes over a block that sits in L1/L2. Every output adds its
// products in one order whatever the rows: the same bits alone or batched.
// The epilogue: Store writes bf16(x @ w.T); Add a residual stream, out = bf16(out + bf16(x @ w.T)) (eager's rounding
// of `x + linear(..)`); Argmax writes nothing, but keeps each row's first largest bf16 output and its index in
// best[row] (the blocks come in ascending order, so a later block replaces only a strictly larger value): torch's
// argmax of the stored outputs (NaN aside: a NaN is never taken), without storing them.
enum Epilogue { kStore, kAdd, kArgmax };
using Best = std::pair<float, int64_t>;  // a row's largest output so far and its index (-1: none yet)

inline void keep_best(__m512 y, int64_t b, Best& best) {
  const __m512 v = round16(y);
  const __m512 ok = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_ps(-INFINITY));
  const float m = _mm512_reduce_max_ps(ok);
  if (best.second >= 0 && !(m > best.first)) return;
  best = {m, b * 16 + __builtin_ctz(_mm512_cmp_ps_mask(ok, _mm512_set1_ps(m), _CMP_EQ_OQ))};
}

template <int K, int Epi, _mm_hint Hint, bool Int8>
void rows(const uint32_t* x, int64_t d2, Weight w, c10::BFloat16* out, int64_t ostride, Best* best, int64_t b0,
          int64_t b1) {
  constexpr int64_t kLine = Int8 ? 32 : 64;  // bytes of a packed line
  for (int64_t b = b0; b < b1; ++b) {
    __m512 even[K], odd[K];
    for (int j = 0; j < K; ++j) even[j] = odd[j] = _mm512_setzero_ps();
    const char* p = w.lines + b * d2 * kLine;
    const auto line = [p](int64_t c) {
      if constexpr (Int8) return int8_line(reinterpret_cast<const __m256i*>(p) + c);
      else return (__m512bh)_mm512_loadu_si512(reinterpret_cast<const __m512i*>(p) + c);
    };
    int64_t c = 0;
    for (; c + 1 < d2; c += 2) {
      _mm_prefetch(p + (c + kPrefetch) * kLine, Hint);
      if constexpr (!Int8) _mm_prefetch(p + (c + 1 + kPrefetch) * kLine, Hint);  // int8: both lines in one
      const __m512bh v0 = line(c), v1 = line(c + 1);
      for (int j = 0; j < K; ++j) {
        even[j] = _mm512_dpbf16_ps(even[j], v0, (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c]));
        odd[j] = _mm512_dpbf16_ps(odd[j], v1, (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c + 1]));
      }
    }
    if (c < d2) {  // an odd number of feature pairs: the last one goes to the even sum
      const __m512bh v0 = line(c);
      for (int j = 0; j < K; ++j)
        even[j] = _mm512_dpbf16_ps(even[j], v0, (__m512bh)_mm512_set1_epi32((int)x[j * d2 + c]));
    }
    for (int j = 0; j < K; ++j) {
      __m512 y = _mm512_add_ps(even[j], odd[j]);
      if constexpr (Int8) y = _mm512_mul_ps(y, _mm512_loadu_ps(w.scale + b * 16));  // exact: powers of two
      if constexpr (Epi == kArgmax) {
        keep_best(y, b, best[j]);
      } else {
        c10::BFloat16* o = out + j * ostride + b * 16;
        store16(o, Epi == kAdd ? _mm512_add_ps(round16(y), load16(o)) : y);
      }
    }
  }
}

constexpr int kPass = 8;  // rows per pass over a block
using RowsFn = void (*)(const uint32_t*, int64_t, Weight, c10::BFloat16*, int64_t, Best*, int64_t, int64_t);
template <int Epi, _mm_hint Hint, bool Int8>  // rows<K> by K, for one epilogue, prefetch hint and weight format
constexpr RowsFn kRows[kPass + 1] = {nullptr,
                                     rows<1, Epi, Hint, Int8>, rows<2, Epi, Hint, Int8>, rows<3, Epi, Hint, Int8>,
                                     rows<4, Epi, Hint, Int8>, rows<5, Epi, Hint, Int8>, rows<6, Epi, Hint, Int8>,
                                     rows<7, Epi, Hint, Int8>, rows<8, Epi, Hint, Int8>};

template <int Epi, bool Int8>  // kRows for an epilogue, a weight format and a prefetch hint
const RowsFn* rows_fns(bool once) {
  return once ? kRows<Epi, _MM_HINT_NTA, Int8> : kRows<Epi, _MM_HINT_T0, Int8>;
}

template <bool Int8>
const RowsFn* rows_fns(Epilogue epi, bool once) {
  return epi == kStore ? rows_fns<kStore, Int8>(once)
                       : epi == kAdd ? rows_fns<kAdd, Int8>(once) : rows_fns<kArgmax, Int8>(once);
}

// k rows of x [k, 2 * d2] against output blocks [b0, b1): each stretch of 8 blocks serves every 8-row pass while
// it sits in cache, so the weight streams from memory once whatever k is.
// Argmax (best: [k], see Epilogue) where `best` is given, else Store or, where `add`, Add.
void linear_blocks(const uint32_t* x, int64_t k, int64_t d2, Weight w, c10::BFloat16* out, int64_t os, int64_t b0,
                   int64_t b1, bool add = false, Best* best = nullptr) {
  const bool once = k <= kPass;  // one pass: each weight line is read once (non-temporal prefetch)
  const Epilogue epi = best ? kArgmax : add ? kAdd : kStore;
  const RowsFn* fns = w.scale ? rows_fns<true>(epi, once) : rows_fns<false>(epi, once);
  for (int64_t s = b0; s < b1; s += 8) {
    const int64_t e = std::min<int64_t>(s + 8, b1);
    for (int64_t j = 0; j < k; j += kPass)
      fns[std::min<int64_t>(kPass, k - j)](x + j * d2, d2, w, best ? nullptr : out + j * os, os,
                                           best ? best + j : nullptr, s, e);
  }
}

// ---- AMX tiles ----
// Where the CPU has AMX (and the build its intrinsics: -mamx-tile -mamx-bf16), the same packed weights multiply
// through tiles. A packed block's 16 lines from line 16s on are exactly a B tile of TDPBF16PS (16 rows of feature
// pairs for 16 outputs, 64 bytes a row), so the weights need no other layout. Rows go through in tiles of at most
// 16 (M = k rows where k <= 16, else 16, the last tile reading the buffers' zero padding: `padded_rows`), and each
// output adds its 32-feature products in one order, s = 0, 1, ..., whatever the rows: a row's sums depend on its
// own inputs only, so a token verified in a tree gets the bits it gets alone (TDPBF16PS computes each row of a
// tile by itself). These are not the AVX512 path's bits (that path sums even and odd feature pairs apart), so a
// run takes one path for all its forwards: the engine's `isa`.
// Linux hands a process the tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA):
// amx_grant() asks once. Every call loads its tile configuration and releases the tiles at its end, so that other
// code in the process (oneDNN) can use them in between.
int64_t padded_rows(int64_t k) { return k <= 16 ? k : (k + 15) / 16 * 16; }

#ifdef __AMX_BF16__
#include <sys/syscall.h>
#include <unistd.h>

constexpr bool kAmxBuilt = true;

int64_t amx_grant() {
  static const int64_t status = [] {
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0 ? int64_t{0} : int64_t{errno};
  }();
  return status;
}

// gcc's tile intrinsics are asm statements that name no memory: a compiler barrier before a tile load orders the
// stores that wrote its memory (a widened tile, a transposed key tile, the activations), and one after a tile store
// orders the loads that read it.
inline void memory_fence() { asm volatile("" ::: "memory"); }

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0 to n - 1 of 64 bytes a row: the first `rows_of` of them with `rows` rows, the others with 16.
void configure(int n, int rows_of, int rows) {
  TileConfig c;
  for (int t = 0; t < n; ++t) {
    c.rows[t] = t < rows_of ? rows : 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// tiles 0-3: sums (M rows of 16 fp32); 4: M rows of x (32 features); 5-7: weight tiles (16 rows of feature pairs).
// Past 16 rows every tile has 16 rows, and tile 5 holds a second tile of rows in sums_2xN.
void configure_tiles(int M) { configure(8, 5, M); }

// A weight tile of an int8-rows block (16 lines of 32 bytes) widened to bf16 (exact, see "int8 rows") in `buf`.
inline const char* widened_tile(const char* p, uint16_t* buf) {
  for (int l = 0; l < 16; ++l)
    _mm512_storeu_si512(buf + 32 * l, (__m512i)int8_line(reinterpret_cast<const __m256i*>(p) + l));
  memory_fence();
  return reinterpret_cast<const char*>(buf);
}

// A weight tile (16 lines from line 16s of a block at p): prefetched kPrefetch lines ahead, widened where int8.
template <bool Int8>
inline const char* weight_tile(const char* p, int64_t s, uint16_t* wide) {
  constexpr int64_t kLine = Int8 ? 32 : 64;
  const char* t = p + s * 16 * kLine;
  for (int64_t l = 0; l < 16; l += Int8 ? 2 : 1) _mm_prefetch(t + (kPrefetch + l) * kLine, _MM_HINT_T0);
  if constexpr (Int8) return widened_tile(t, wide);
  else return t;
}

// The weight tiles of blocks [b, b + NB): tile(i, s) is block b + i's tile from line 16s on (weight_tile).
template <int NB, bool Int8>
struct WeightTiles {
  static constexpr int64_t kLine = Int8 ? 32 : 64;
  const char* blk[NB];
  alignas(64) uint16_t wide[Int8 ? NB : 1][512];
  WeightTiles(Weight w, int64_t d2, int64_t b) {
    for (int i = 0; i < NB; ++i) blk[i] = w.lines + (b + i) * d2 * kLine;
  }
  const char* operator()(int i, int64_t s) { return weight_tile<Int8>(blk[i], s, wide[Int8 ? i : 0]); }
};

// One tile of rows (M, at most 16, from x; row stride xs bytes) against blocks [b, b + NB): sums[i] = [M][16] fp32
// (a row of 64 bytes). Four chains of sums, x's tile loaded once a step for all of them.
template <int NB, bool Int8>
void sums_1xN(const char* x, int64_t xs, int64_t d2, Weight w, int64_t b, float* sums) {
  WeightTiles<NB, Int8> tile(w, d2, b);
  _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  memory_fence();
  for (int64_t s = 0; s < d2 / 16; ++s) {
    _tile_loadd(4, x + 64 * s, xs);
    _tile_loadd(5, tile(0, s), 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NB > 1) { _tile_loadd(6, tile(1, s), 64); _tile_dpbf16ps(1, 4, 6); }
    if constexpr (NB > 2) { _tile_loadd(7, tile(2, s), 64); _tile_dpbf16ps(2, 4, 7); }
    if constexpr (NB > 3) { _tile_loadd(5, tile(3, s), 64); _tile_dpbf16ps(3, 4, 5); }
  }
  _tile_stored(0, sums, 64);
  if constexpr (NB > 1) _tile_stored(1, sums + 256, 64);
  if constexpr (NB > 2) _tile_stored(2, sums + 512, 64);
  if constexpr (NB > 3) _tile_stored(3, sums + 768, 64);
  memory_fence();
}

// Two tiles of 16 rows against blocks [b, b + NB), NB <= 2: each weight tile loaded once for both tiles of rows
// (half the loads a product of sums_1xN's). sums[2 g + i] = [16][16]: rows 16 g.. against block b + i.
template <int NB, bool Int8>
void sums_2xN(const char* x, int64_t xs, int64_t d2, Weight w, int64_t b, float* sums) {
  WeightTiles<NB, Int8> tile(w, d2, b);
  _tile_zero(0);
  _tile_zero(2);
  if constexpr (NB > 1) { _tile_zero(1); _tile_zero(3); }
  memory_fence();
  for (int64_t s = 0; s < d2 / 16; ++s) {
    _tile_loadd(4, x + 64 * s, xs);
    _tile_loadd(5, x + 16 * xs + 64 * s, xs);
    _tile_loadd(6, tile(0, s), 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (NB > 1) {
      _tile_loadd(7, tile(1, s), 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, sums, 64);
  _tile_stored(2, sums + 512, 64);
  if constexpr (NB > 1) { _tile_stored(1, sums + 256, 64); _tile_stored(3, sums + 768, 64); }
  memory_fence();
}

using SumsFn = void (*)(const char*, int64_t, int64_t, Weight, int64_t, float*);
constexpr SumsFn kSums1[2][5] = {{nullptr, sums_1xN<1, false>, sums_1xN<2, false>, sums_1xN<3, false>,
                                  sums_1xN<4, false>},
                                 {nullptr, sums_1xN<1, true>, sums_1xN<2, true>, sums_1xN<3, true>, sums_1xN<4, true>}};
constexpr SumsFn kSums2[2][3] = {{nullptr, sums_2xN<1, false>, sums_2xN<2, false>},
                                 {nullptr, sums_2xN<1, true>, sums_2xN<2, true>}};

// linear_blocks through tiles: k rows of x [padded_rows(k), 2 * d2] (d2 a multiple of 16) against output blocks
// [b0, b1), with the same epilogues. Each stretch of 4 blocks serves every tile of rows while it sits in cache;
// rows go two tiles at a time where two remain (sums_2xN), else one (sums_1xN). Either way every output adds the
// same products in the same order.
void amx_blocks(const uint32_t* x, int64_t k, int64_t d2, Weight w, c10::BFloat16* out, int64_t os, int64_t b0,
                int64_t b1, bool add = false, Best* best = nullptr) {
  if (b0 >= b1) return;
  configure_tiles(static_cast<int>(std::min<int64_t>(k, 16)));
  alignas(64) float sums[4 * 256];
  const char* xb = reinterpret_cast<const char*>(x);
  const int64_t xs = d2 * 4;  // bytes a row
  const bool int8 = w.scale != nullptr;
  // rows [r0, r0 + rows) of sums tile t (a [16][16] fp32 tile) are outputs of block b
  const auto finish = [&](const float* t, int64_t r0, int64_t rows, int64_t b) {
    for (int64_t r = 0; r < rows; ++r) {
      __m512 y = _mm512_load_ps(t + r * 16);
      if (int8) y = _mm512_mul_ps(y, _mm512_loadu_ps(w.scale + b * 16));  // exact: powers of two
      if (best) {
        keep_best(y, b, best[r0 + r]);
      } else {
        c10::BFloat16* o = out + (r0 + r) * os + b * 16;
        store16(o, add ? _mm512_add_ps(round16(y), load16(o)) : y);
      }
    }
  };
  for (int64_t s = b0; s < b1; s += 4) {
    const int nb = static_cast<int>(std::min<int64_t>(4, b1 - s));
    int64_t j = 0;
    for (; k - j > 16; j += 32)  // two tiles of rows (the second may end in padding)
      for (int i = 0; i < nb; i += 2) {
        const int m = std::min(2, nb - i);
        kSums2[int8][m](xb + j * xs, xs, d2, w, s + i, sums);
        for (int g = 0; g < 2; ++g)
          for (int c = 0; c < m; ++c)
            finish(sums + (2 * g + c) * 256, j + 16 * g, std::clamp<int64_t>(k - j - 16 * g, 0, 16), s + i + c);
      }
    if (j < k) {  // one tile of rows left
      kSums1[int8][nb](xb + j * xs, xs, d2, w, s, sums);
      for (int c = 0; c < nb; ++c) finish(sums + c * 256, j, std::min<int64_t>(16, k - j), s + c);
    }
  }
  _tile_release();
}

// Attention scores through tiles: R query rows (pairs of features, P a row) against 16 cached slots transposed into
// [pair][slot] (the VNNI layout a weight tile has), as fp32 [R][16]. A (row, slot) score is that row's and that slot's
// dot product alone, summed in one order (32 features a step): the same bits whatever rows and slots come with it.
// tile 0: the scores (R rows of 16 slots); 1: R query rows (32 features); 2: 16 slots' keys (16 rows of pairs)
void configure_score_tiles(int R) { configure(3, 2, R); }

void tile_scores(const uint32_t* q, int P, const __m512i* T, float* out) {
  memory_fence();
  _tile_zero(0);
  for (int c = 0; c < P; c += 16) {
    _tile_loadd(1, q + c, P * 4);
    _tile_loadd(2, T + c, 64);
    _tile_dpbf16ps(0, 1, 2);
  }
  _tile_stored(0, out, 64);
  memory_fence();
}

void release_tiles() { _tile_release(); }
#else
constexpr bool kAmxBuilt = false;
void configure_score_tiles(int) {}
void tile_scores(const uint32_t*, int, const __m512i*, float*) {}
void release_tiles() {}
int64_t amx_grant() { return ENOSYS; }
void amx_blocks(const uint32_t*, int64_t, int64_t, Weight, c10::BFloat16*, int64_t, int64_t, int64_t, bool = false,
                Best* = nullptr) {
  TORCH_CHECK(false, "the AMX path was not built (the compiler lacks -mamx-tile -mamx-bf16)");
}
#endif

bool amx_built() { return kAmxBuilt; }

// A call that asks for tiles where there are none is refused before its threads start (no error can leave them).
void check_amx(bool amx) {
  TORCH_CHECK(!amx || kAmxBuilt, "amx=True, but the kernels were built without AMX (-mamx-tile -mamx-bf16)");
  TORCH_CHECK(!amx || amx_grant() == 0, "amx=True, but Linux refused this process the AMX tile state (errno ",
              amx_grant(), ")");
}

// Whether a matmul over d inputs goes through tiles: where asked and d is a whole number of tiles (32 features).
// A shape decides, never the rows: every forward of a run takes the same path for each weight.
inline bool through_tiles(bool amx, int64_t d) { return amx && d % 32 == 0; }

// k rows of x against blocks [b0, b1) by the path `amx` asks for (through_tiles; x padded as padded_rows says).
void matmul_blocks(bool amx, const uint32_t* x, int64_t k, int64_t d2, Weight w, c10::BFloat16* out, int64_t os,
                   int64_t b0, int64_t b1, bool add = false, Best* best = nullptr) {
  if (through_tiles(amx, 2 * d2)) amx_blocks(x, k, d2, w, out, os, b0, b1, add, best);
  else linear_blocks(x, k, d2, w, out, os, b0, b1, add, best);
}

at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w, bool amx) {
  check_amx(amx);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.device().is_cpu(),
              "linear_bf16: x must be a 2-D bf16 CPU tensor");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == 32 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(),
              "linear_bf16: w must be packed by dynatree_lib.core.engines.kernels.pack");
  TORCH_CHECK(x.size(1) == 2 * w.size(1), "linear_bf16: x has ", x.size(1), " features, w ", 2 * w.size(1));
  const int64_t k = x.size(0), d2 = w.size(1), nblk = w.size(0), os = nblk * 16;
  at::Tensor xc = x.contiguous();
  if (through_tiles(amx, 2 * d2) && padded_rows(k) > k)  // the last tile of rows reads zeros
    xc = at::cat({xc, at::zeros({padded_rows(k) - k, x.size(1)}, x.options())});
  auto out = at::empty({k, os}, x.options());
  const auto* xp = reinterpret_cast<const uint32_t*>(xc.data_ptr<c10::BFloat16>());
  const Weight wp{static_cast<const char*>(w.data_ptr()), nullptr};
  auto* op = out.data_ptr<c10::BFloat16>();
  // Blocks of outputs split between threads; for more than 8 rows (a tree, a prompt) each stretch of 8 blocks
  // is used by every 8-row pass while it sits in cache, so the weight still streams from memory once.
  at::parallel_for(0, nblk, 8, [&](int64_t b0, int64_t b1) { matmul_blocks(amx, xp, k, d2, wp, op, os, b0, b1); });
  return out;
}

// Shapes for tracing: symbolic sizes stay symbolic (one compiled graph serves every tree size).
at::Tensor linear_bf16_meta(const at::Tensor& x, const at::Tensor& w, bool amx) {
  return at::empty_symint({x.sym_size(0), w.sym_size(0) * 16}, x.options());
}


// dynatree::int8_rows(w): a bf16 weight [n, d] on int8 rows as (int8 values [n, d], each row's power of two [n]
// fp32), or two empty tensors where a row is not (tests/test_int8_rows.py, `split`, says the same in torch). One
// pass over the weight, one row at a time: no fp32 copy of the whole weight, no other kernel run at load.
std::tuple<at::Tensor, at::Tensor> int8_rows(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16 && w.device().is_cpu(),
              "int8_rows: w must be a 2-D bf16 CPU tensor");
  const auto wc = w.contiguous();
  const int64_t n = wc.size(0), d = wc.size(1);
  auto q = at::empty({n, d}, wc.options().dtype(at::kChar));
  auto s = at::empty({n}, wc.options().dtype(at::kFloat));
  const auto* wp = wc.data_ptr<c10::BFloat16>();
  auto* qp = q.data_ptr<int8_t>();
  auto* sp = s.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    const c10::BFloat16* row = wp + r * d;
    float mx = 0.0f;
    for (int64_t c = 0; c < d; ++c) mx = std::max(mx, std::fabs(static_cast<float>(row[c])));
    const float x = mx / 127.0f;  // the row's power of two: the smallest 2^e >= x (1 for a row of zeros)
    int e = 0;
    const float m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
    const float scale = mx > 0.0f ? std::ldexp(1.0f, m == 0.5f ? e - 1 : e) : 1.0f;
    for (int64_t c = 0; c < d; ++c) {
      const float v = static_cast<float>(row[c]) / scale;  // exact: a power of two
      if (v != std::nearbyint(v) || std::fabs(v) > 127.0f) return {at::empty({0}), at::empty({0})};
      qp[r * d + c] = static_cast<int8_t>(v);
    }
    sp[r] = scale;
  }
  return {q, s};
}

// ---- attention ----
// Why: a tree's attention over the cache with ATen's bmm copies each layer's cache slice first (the slice
// of a [KV, slots, hd] buffer is not contiguous), for both products of every layer. Here each query row reads
// its KV head's rows in place.
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
// head kh; C is the head size in 16-lane vectors. Every (row, slot) score, weight and (row, feature) sum is
// computed by the same operations in the same order whatever the rows around it, so the layout of the loops
// below is free: it is chosen for throughput (several rows' dot-product chains at once, the softmax weights
// packed in a register, the value sums in registers), and gives the bits a one-row-at-a-time loop gives.
// A cached key or value row of hd features into L1. The cache rows of a layer come from L3 or memory (the weights
// streamed since evict them), and each 16-slot step of the scores (or each value row) waits for its loads: asking
// for the next step's rows first keeps the loads ahead of the arithmetic.
constexpr int64_t kValuesAhead = 8;  // value rows
inline void prefetch_row(const c10::BFloat16* row, int64_t hd) {
  for (int64_t b = 0; b < hd * 2; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row) + b, _MM_HINT_T0);
}

template <int C, bool Amx>
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
  // 4 at a time so that 4 independent dot-product chains overlap (one row's chain is latency-bound), or, on AMX,
  // all R through tiles (tile_scores)
  alignas(64) __m512i T[P];
  __m512 mx[kChunk];
  for (int64_t r = 0; r < R; ++r) mx[r] = _mm512_set1_ps(-INFINITY);
  if constexpr (Amx) configure_score_tiles(static_cast<int>(R));
  for (int64_t j = 0; j < kvp; j += 16) {
    const int64_t m = std::min<int64_t>(16, kv - j);
    for (int64_t l = j + 16; l < std::min(j + 32, kv); ++l) prefetch_row(K + l * ks, hd);  // the next 16 keys
    for (int c = 0; c < P; c += 16) {
      __m512i* t = T + c;
      for (int64_t l = 0; l < 16; ++l)
        t[l] = l < m ? _mm512_loadu_si512(K + (j + l) * ks + 2 * c) : _mm512_setzero_si512();
      transpose16(t);
    }
    const __mmask16 live = (__mmask16)((1u << m) - 1);
    const auto keep = [&](int64_t r, __m512 acc) {  // row r's scores of slots j..j+15: masked, scaled, kept
      // mask row slots j..j+15 as fp32 (bf16 -> fp32 is a 16-bit shift)
      const __m256i mb = _mm256_maskz_loadu_epi16(live, mp + tok[r] * ms + j);
      const __m512 mk = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(mb), 16));
      const __mmask16 vis = live & _mm512_cmp_ps_mask(mk, _mm512_set1_ps(kHidden), _CMP_GT_OQ);
      const __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis,
                                           _mm512_fmadd_ps(acc, _mm512_set1_ps(scale), mk));
      _mm512_storeu_ps(S + r * kvp + j, sc);
      mx[r] = _mm512_max_ps(mx[r], sc);
    };
    if constexpr (Amx) {
      alignas(64) float tile[16 * 16];
      tile_scores(qpairs[0], P, T, tile);
      for (int64_t r = 0; r < R; ++r) keep(r, _mm512_load_ps(tile + 16 * r));
      continue;
    }
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
      for (int b = 0; b < nb; ++b) keep(r + b, acc[b]);
    }
  }
  if constexpr (Amx) release_tiles();
  // softmax weights in place; their sum adds the nonzero weights in slot order, 16 lanes by rank (not by
  // slot: in a tree a node's ancestors sit at other slots than the same tokens in a plain sequence, but
  // their ranks among visible slots are the same). The nonzero weights are packed in a register and stored
  // whole (a compress straight to memory is microcoded on Zen 4).
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
        if (l + kValuesAhead < kv) prefetch_row(V + (l + kValuesAhead) * vs, hd);
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
template <bool Amx>  // attend<C> by head size / 16, scores through tiles or not
constexpr AttendFn kAttend[17] = {nullptr,         nullptr, attend<2, Amx>,  nullptr, attend<4, Amx>,  nullptr,
                                  attend<6, Amx>,  nullptr, attend<8, Amx>,  nullptr, attend<10, Amx>, nullptr,
                                  attend<12, Amx>, nullptr, attend<14, Amx>, nullptr, attend<16, Amx>};
AttendFn attend_fn(int64_t hd, bool amx) { return amx ? kAttend<true>[hd / 16] : kAttend<false>[hd / 16]; }

at::Tensor attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                          bool amx) {
  check_amx(amx);
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
  // tasks: (KV head, chunk of up to kChunk of its rows); threads only when there is work enough to pay for
  // waking them: below 2048 (row, slot, KV head) triples one thread does all tasks
  const int64_t chunk = kChunk, per = (rows + chunk - 1) / chunk, tasks = KV * per;
  const int64_t grain = rows * kv * KV < 2048 ? tasks : 1;
  const int64_t kvp = (kv + 15) / 16 * 16;
  const AttendFn fn = attend_fn(hd, amx);
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

at::Tensor attention_bf16_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                               bool amx) {
  return at::empty_symint({q.sym_size(1), q.sym_size(0) * q.sym_size(2)}, q.options());
}


// ---- the whole forward ----
// Why: a compiled graph of the same layers calls a dozen kernels a layer (matmuls, attention, norms, RoPE, the
// cache writes, SiLU, residual adds), each its own parallel region: every region pays its start-up and restarts
// its weight stream cold, so a one-token forward stays well above its bandwidth bound although each matmul alone
// reads at memory speed. Here the whole forward is one parallel region: every thread streams its share of each
// weight in turn and the threads meet at a barrier (7 a layer) between the steps that need a whole row
// (tools/forward_bench.py compares the two). The arithmetic is the graph's, rounded where eager rounds (RMSNorm
// statistics in fp32, RoPE and SiLU from bf16 operands, bf16 residual adds), and every row is computed from its
// own inputs in a fixed order: a token's bits do not depend on the rows that come with it.

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

using bf16 = c10::BFloat16;

// The model as forward_bf16 takes it: the embedding, plain [V, d] or packed by kernels.pack (a tied model's head,
// its one copy: row r's features 2c, 2c + 1 at [r / 16, c, 2 (r % 16)]); the matmul weights packed and stacked over
// layers (wqkv: the q, k and v projections; w13: gate and up); the norms' weights; the packed head; the flat KV
// caches, written in place ([layer, KV head, slot] rows of head_dim); the RoPE tables [position, head_dim].
// `scales` (a head's step only): the powers of two of its six matmul weights' outputs (fc, wqkv, wo, w13, w2, head),
// fp32, concatenated in that order, for those of them held as int8 rows (see "int8 rows"; the others bf16).
struct LlamaWeights {
  const at::Tensor &embed, &wqkv, &wo, &w13, &w2, &ln1, &ln2, &norm, &head, &kc, &vc, &cos, &sin;
  int64_t H, KV;  // query heads, key-value heads
  double eps;     // RMSNorm's
  const at::Tensor* scales = nullptr;
};

// One call: logits of `tokens` at `positions`, their keys and values written to cache `slots`, attending through
// the additive `mask` [q, kv] to slots [0, kv). `last_only`: of the last token only; `greedy`: each row's argmax
// (int64, the first index of the largest logit) instead of its logits. `features` (optional, [q, k, d]): the
// residual stream entering layer `feature_layers[j]` of every row is copied to features[:, j] (an EAGLE-3 head's
// inputs, taken from this forward instead of a second one).
struct Request {
  const at::Tensor &tokens, &positions, &slots, &mask;
  bool last_only, greedy;
  const c10::optional<at::Tensor>& features;
  at::IntArrayRef feature_layers;
  bool amx = false;  // the matmuls through AMX tiles where they take them (through_tiles)
};

// An EAGLE-3 head's step (core/drafts/heads/eagle3.py) is a one-layer forward of this kind with three differences, which a
// HeadRequest asks for: (1) the residual stream entering the layer is not the tokens' embedding but row
// `input_rows[r]` of `inputs` for row r (-1: a zero row), through the packed `fc` where given (the target's fused
// features, 3d wide) or as it is (a drafted node's parent's output, d wide); (2) q, k and v read 2d inputs, the
// token's embedding and that residual each RMS-normalised alone (ln1 [1, 2d]: input_layernorm's weight, then
// hidden_norm's); (3) the layer's outputs (before the final norm: a child's input) are written to `outputs`
// [R, d], a ring: slot s in row s mod R (of a call's rows, those of its last R slots). Everything else (RoPE,
// attention over the head's cache, the MLP, norm, head) is the Llama layer's code.
struct HeadRequest {
  const at::Tensor &inputs, &input_rows;
  const c10::optional<at::Tensor>& fc;
  const at::Tensor& outputs;
};

// The sizes of a call: q tokens and nout output rows; hidden size d, L layers; H query and KV key-value heads of
// hd features; kv visible slots, n_slots per layer and KV head in the cache; kin inputs and ncol outputs of the q,
// k and v projection (kin = d, or 2d in a head's step); the MLP's inter; V logits; E embedding rows.
struct Dims {
  int64_t q, nout, d, L, H, KV, hd, kv, n_slots, kin, ncol, inter, V, E;
};

// Rows and features of the embedding, plain or packed.
int64_t embed_rows(const at::Tensor& e) { return e.dim() == 2 ? e.size(0) : e.size(0) * 16; }
int64_t embed_features(const at::Tensor& e) { return e.dim() == 2 ? e.size(1) : e.size(1) * 2; }

// A matmul weight's dtype: bf16, or int8 rows where the call has their scales.
bool matmul_type_ok(const at::Tensor& w, const at::Tensor* scales) {
  return w.scalar_type() == at::kBFloat16 || (scales && w.scalar_type() == at::kChar);
}

// Dtypes, layouts and ranks: index vectors of int64, everything else bf16 with the weights packed and stacked.
void check_layouts(const LlamaWeights& w, const Request& r) {
  for (const auto* t : {&r.tokens, &r.positions, &r.slots})
    TORCH_CHECK(t->dim() == 1 && t->scalar_type() == at::kLong && t->is_contiguous(),
                "forward_bf16: tokens, positions, slots must be contiguous 1-D int64");
  for (const auto* t : {&r.mask, &w.embed, &w.ln1, &w.ln2, &w.norm, &w.kc, &w.vc, &w.cos, &w.sin})
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->device().is_cpu() && t->is_contiguous(),
                "forward_bf16: contiguous bf16 CPU tensors only");
  for (const auto* t : {&w.wqkv, &w.wo, &w.w13, &w.w2, &w.head})
    TORCH_CHECK(matmul_type_ok(*t, w.scales) && t->device().is_cpu() && t->is_contiguous(),
                "forward_bf16: contiguous bf16 CPU tensors only (int8 rows where scales are given)");
  TORCH_CHECK((w.embed.dim() == 2 || (w.embed.dim() == 3 && w.embed.size(2) == 32)) && r.mask.dim() == 2 &&
                  w.kc.dim() == 2 && w.cos.dim() == 2 && w.ln1.dim() == 2 && w.norm.dim() == 1 && w.head.dim() == 3 && w.wqkv.dim() == 4 && w.wo.dim() == 4 &&
                  w.w13.dim() == 4 && w.w2.dim() == 4,
              "forward_bf16: weights must be packed by dynatree_lib.core.engines.kernels.pack and stacked over layers");
}

// The sizes of a call, each checked against the others and against what the kernels take (`head`: a head's step).
Dims check_sizes(const LlamaWeights& w, const Request& r, bool head) {
  const int64_t q = r.tokens.size(0), d = embed_features(w.embed), L = w.wqkv.size(0), hd = w.kc.size(1);
  const int64_t kv = r.mask.size(1);
  const int64_t H = w.H, KV = w.KV;
  TORCH_CHECK(q > 0 && r.positions.size(0) == q && r.slots.size(0) == q && r.mask.size(0) == q,
              "forward_bf16: ", q, " tokens need as many positions and slots and a [", q, ", kv] mask");
  TORCH_CHECK(hd % 32 == 0 && hd <= 256 && KV > 0 && H % KV == 0 && d % 16 == 0 && L > 0, "forward_bf16: head dim ",
              hd, ", hidden size ", d, ", ", H, " / ", KV, " heads, ", L, " layers");
  const int64_t d2 = d / 2, ncol = (H + 2 * KV) * hd, inter = w.w13.size(1) * 8, n_slots = w.kc.size(0) / (L * KV);
  const int64_t kin = head ? 2 * d : d;
  TORCH_CHECK(inter % 16 == 0, "forward_bf16: intermediate size ", inter, " is not a multiple of 16");
  TORCH_CHECK(w.wqkv.size(1) * 16 == ncol && w.wqkv.size(2) * 2 == kin && w.wo.size(1) * 16 == d &&
                  w.wo.size(2) * 2 == H * hd && w.w13.size(2) == d2 && w.w2.size(1) * 16 == d &&
                  w.w2.size(2) * 2 == inter && w.head.size(1) == d2 && w.ln1.size(1) == kin && w.norm.size(0) == d,
              "forward_bf16: weights must be packed by dynatree_lib.core.engines.kernels.pack and stacked over layers");
  TORCH_CHECK(w.kc.sizes() == w.vc.sizes() && w.kc.size(0) == L * KV * n_slots && w.cos.size(1) == hd,
              "forward_bf16: caches must be [layers * KV heads * slots, head dim]");
  return {q, r.last_only ? 1 : q, d, L, H, KV, hd, kv, n_slots, kin, ncol, inter, w.head.size(0) * 16,
          embed_rows(w.embed)};
}

// The features buffer, where asked: [q, len(feature_layers), d] bf16, each layer id in [0, L] (L: after the norm).
void check_features(const Request& r, const Dims& n) {
  if (!r.features.has_value()) {
    TORCH_CHECK(r.feature_layers.empty(), "forward_bf16: feature_layers given without a features buffer");
    return;
  }
  const at::Tensor& f = *r.features;
  const int64_t k = static_cast<int64_t>(r.feature_layers.size());
  TORCH_CHECK(f.scalar_type() == at::kBFloat16 && f.device().is_cpu() && f.is_contiguous() && f.dim() == 3 &&
                  f.size(0) == n.q && f.size(1) == k && f.size(2) == n.d,
              "forward_bf16: features must be a contiguous bf16 [", n.q, ", ", k, ", ", n.d, "] buffer");
  for (int64_t i : r.feature_layers)
    TORCH_CHECK(i >= 0 && i <= n.L, "forward_bf16: feature layer ", i, " outside [0, ", n.L, "]");
}

// The RoPE table row of a token at position p: p, or in a head's step p - 1 (EAGLE-3 places the token at p at its
// feature's position), the first token's at 0 instead of -1 (its keys are never read by another row, and its own row
// sees its slot alone: the attention's weight is 1 whatever its query and key).
inline int64_t rope_row(int64_t p, bool head) { return head ? std::max<int64_t>(p - 1, 0) : p; }

// Every token id, position and slot in range: the threads index with them unchecked.
void check_indices(const LlamaWeights& w, const Request& r, const Dims& n, bool head) {
  const auto* tk = r.tokens.data_ptr<int64_t>();
  const auto* ps = r.positions.data_ptr<int64_t>();
  const auto* sl = r.slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < n.q; ++i) {
    TORCH_CHECK(tk[i] >= 0 && tk[i] < n.E, "forward_bf16: token id ", tk[i], " outside the vocabulary");
    TORCH_CHECK(ps[i] >= 0 && rope_row(ps[i], head) < w.cos.size(0), "forward_bf16: position ", ps[i],
                " past the RoPE table");
    TORCH_CHECK(sl[i] >= 0 && sl[i] < n.kv && n.kv <= n.n_slots, "forward_bf16: slot ", sl[i], " outside the mask");
  }
}

// A head's six matmul weights in the order their scales are concatenated, and where each one's scales start in
// `scales` (entry 6: their total): one output each.
enum HeadMatmul { kFc, kWqkv, kWo, kW13, kW2, kHead };
std::array<int64_t, 7> scale_offsets(const Dims& n) {
  const std::array<int64_t, 6> outputs{n.d, n.ncol, n.d, 2 * n.inter, n.d, n.V};
  std::array<int64_t, 7> at{};
  for (int i = 0; i < 6; ++i) at[i + 1] = at[i] + outputs[i];
  return at;
}

// A head's step: its inputs [rows, d] (or [rows, 3d] with fc [d / 16, 3d / 2, 32]), a source row in [-1, rows) for
// each new row, and an outputs buffer [slots, d] holding every slot written.
void check_head(const HeadRequest& h, const Dims& n, const at::Tensor* scales) {
  const at::Tensor &in = h.inputs, &ir = h.input_rows, &out = h.outputs;
  for (const auto* t : {&in, &out})
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 && t->device().is_cpu() && t->is_contiguous() && t->dim() == 2,
                "eagle3_bf16: inputs and outputs must be contiguous 2-D bf16 CPU tensors");
  TORCH_CHECK(ir.dim() == 1 && ir.size(0) == n.q && ir.scalar_type() == at::kLong && ir.is_contiguous(),
              "eagle3_bf16: input_rows must be contiguous int64 [", n.q, "]");
  const int64_t width = h.fc.has_value() ? 3 * n.d : n.d;
  TORCH_CHECK(in.size(1) == width, "eagle3_bf16: inputs must be ", width, " wide", h.fc ? " (through fc)" : "");
  if (h.fc.has_value())
    TORCH_CHECK(matmul_type_ok(*h.fc, scales) && h.fc->is_contiguous() && h.fc->dim() == 3 &&
                    h.fc->size(0) * 16 == n.d && h.fc->size(1) * 2 == width,
                "eagle3_bf16: fc must be packed by dynatree_lib.core.engines.kernels.pack from [", n.d, ", ", width, "]");
  TORCH_CHECK(out.size(1) == n.d && out.size(0) > 0, "eagle3_bf16: outputs must be [rows, ", n.d, "]");
  TORCH_CHECK(n.L == 1, "eagle3_bf16: a head has one layer, got ", n.L);
  if (scales)
    TORCH_CHECK(scales->scalar_type() == at::kFloat && scales->is_contiguous() && scales->dim() == 1 &&
                    scales->numel() == scale_offsets(n)[6],
                "eagle3_bf16: scales must be fp32 [", scale_offsets(n)[6], "] (fc, wqkv, wo, w13, w2, head outputs)");
  const auto* rows = ir.data_ptr<int64_t>();
  for (int64_t i = 0; i < n.q; ++i)
    TORCH_CHECK(rows[i] >= -1 && rows[i] < in.size(0), "eagle3_bf16: input row ", rows[i], " outside the inputs");
}

// The checks above, in order: the sizes of a call that the threads can run unchecked.
Dims check_inputs(const LlamaWeights& w, const Request& r, const HeadRequest* h = nullptr) {
  check_layouts(w, r);
  const Dims n = check_sizes(w, r, h != nullptr);
  check_indices(w, r, n, h != nullptr);
  check_features(r, n);
  if (h) check_head(*h, n, w.scales);
  return n;
}

// A head's step as the threads read it (see HeadRequest); `on` false in a plain Llama forward.
struct HeadIO {
  bool on = false;  // a head's step (inputs may be empty: every row's source -1)
  const bf16* inputs = nullptr;
  const int64_t* rows = nullptr;
  Weight fc{nullptr, nullptr};
  bf16* outputs = nullptr;
  int64_t ring = 0;   // rows of outputs
  int64_t width = 0;  // an inputs row
};

// The model as the threads read it: raw pointers, and each stacked matmul weight's layer stride in bytes (int8 rows
// come in a head's step only: one layer).
struct Model {
  const bf16 *embed, *ln1, *ln2, *norm, *cos, *sin;
  Weight wqkv, wo, w13, w2, head;
  int64_t sqkv, so, s13, s2;
  bf16 *kc, *vc;
  float eps;
  bool packed_embed;  // the embedding is packed (see LlamaWeights)
};

// A packed weight and, for int8 rows, its scales: those at `offset` of `scales`.
Weight weight(const at::Tensor& w, const at::Tensor* scales, int64_t offset) {
  const bool int8 = w.scalar_type() == at::kChar;
  return {static_cast<const char*>(w.data_ptr()), int8 ? scales->data_ptr<float>() + offset : nullptr};
}
int64_t layer_bytes(const at::Tensor& w) { return w.nbytes() / w.size(0); }
// Weight `w` of layer i (stride: its layer_bytes).
Weight at_layer(Weight w, int64_t i, int64_t stride) { return {w.lines + i * stride, w.scale}; }

Model model_of(const LlamaWeights& w, const Dims& n) {
  const at::Tensor* s = w.scales;
  const auto at = scale_offsets(n);
  return {w.embed.data_ptr<bf16>(),
          w.ln1.data_ptr<bf16>(),
          w.ln2.data_ptr<bf16>(),
          w.norm.data_ptr<bf16>(),
          w.cos.data_ptr<bf16>(),
          w.sin.data_ptr<bf16>(),
          weight(w.wqkv, s, at[kWqkv]),
          weight(w.wo, s, at[kWo]),
          weight(w.w13, s, at[kW13]),
          weight(w.w2, s, at[kW2]),
          weight(w.head, s, at[kHead]),
          layer_bytes(w.wqkv),
          layer_bytes(w.wo),
          layer_bytes(w.w13),
          layer_bytes(w.w2),
          w.kc.data_ptr<bf16>(),
          w.vc.data_ptr<bf16>(),
          static_cast<float>(w.eps),
          w.embed.dim() == 3};
}

// A layer's attention as tasks (a chunk of a KV head's g * q rows, that KV head), chunk-major so that threads
// taking every T-th task get equal shares; more, smaller chunks where that evens the count out and a chunk keeps
// at least 4 rows (a task's fixed cost is its pass over the keys, which every chunk repeats).
struct AttentionTasks {
  int64_t g, rows, chunk, count;  // query heads per KV head, rows per KV head, rows per task, tasks
};

AttentionTasks split_attention(const Dims& n, int nt) {
  const int64_t g = n.H / n.KV, rows = g * n.q;
  int64_t per = (rows + kChunk - 1) / kChunk;
  while ((n.KV * per) % nt != 0 && (rows + per) / (per + 1) >= 4) ++per;
  return {g, rows, (rows + per - 1) / per, n.KV * per};
}

// Floats of attention scratch a thread needs: a task's scores [kChunk, kvp] and one row's packed weights.
int64_t attention_scratch(int64_t kvp) { return kChunk * kvp + kvp + 16; }

// A buffer of a call: the tensor that owns it and its data.
// A buffer of a call: the tensor that owns it and its data; rows from `zero_from` on (a padding the tiles read:
// padded_rows) are zeros.
template <class T>
struct Buffer {
  at::Tensor t;
  T* p;
  Buffer(at::IntArrayRef sizes, const at::TensorOptions& o, int64_t zero_from = -1)
      : t(at::empty(sizes, o)), p(t.data_ptr<T>()) {
    if (zero_from >= 0 && zero_from < sizes[0]) t.narrow(0, zero_from, sizes[0] - zero_from).zero_();
  }
};

// ---- the profile ----
// dynatree::forward_profile(on): where the forwards' time went since the last call, per thread and step (seconds,
// [threads, kSteps], the steps in ProfileStep's order; a wait is the time a thread stood at the barrier after the
// step named), then the clock on or off. Off, a step costs one test of a flag read once per forward.
enum ProfileStep {
  kStepEmbed, kStepNorm, kStepQkvRope, kStepWaitQkv, kStepAttention, kStepWaitAttention, kStepWo, kStepWaitWo,
  kStepMlpIn, kStepWaitMlpIn, kStepW2, kStepWaitW2, kStepHead, kStepArgmax, kSteps
};
constexpr int kMaxThreads = 256;
std::atomic<bool> g_profiling{false};
std::atomic<int> g_profiled_threads{0};
double g_profile[kMaxThreads][kSteps];

// A thread's clock: lap(s) adds the time since the last lap to step s.
struct Clock {
  bool on;
  int t;
  std::chrono::steady_clock::time_point last;
  explicit Clock(int t_) : on(g_profiling.load(std::memory_order_relaxed) && t_ < kMaxThreads), t(t_),
                           last(std::chrono::steady_clock::now()) {}
  void lap(ProfileStep s) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    g_profile[t][s] += std::chrono::duration<double>(now - last).count();
    last = now;
  }
};

at::Tensor forward_profile(bool on) {
  const int T = g_profiled_threads.exchange(0);
  auto out = at::zeros({T, kSteps}, at::kDouble);
  double* o = out.data_ptr<double>();
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < kSteps; ++s) o[t * kSteps + s] = g_profile[t][s];
  std::memset(g_profile, 0, sizeof(g_profile));
  g_profiling.store(on);
  return out;
}

// ---- the barrier ----
// Why: a thread that reaches a barrier first would stand idle while the weight it streams next sits in memory, and
// so would the bus. Instead, while it waits, it loads the first lines of its share of that weight (Ahead, at most
// kAheadBytes: they stay in its L2), so the next step starts from cache. Loads, not prefetch instructions: a spinning
// thread issues prefetches faster than memory answers them, and the core drops those it has no miss buffer for,
// while a load waits its turn. One arrival counter and a generation number: the last thread to arrive resets the
// counter and starts the next generation (acquire and release order every thread's writes before the barrier
// before every read after it, as an OpenMP barrier's flush does). A thread that has nothing left to load spins,
// and yields its core after kSpins (more threads than cores).
struct Ahead {
  const char* p = nullptr;  // the next line to load
  int64_t left = 0;         // bytes left to load
};
constexpr int64_t kAheadBytes = 256 << 10, kAheadLines = 8, kSpins = 4096;

// Loads the next (at most kAheadLines) whole lines of `ahead`, and keeps no value.
inline void touch_ahead(Ahead& ahead) {
  const int64_t lines = std::min(kAheadLines, ahead.left / 64);
  __m512i any = _mm512_setzero_si512();
  for (int64_t j = 0; j < lines; ++j) any = _mm512_or_si512(any, _mm512_loadu_si512(ahead.p + 64 * j));
  asm volatile("" : : "v"(any));  // the loads stay: their result counts as used
  ahead.p += 64 * kAheadLines;
  ahead.left = lines < kAheadLines ? 0 : ahead.left - 64 * kAheadLines;
}

class Barrier {
 public:
  void wait(int T, Ahead& ahead) {
    const int gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == T - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(gen + 1, std::memory_order_release);
      return;
    }
    for (int64_t spins = 0; generation_.load(std::memory_order_acquire) == gen; ++spins) {
      if (ahead.left > 0) {
        touch_ahead(ahead);
      } else if (spins < kSpins) {
        _mm_pause();
      } else {
        sched_yield();
      }
    }
  }

 private:
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> generation_{0};
};

// One forward_bf16 (or eagle3_bf16) call: its sizes, the model, the request's indices and the activations, with the
// steps each thread of the one parallel region runs. Threads split each matmul's output blocks and meet at a barrier
// wherever the next step reads what other threads wrote (each normalises every row itself: no barrier there).
class Forward {
 public:
  Forward(const Dims& n, const LlamaWeights& w, const Request& r, const HeadRequest* h = nullptr);
  at::Tensor run();

 private:
  // A thread of the region: its index t of T, its own normalised rows [q, kin], its attention scratch and its clock.
  struct Thread {
    int t, T;
    bf16* xn;
    float* scratch;
    mutable Clock clock;
    mutable Ahead ahead;  // what it loads ahead while it waits at the next barrier
    // this thread's share [b0, b1) of n output blocks (contiguous: one stream per weight)
    std::pair<int64_t, int64_t> share(int64_t n) const { return {n * t / T, n * (t + 1) / T}; }
  };
  void sync(const Thread& th) { barrier_.wait(th.T, th.ahead); }
  void prefetch_next(const Thread& th, Weight w, int64_t k, int64_t b0, int64_t b1) const;
  void prefetch_qkv(int64_t i, const Thread& th) const;
  void prefetch_head(const Thread& th) const;
  void embedding_row(int64_t t, bf16* out) const;
  void embed(const Thread& th);
  void head_inputs(const Thread& th);
  void layer(int64_t i, const Thread& th);
  void normalise(const Thread& th, const bf16* w, int64_t r0);
  void normalise_pair(const Thread& th);
  void keep_outputs(const Thread& th);
  void matmul(const Thread& th, const bf16* x, int64_t rows, int64_t k, Weight w, bf16* out, int64_t n,
              bool add = false, Best* best = nullptr);
  void matmul_range(const bf16* x, int64_t rows, int64_t k, Weight w, bf16* out, int64_t n, int64_t b0, int64_t b1,
                    bool add = false, Best* best = nullptr);
  void qkv_rope(int64_t i, const Thread& th);
  void rope_to_cache(int64_t i, int64_t h0, int64_t h1);
  void mlp_in(int64_t i, const Thread& th);
  void attention(int64_t i, const Thread& th);
  void silu(const Thread& th);
  void head(const Thread& th);
  void argmax(const Thread& th);
  void keep_features(int64_t i, const Thread& th);

  const Dims n_;
  const Model m_;
  const int64_t *tok_, *pos_, *slot_;
  const bf16* mask_;
  const int64_t mask_stride_;
  const bool greedy_;
  bf16* feat_;                          // [q, feature layers, d] where asked, else null
  std::vector<int64_t> feature_layers_;  // the layer each column of feat_ copies the residual stream entering
  const HeadIO head_;                    // a head's step, where asked
  const int nt_;  // threads of the region
  const bool amx_;     // the matmuls through tiles (Request::amx)
  const int64_t qp_;   // rows of the matmuls' input buffers: q, padded for the tiles (padded_rows)
  const AttentionTasks tasks_;
  const int64_t kvp_;  // visible slots rounded up to 16
  const float scale_;  // 1 / sqrt(head dim)
  const AttendFn attend_;
  Buffer<bf16> x_, qkv_, att_, h13_, act_, out_;  // the residual stream, the matmuls' outputs, the logits
  Buffer<int64_t> ids_;                           // the argmaxes if greedy
  Buffer<bf16> xn_;                               // [thread, q, kin]: each thread's normalised rows
  Buffer<bf16> in_;                               // a head's gathered inputs to fc [q, 3d], where it has them
  std::vector<Best> best_;                        // [thread, row]: each thread's argmax over its columns
  std::vector<float> scratch_;                    // [thread, attention_scratch(kvp)]
  Barrier barrier_;
};

HeadIO head_io(const HeadRequest* h, const at::Tensor* scales) {
  if (!h) return {};
  const Weight fc = h->fc ? weight(*h->fc, scales, 0) : Weight{nullptr, nullptr};  // fc's come first (scale_offsets)
  return {true,         h->inputs.data_ptr<bf16>(), h->input_rows.data_ptr<int64_t>(), fc, h->outputs.data_ptr<bf16>(),
          h->outputs.size(0), h->inputs.size(1)};
}

Forward::Forward(const Dims& n, const LlamaWeights& w, const Request& r, const HeadRequest* h)
    : n_(n), m_(model_of(w, n)), tok_(r.tokens.data_ptr<int64_t>()), pos_(r.positions.data_ptr<int64_t>()),
      slot_(r.slots.data_ptr<int64_t>()), mask_(r.mask.data_ptr<bf16>()), mask_stride_(r.mask.stride(0)),
      greedy_(r.greedy), feat_(r.features.has_value() ? r.features->data_ptr<bf16>() : nullptr),
      feature_layers_(r.feature_layers.begin(), r.feature_layers.end()), head_(head_io(h, w.scales)),
      nt_(std::max(1, at::get_num_threads())), amx_(r.amx), qp_(amx_ ? padded_rows(n.q) : n.q),
      tasks_(split_attention(n, nt_)),
      kvp_((n.kv + 15) / 16 * 16), scale_(1.0f / std::sqrt(static_cast<float>(n.hd))), attend_(attend_fn(n.hd, amx_)),
      x_({qp_, n.d}, w.embed.options(), n.q), qkv_({n.q, n.ncol}, w.embed.options()),
      att_({qp_, n.H * n.hd}, w.embed.options(), n.q), h13_({n.q, 2 * n.inter}, w.embed.options()),
      act_({qp_, n.inter}, w.embed.options(), n.q), out_({greedy_ ? 0 : n.nout, n.V}, w.embed.options()),
      ids_({greedy_ ? n.nout : 0}, r.tokens.options()), xn_({nt_, qp_, n.kin}, w.embed.options()),
      in_({head_.fc.lines ? qp_ : 0, head_.width}, w.embed.options(), n.q),
      best_(greedy_ ? static_cast<size_t>(nt_) * n.nout : 0),
      scratch_(static_cast<size_t>(nt_) * attention_scratch(kvp_)) {
  if (qp_ > n.q) xn_.t.narrow(1, n.q, qp_ - n.q).zero_();  // each thread's padding rows
}

// The whole forward in one parallel region: logits [nout, V], or int64 argmaxes [nout] if greedy.
at::Tensor Forward::run() {
#pragma omp parallel num_threads(nt_)
  {
    const int T = omp_get_num_threads(), t = omp_get_thread_num();
    const Thread th{t, T, xn_.p + t * qp_ * n_.kin, scratch_.data() + t * attention_scratch(kvp_), Clock(t), {}};
    if (th.clock.on && t == 0) g_profiled_threads.store(std::min(T, kMaxThreads));
    if (head_.on) head_inputs(th);
    else embed(th);
    prefetch_qkv(0, th);
    sync(th);
    th.clock.lap(kStepEmbed);
    for (int64_t i = 0; i < n_.L; ++i) {
      if (feat_) keep_features(i, th);
      layer(i, th);
    }
    if (head_.on) keep_outputs(th);
    if (feat_) keep_features(n_.L, th);  // the last layer's output, normalised (head() only reads x_)
    head(th);
    th.clock.lap(kStepHead);
    if (greedy_) argmax(th);
    th.clock.lap(kStepArgmax);
  }
  return greedy_ ? ids_.t : out_.t;
}

// Token `t`'s embedding row into out [d] (from a packed embedding: a pair of features per 64-byte line of its
// block).
void Forward::embedding_row(int64_t t, bf16* out) const {
  if (!m_.packed_embed) {
    std::memcpy(out, m_.embed + t * n_.d, n_.d * sizeof(bf16));
    return;
  }
  const bf16* block = m_.embed + (t / 16) * 16 * n_.d + (t % 16) * 2;
  for (int64_t c = 0; c < n_.d / 2; ++c) std::memcpy(out + 2 * c, block + 32 * c, 2 * sizeof(bf16));
}

// The tokens' embedding rows, every T-th row by this thread.
void Forward::embed(const Thread& th) {
  for (int64_t r = th.t; r < n_.q; r += th.T) embedding_row(tok_[r], x_.p + r * n_.d);
}

// A head's step: each row's residual stream from its input row (zeros for -1), every T-th row by this thread,
// through fc where the inputs are the target's fused features (each thread its share of fc's outputs).
void Forward::head_inputs(const Thread& th) {
  const int64_t w = head_.width;
  bf16* rows = head_.fc.lines ? in_.p : x_.p;
  for (int64_t r = th.t; r < n_.q; r += th.T) {
    const int64_t src = head_.rows[r];
    if (src < 0) std::memset(rows + r * w, 0, w * sizeof(bf16));
    else std::memcpy(rows + r * w, head_.inputs + src * w, w * sizeof(bf16));
  }
  if (!head_.fc.lines) return;
  const auto [b0, b1] = th.share(n_.d / 16);
  prefetch_next(th, head_.fc, w, b0, b1);
  sync(th);
  matmul(th, in_.p, n_.q, w, head_.fc, x_.p, n_.d);
}

// A head's step: the layer's output rows (the residual stream after it, before the final norm) to their slots'
// rows of the outputs ring, every T-th row by this thread (complete: the layer ended at a barrier); a row whose
// ring row a later slot of this call takes is not written (one writer per ring row).
void Forward::keep_outputs(const Thread& th) {
  const int64_t last = *std::max_element(slot_, slot_ + n_.q), R = head_.ring;
  for (int64_t r = th.t; r < n_.q; r += th.T)
    if (slot_[r] + R > last) std::memcpy(head_.outputs + (slot_[r] % R) * n_.d, x_.p + r * n_.d, n_.d * sizeof(bf16));
}

// The residual rows entering layer i into every features column that asks for layer i, every T-th row by this
// thread (the rows it copies are complete: a barrier ended the step that wrote them, and the next write to them
// comes after the barriers of layer i's attention). Layer id L: the last layer's output after the final norm,
// the rows the head reads (no write to x_ follows the last layer).
void Forward::keep_features(int64_t i, const Thread& th) {
  const int64_t k = static_cast<int64_t>(feature_layers_.size()), d = n_.d;
  for (int64_t j = 0; j < k; ++j) {
    if (feature_layers_[j] != i) continue;
    for (int64_t r = th.t; r < n_.q; r += th.T) {
      bf16* dst = feat_ + (r * k + j) * d;
      if (i < n_.L) std::memcpy(dst, x_.p + r * d, d * sizeof(bf16));
      else rms_row(x_.p + r * d, m_.norm, d, m_.eps, dst);
    }
  }
}

// Layer i: attention, then the MLP, each added to the residual stream x. A barrier follows every step whose
// output the next step reads outside this thread's share: five a layer. The q, k, v projections and their RoPE
// share one step (a thread projects whole heads), as do the gate and up projections and silu (a thread projects
// the same MLP columns of both).
void Forward::layer(int64_t i, const Thread& th) {
  const Dims& n = n_;
  Clock& c = th.clock;
  if (head_.on) normalise_pair(th);
  else normalise(th, m_.ln1 + i * n.d, 0);
  c.lap(kStepNorm);
  qkv_rope(i, th);
  c.lap(kStepQkvRope);
  const Weight wo = at_layer(m_.wo, i, m_.so), w13 = at_layer(m_.w13, i, m_.s13), w2 = at_layer(m_.w2, i, m_.s2);
  const auto [o0, o1] = th.share(n.d / 16);
  prefetch_next(th, wo, n.H * n.hd, o0, o1);  // through attention's barriers too
  sync(th);
  c.lap(kStepWaitQkv);
  attention(i, th);
  c.lap(kStepAttention);
  sync(th);
  c.lap(kStepWaitAttention);
  matmul(th, att_.p, n.q, n.H * n.hd, wo, x_.p, n.d, true);
  c.lap(kStepWo);
  const auto [m0, m1] = th.share(n.inter / 16);
  prefetch_next(th, w13, n.d, m0, m1);
  sync(th);
  c.lap(kStepWaitWo);
  normalise(th, m_.ln2 + i * n.d, 0);
  c.lap(kStepNorm);
  mlp_in(i, th);
  c.lap(kStepMlpIn);
  prefetch_next(th, w2, n.inter, o0, o1);
  sync(th);
  c.lap(kStepWaitMlpIn);
  matmul(th, act_.p, n.q, n.inter, w2, x_.p, n.d, true);
  c.lap(kStepW2);
  if (i + 1 < n.L) prefetch_qkv(i + 1, th);
  else prefetch_head(th);
  sync(th);
  c.lap(kStepWaitW2);
}

// What this thread streams first in the next step, for it to load while it waits at the barrier before it:
// its blocks [b0, b1) of weight w over k inputs, at most kAheadBytes of them.
void Forward::prefetch_next(const Thread& th, Weight w, int64_t k, int64_t b0, int64_t b1) const {
  const int64_t line = w.scale ? 32 : 64, block = k / 2 * line;
  th.ahead = {w.lines + b0 * block, std::min((b1 - b0) * block, kAheadBytes)};
}

// The same for layer i's q, k and v projection (this thread's heads, see qkv_rope) and for the head.
void Forward::prefetch_qkv(int64_t i, const Thread& th) const {
  const int64_t blocks = n_.hd / 16;
  const auto [h0, h1] = th.share(n_.H + 2 * n_.KV);
  prefetch_next(th, at_layer(m_.wqkv, i, m_.sqkv), n_.kin, h0 * blocks, h1 * blocks);
}

void Forward::prefetch_head(const Thread& th) const {
  const auto [b0, b1] = th.share(n_.V / 16);
  prefetch_next(th, m_.head, n_.d, b0, b1);
}

// RMSNorm (weight w) of the residual rows [r0, q) into this thread's rows [0, q - r0).
void Forward::normalise(const Thread& th, const bf16* w, int64_t r0) {
  for (int64_t r = r0; r < n_.q; ++r) rms_row(x_.p + r * n_.d, w, n_.d, m_.eps, th.xn + (r - r0) * n_.d);
}

// A head's layer input into this thread's rows [q, 2d]: the token's embedding normalised with input_layernorm's
// weight (ln1[0, :d]), then the residual stream normalised with hidden_norm's (ln1[0, d:]), each row half alone.
void Forward::normalise_pair(const Thread& th) {
  const int64_t d = n_.d;
  std::vector<bf16> token(d);
  for (int64_t r = 0; r < n_.q; ++r) {
    embedding_row(tok_[r], token.data());
    rms_row(token.data(), m_.ln1, d, m_.eps, th.xn + r * 2 * d);
    rms_row(x_.p + r * d, m_.ln1 + d, d, m_.eps, th.xn + r * 2 * d + d);
  }
}

// out [rows, n] = x [rows, k] @ w.T (add: out += ..., a residual add) in this thread's share of the n / 16 blocks.
void Forward::matmul(const Thread& th, const bf16* x, int64_t rows, int64_t k, Weight w, bf16* out,
                     int64_t n, bool add, Best* best) {
  const auto [b0, b1] = th.share(n / 16);
  matmul_range(x, rows, k, w, out, n, b0, b1, add, best);
}

// The same in output blocks [b0, b1).
void Forward::matmul_range(const bf16* x, int64_t rows, int64_t k, Weight w, bf16* out, int64_t n, int64_t b0,
                           int64_t b1, bool add, Best* best) {
  matmul_blocks(amx_, reinterpret_cast<const uint32_t*>(x), rows, k / 2, w, out, n, b0, b1, add, best);
}

// Layer i's q, k and v projections of this thread's share of the heads (whole heads: hd is a multiple of 32, so a
// head is whole blocks), then their RoPE and cache writes, which read only this thread's outputs.
void Forward::qkv_rope(int64_t i, const Thread& th) {
  const int64_t blocks = n_.hd / 16;
  const auto [h0, h1] = th.share(n_.H + 2 * n_.KV);
  matmul_range(th.xn, n_.q, n_.kin, at_layer(m_.wqkv, i, m_.sqkv), qkv_.p, n_.ncol, h0 * blocks, h1 * blocks);
  rope_to_cache(i, h0, h1);
}

// RoPE of heads [h0, h1) of every row: the queries in place, the keys into layer i's cache slots; the values
// copied there.
void Forward::rope_to_cache(int64_t i, int64_t h0, int64_t h1) {
  const int64_t H = n_.H, KV = n_.KV, hd = n_.hd;
  for (int64_t r = 0; r < n_.q; ++r) {
    const int64_t at = rope_row(pos_[r], head_.on);
    const bf16 *cs = m_.cos + at * hd, *sn = m_.sin + at * hd;
    for (int64_t hh = h0; hh < h1; ++hh) {
      bf16* src = qkv_.p + r * n_.ncol + hh * hd;
      if (hh < H) {
        rope_head(src, cs, sn, hd, src);
      } else {
        const bool key = hh < H + KV;
        const int64_t kh = key ? hh - H : hh - H - KV;
        bf16* dst = (key ? m_.kc : m_.vc) + ((i * KV + kh) * n_.n_slots + slot_[r]) * hd;
        if (key) rope_head(src, cs, sn, hd, dst);
        else std::memcpy(dst, src, hd * sizeof(bf16));
      }
    }
  }
}

// This thread's attention tasks of layer i (every T-th), each reading its KV head's cache rows in place.
void Forward::attention(int64_t i, const Thread& th) {
  const Dims& n = n_;
  const AttentionTasks& a = tasks_;
  for (int64_t task = th.t; task < a.count; task += th.T) {
    const int64_t kh = task % n.KV, r0 = (task / n.KV) * a.chunk;
    const int64_t base = (i * n.KV + kh) * n.n_slots * n.hd;
    if (r0 < a.rows)
      attend_(qkv_.p, n.hd, n.ncol, m_.kc + base, n.hd, m_.vc + base, n.hd, mask_, mask_stride_, att_.p, n.H * n.hd,
              kh * a.g, n.q, n.kv, r0, std::min(a.rows, r0 + a.chunk), scale_, th.scratch,
              th.scratch + kChunk * kvp_);
  }
}

// Layer i's gate and up projections (w13 holds gate's outputs, then up's) of this thread's share of the MLP's
// columns, then silu(gate) * up of them: silu reads only this thread's outputs.
void Forward::mlp_in(int64_t i, const Thread& th) {
  const int64_t nb = n_.inter / 16;
  const auto [b0, b1] = th.share(nb);
  const Weight w = at_layer(m_.w13, i, m_.s13);
  matmul_range(th.xn, n_.q, n_.d, w, h13_.p, 2 * n_.inter, b0, b1);
  matmul_range(th.xn, n_.q, n_.d, w, h13_.p, 2 * n_.inter, nb + b0, nb + b1);
  silu(th);
}

// silu(gate) * up of every row, in this thread's share of the MLP's columns.
void Forward::silu(const Thread& th) {
  const int64_t inter = n_.inter;
  const auto [b0, b1] = th.share(inter / 16);
  for (int64_t r = 0; r < n_.q; ++r)
    silu_mul(h13_.p + r * 2 * inter, h13_.p + r * 2 * inter + inter, 16 * b0, 16 * b1, act_.p + r * inter);
}

// The final norm of the output rows (the last nout) and this thread's share of their logits; if greedy, instead of
// the logits, each row's argmax over this thread's columns (the Argmax epilogue: the logits are never stored).
void Forward::head(const Thread& th) {
  normalise(th, m_.norm, n_.q - n_.nout);
  Best* best = greedy_ ? best_.data() + th.t * n_.nout : nullptr;
  if (best) std::fill(best, best + n_.nout, Best{-INFINITY, -1});
  matmul(th, th.xn, n_.nout, n_.d, m_.head, out_.p, n_.V, false, best);
}

// Each output row's argmax: the first of the largest over the threads' own (head()): their columns ascend, so a tie
// keeps the earlier thread's index.
void Forward::argmax(const Thread& th) {
  const int64_t nout = n_.nout;
  th.ahead = {};
  sync(th);
#pragma omp for
  for (int64_t r = 0; r < nout; ++r) {
    std::pair<float, int64_t> b{-INFINITY, -1};
    for (int u = 0; u < th.T; ++u) {
      const auto& c = best_[u * nout + r];
      if (c.second >= 0 && (b.second < 0 || c.first > b.first)) b = c;
    }
    ids_.p[r] = b.second;
  }
}

// dynatree::forward_bf16, with the arguments its schema names: bundled, checked, run (see Request, LlamaWeights).
at::Tensor forward_bf16(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& slots,
                        const at::Tensor& mask, const at::Tensor& embed, const at::Tensor& wqkv, const at::Tensor& wo,
                        const at::Tensor& w13, const at::Tensor& w2, const at::Tensor& ln1, const at::Tensor& ln2,
                        const at::Tensor& norm, const at::Tensor& head, const at::Tensor& kc, const at::Tensor& vc,
                        const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t KV, double eps,
                        bool last_only, bool greedy, const c10::optional<at::Tensor>& features,
                        at::IntArrayRef feature_layers, bool amx) {
  const LlamaWeights w{embed, wqkv, wo, w13, w2, ln1, ln2, norm, head, kc, vc, cos, sin, H, KV, eps};
  check_amx(amx);
  const Request r{tokens, positions, slots, mask, last_only, greedy, features, feature_layers, amx};
  return Forward(check_inputs(w, r), w, r).run();
}

// dynatree::greedy_bf16: greedy decoding in one call. From `token` (int64 [1], not yet cached) at slot and position
// `start`, each one-token forward's argmax is the next forward's token, at the next slot and position, for `steps`
// tokens or up to and including `eos` (-1: none); returns them (int64 [n], n <= steps). Each forward is exactly
// forward_bf16's (greedy, the last row, every cached slot visible). Why: between two one-token forwards called from
// Python, the host builds the next call's positions, slots and mask and crosses the dispatcher twice, on caches that
// the forward's weight stream has just emptied; here none of that runs.
at::Tensor greedy_bf16(const at::Tensor& token, int64_t start, int64_t steps, int64_t eos, const at::Tensor& embed,
                       const at::Tensor& wqkv, const at::Tensor& wo, const at::Tensor& w13, const at::Tensor& w2,
                       const at::Tensor& ln1, const at::Tensor& ln2, const at::Tensor& norm, const at::Tensor& head,
                       const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& cos, const at::Tensor& sin,
                       int64_t H, int64_t KV, double eps, bool amx) {
  TORCH_CHECK(token.numel() == 1 && token.scalar_type() == at::kLong && token.device().is_cpu(),
              "greedy_bf16: token must be one int64 CPU token id");
  TORCH_CHECK(start >= 0 && steps >= 0, "greedy_bf16: start ", start, " and steps ", steps, " must be >= 0");
  const LlamaWeights w{embed, wqkv, wo, w13, w2, ln1, ln2, norm, head, kc, vc, cos, sin, H, KV, eps};
  check_amx(amx);
  const auto ids = token.options();
  at::Tensor out = at::empty({steps}, ids), tok = token.reshape({1}).clone(), at = at::empty({1}, ids);
  const at::Tensor visible = at::zeros({1, start + steps}, embed.options());  // a one-row mask: every slot seen
  const c10::optional<at::Tensor> none;
  int64_t n = 0;
  while (n < steps) {
    at.data_ptr<int64_t>()[0] = start + n;
    const at::Tensor mask = visible.narrow(1, 0, start + n + 1);
    const Request r{tok, at, at, mask, true, true, none, {}, amx};
    const int64_t next = Forward(check_inputs(w, r), w, r).run().data_ptr<int64_t>()[0];
    out.data_ptr<int64_t>()[n++] = next;
    tok.data_ptr<int64_t>()[0] = next;
    if (next == eos) break;
  }
  return out.narrow(0, 0, n);
}

// dynatree::eagle3_bf16: an EAGLE-3 head's step (HeadRequest) with its one layer's weights in forward_bf16's layout
// (wqkv [1, ncol / 16, d, 32]: q, k, v over 2d inputs; ln1 [1, 2d]); logits [q, V'] ([1, V'] if last_only).
// `scales`: the powers of two of those of its matmul weights held as int8 rows (LlamaWeights).
at::Tensor eagle3_bf16(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& slots,
                       const at::Tensor& mask, const at::Tensor& inputs, const at::Tensor& input_rows,
                       const c10::optional<at::Tensor>& fc, const at::Tensor& outputs, const at::Tensor& embed,
                       const at::Tensor& wqkv, const at::Tensor& wo, const at::Tensor& w13, const at::Tensor& w2,
                       const at::Tensor& ln1, const at::Tensor& ln2, const at::Tensor& norm, const at::Tensor& head,
                       const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& cos, const at::Tensor& sin,
                       int64_t H, int64_t KV, double eps, bool last_only, const c10::optional<at::Tensor>& scales,
                       bool amx) {
  const LlamaWeights w{embed, wqkv, wo, w13, w2, ln1, ln2, norm, head, kc, vc, cos, sin, H, KV, eps,
                       scales.has_value() ? &*scales : nullptr};
  const c10::optional<at::Tensor> none;
  check_amx(amx);
  const Request r{tokens, positions, slots, mask, last_only, false, none, {}, amx};
  const HeadRequest h{inputs, input_rows, fc, outputs};
  return Forward(check_inputs(w, r, &h), w, r, &h).run();
}

at::Tensor forward_bf16_meta(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& slots,
                             const at::Tensor& mask, const at::Tensor& embed, const at::Tensor& wqkv,
                             const at::Tensor& wo, const at::Tensor& w13, const at::Tensor& w2, const at::Tensor& ln1,
                             const at::Tensor& ln2, const at::Tensor& norm, const at::Tensor& head,
                             const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& cos, const at::Tensor& sin,
                             int64_t H, int64_t KV, double eps, bool last_only, bool greedy,
                             const c10::optional<at::Tensor>& features, at::IntArrayRef feature_layers, bool amx) {
  const c10::SymInt rows = last_only ? c10::SymInt(1) : tokens.sym_size(0);
  if (greedy) return at::empty_symint({rows}, tokens.options());
  return at::empty_symint({rows, head.sym_size(0) * 16}, embed.options());
}

}  // namespace

TORCH_LIBRARY(dynatree, m) {
  m.def("linear_bf16(Tensor x, Tensor w, bool amx=False) -> Tensor");
  m.def("amx_built() -> bool", amx_built);
  m.def("amx_grant() -> int", amx_grant);
  m.def("forward_profile(bool on) -> Tensor", forward_profile);
  m.def("int8_rows(Tensor w) -> (Tensor, Tensor)");
  m.def("attention_bf16(Tensor q, Tensor k, Tensor v, Tensor mask, bool amx=False) -> Tensor");
  m.def("forward_bf16(Tensor tokens, Tensor positions, Tensor slots, Tensor mask, Tensor embed, Tensor wqkv, "
        "Tensor wo, Tensor w13, Tensor w2, Tensor ln1, Tensor ln2, Tensor norm, Tensor head, Tensor(a!) kc, "
        "Tensor(b!) vc, Tensor cos, Tensor sin, int H, int KV, float eps, bool last_only, bool greedy=False, "
        "Tensor(c!)? features=None, int[] feature_layers=[], bool amx=False) -> Tensor");
  m.def("greedy_bf16(Tensor token, int start, int steps, int eos, Tensor embed, Tensor wqkv, Tensor wo, Tensor w13, "
        "Tensor w2, Tensor ln1, Tensor ln2, Tensor norm, Tensor head, Tensor(a!) kc, Tensor(b!) vc, Tensor cos, "
        "Tensor sin, int H, int KV, float eps, bool amx=False) -> Tensor");
  m.def("eagle3_bf16(Tensor tokens, Tensor positions, Tensor slots, Tensor mask, Tensor inputs, Tensor input_rows, "
        "Tensor? fc, Tensor(a!) outputs, Tensor embed, Tensor wqkv, Tensor wo, Tensor w13, Tensor w2, Tensor ln1, "
        "Tensor ln2, Tensor norm, Tensor head, Tensor(b!) kc, Tensor(c!) vc, Tensor cos, Tensor sin, int H, int KV, "
        "float eps, bool last_only, Tensor? scales=None, bool amx=False) -> Tensor");
}
TORCH_LIBRARY_IMPL(dynatree, CPU, m) {
  m.impl("linear_bf16", linear_bf16);
  m.impl("int8_rows", int8_rows);
  m.impl("attention_bf16", attention_bf16);
  m.impl("forward_bf16", forward_bf16);
  m.impl("greedy_bf16", greedy_bf16);
  m.impl("eagle3_bf16", eagle3_bf16);
}
TORCH_LIBRARY_IMPL(dynatree, Meta, m) {
  m.impl("linear_bf16", linear_bf16_meta);
  m.impl("attention_bf16", attention_bf16_meta);
  m.impl("forward_bf16", forward_bf16_meta);
}
