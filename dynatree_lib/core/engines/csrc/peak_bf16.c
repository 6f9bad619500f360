// The peak bf16 multiply throughput of the cores in use, by the instructions our kernels multiply with
// (core/engines/peak.py builds and loads this file): register-resident loops of VDPBF16PS (AVX512-BF16: 64 flops
// an instruction over zmm) and of TDPBF16PS (AMX: 16 x 16 x 32 multiply-adds a tile instruction), with enough
// independent accumulators to hide the instructions' latency, on n threads at once. Nothing here reads memory
// inside a loop: what it measures is the multiply units' limit, the compute roof of a roofline.
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ACCS 12  // independent zmm accumulators: covers VDPBF16PS's latency at one or two issues a cycle

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static float avx512_loop(long iters) {
  __m512 acc[ACCS];
  for (int i = 0; i < ACCS; i++) acc[i] = _mm512_setzero_ps();
  __m512bh a = (__m512bh)_mm512_set1_epi16(0x3c00), b = (__m512bh)_mm512_set1_epi16(0x3c00);  // 2^-7: stays finite
  for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
    for (int i = 0; i < ACCS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);  // unrolled: acc stays in registers
    __asm__ volatile("" : "+v"(a), "+v"(b));  // opaque operands: the loop cannot be folded
  }
  __m512 s = acc[0];
  for (int i = 1; i < ACCS; i++) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

#ifdef __AMX_BF16__
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) TileConfig;

static float amx_loop(long iters) {
  // tiles 0-3 accumulate C[i][j] += A[i] B[j] (A in 4-5, B in 6-7): four independent TDPBF16PS an iteration
  TileConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  static __thread uint16_t ab[16 * 32];
  static __thread float c[16 * 16];
  for (int i = 0; i < 16 * 32; i++) ab[i] = 0x3c00;
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  _tile_loadd(4, ab, 64); _tile_loadd(5, ab, 64); _tile_loadd(6, ab, 64); _tile_loadd(7, ab, 64);
  for (long n = 0; n < iters; n++) {
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
#endif

typedef struct { int isa; long iters; float out; } Job;

static void *run_job(void *arg) {
  Job *j = (Job *)arg;
#ifdef __AMX_BF16__
  if (j->isa == 1) { j->out = amx_loop(j->iters); return NULL; }
#endif
  j->out = avx512_loop(j->iters);
  return NULL;
}

int peak_has_amx(void) {
#ifdef __AMX_BF16__
  return 1;
#else
  return 0;
#endif
}

int peak_amx_grant(void) {  // Linux hands a process the tile state on request (ARCH_REQ_XCOMP_PERM, XTILEDATA)
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 0 : errno;
}

double peak_flops_per_iter(int isa) {  // flops of one loop iteration on one thread
  return isa == 1 ? 4.0 * 16 * 16 * 32 * 2 : ACCS * 16.0 * 2 * 2;
}

double peak_seconds(int isa, int threads, long iters) {  // wall seconds of `threads` threads running `iters` each
  pthread_t tid[64];
  Job jobs[64];
  if (threads < 1 || threads > 64 || (isa == 1 && !peak_has_amx())) return -1.0;
  double t0 = now_s();
  for (int t = 0; t < threads; t++) {
    jobs[t] = (Job){isa, iters, 0.0f};
    pthread_create(&tid[t], NULL, run_job, &jobs[t]);
  }
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  return now_s() - t0;
}
