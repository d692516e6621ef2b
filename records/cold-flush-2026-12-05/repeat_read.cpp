#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <immintrin.h>
#include <initializer_list>
int main(int argc, char** argv) {
  for (long mib : {16L, 64L, 256L, 1024L}) {
    size_t n = (size_t)mib << 20;
    float* b = (float*)aligned_alloc(1 << 21, n);
    madvise(b, n, MADV_HUGEPAGE);
    memset(b, 1, n);
    double best = 1e9;
    for (int r = 0; r < 6; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (size_t i = 0; i < n / 4; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(b + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(b + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(b + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(b + i + 48));
      }
      volatile float s = _mm512_reduce_add_ps(a0 + a1 + a2 + a3);
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = best < t ? best : t;
    }
    printf("%5ld MiB: %.2f ms, %.1f GB/s (best repeat)\n", mib, best * 1e3, n / best / 1e9);
    free(b);
  }
}
