#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <immintrin.h>
int main() {
  size_t n = (size_t)32 << 20;
  char* b = (char*)aligned_alloc(1 << 21, n);
  madvise(b, n, MADV_HUGEPAGE);
  memset(b, 1, n);
  for (int r = 0; r < 4; ++r) {
    if (r == 2) for (size_t i = 0; i < n; i += 64) (void)*(volatile char*)(b + i);  // cached
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; i += 64) _mm_clflushopt(b + i);
    _mm_sfence();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("round %d: %.2f ms for %zu lines (%.2f ns/line)\n", r, t * 1e3, n / 64, t * 1e9 / (n / 64));
  }
}
