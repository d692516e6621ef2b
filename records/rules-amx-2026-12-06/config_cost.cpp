// What loading the tile configuration costs (the amx table kept tiles configured over a
// ScanScope for it): LDTILECFG + TILEZERO + TILESTORED + TILERELEASE per iteration, without
// the release, neither, and STTILECFG plus a compare instead. ns per iteration.
// Build: g++ -O2 -mamx-tile -mamx-bf16 config_cost.cpp -o config_cost
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
struct alignas(64) TileConfig { std::uint8_t palette = 1, start_row = 0; std::uint8_t reserved[14] = {}; std::uint16_t colsb[16] = {}; std::uint8_t rows[16] = {}; };
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  TileConfig cfg; for (int t = 0; t < 8; ++t) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
  alignas(64) float buf[256] = {};
  const int N = 100000;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; ++i) { _tile_loadconfig(&cfg); _tile_zero(0); _tile_stored(0, buf, 64); _tile_release(); }
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; ++i) { _tile_loadconfig(&cfg); _tile_zero(0); _tile_stored(0, buf, 64); }
    auto t2 = std::chrono::steady_clock::now();
    _tile_loadconfig(&cfg);
    for (int i = 0; i < N; ++i) { _tile_zero(0); _tile_stored(0, buf, 64); }
    auto t3 = std::chrono::steady_clock::now();
    TileConfig got;
    for (int i = 0; i < N; ++i) { _tile_storeconfig(&got); if (std::memcmp(&got, &cfg, 64)) { _tile_loadconfig(&cfg);} _tile_zero(0); _tile_stored(0, buf, 64); }
    auto t4 = std::chrono::steady_clock::now();
    _tile_release();
    auto ns = [&](auto a, auto b) { return std::chrono::duration<double>(b - a).count() * 1e9 / N; };
    printf("cfg+release %.1f ns, cfg only %.1f ns, none %.1f ns, stcfg check %.1f ns\n", ns(t0, t1), ns(t1, t2), ns(t2, t3), ns(t3, t4));
  }
}
