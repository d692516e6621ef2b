// The AMX scoring of bf16 rows tried on 2026-12-06 as an "amx" kernel table (not kept:
// docs/selectors.md, "Tried: AMX tile products"), standing alone for blocks.cpp: the kernel as it
// was in the library, with the table registration replaced by amx_log_sum_exp_rows and the
// library's ScanScope by hold_tiles (set by the caller around a run of calls).
//
// Exact products. TDPBF16PS multiplies bf16 by bf16, so the f32 query is cut into three bf16
// parts, q = hi + lo + rest, each the rounding of what the parts before it left (every
// remainder is exact in f32, and the third part in bf16). Each part's products with the bf16
// keys are exact in f32, and AMX sums them in f32; the three partial sums are added smallest
// first: the f32 kernels' accuracy, other bits.
//
// Tiles: 8 registers of 16 rows x 64 bytes. A step scores 32 rows: A tiles 0 and 1 hold rows
// 0-15 and 16-31 of 32 channels, B tiles 2 and 3 the query parts of those channels (column
// s * G + h: part s of head h, for G <= 10 heads a pass), C tiles 4 and 5 the sums of rows 0-15
// (columns 0-15, 16-31), 6 and 7 those of rows 16-31.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "amx_kernel.hpp"
#include "kernels_registry.hpp"
#include "kernels_simd.hpp"

#define AMC_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

namespace amc::kernels::detail::amx_record {
bool hold_tiles = false;
namespace {

using Ops = BlockedOps<xsimd::avx512bw>;

constexpr std::int64_t kPassHeads = 10;  ///< heads per pass: 3 parts each in two tiles' columns
constexpr std::int64_t kTileRows = 16;
constexpr std::int64_t kStepRows = 2 * kTileRows;  ///< rows per step: two A tiles
constexpr std::int64_t kChunk = 32;                ///< channels per tile product (64 bytes)
constexpr std::int64_t kTileWords = 512;           ///< bf16 values in one 16 x 64-byte tile
/// Rows from which a scan streams its own rows ahead (as score_rows_bf16_words: the channel
/// bound's 512 rows at 16K), and how many steps ahead it asks.
constexpr std::int64_t kStreamMinRows = 256;
constexpr std::int64_t kStreamStepsAhead = 2;

/// The operand of LDTILECFG: palette 1, tiles 0-7 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

/// Whether this thread holds the tiles configured between calls (inside a ScanScope).
thread_local bool tiles_held = false;

/// Loads the configuration unless the tiles already have it: STTILECFG and a compare cost about
/// 6 ns, LDTILECFG about 50 (config_cost.txt; another user of AMX on this thread may have loaded
/// its own since).
AMC_AMX_TARGET void configure_tiles() {
  static const TileConfig kConfig;
  TileConfig current;
  _tile_storeconfig(&current);
  if (std::memcmp(&current, &kConfig, sizeof(TileConfig)) != 0) _tile_loadconfig(&kConfig);
}

/// After a call: a ScanScope keeps the tiles for the next call; otherwise they are released
/// (TILERELEASE returns AMX to its initial state, which context switches need not save).
AMC_AMX_TARGET void end_call() {
  if (hold_tiles) {
    tiles_held = true;
  } else {
    _tile_release();
  }
}

/// The bf16 nearest x (ties to even), as bits: x finite.
std::uint16_t bf16_bits(float x) { return to_bf16(x).bits; }

/// The query parts as B tiles, per pass of up to kPassHeads heads and per 32 channels:
/// words[((pass * chunks + chunk) * 2 + tile) * kTileWords + pair * 32 + column * 2 + e] is part
/// s of head h's channel chunk * 32 + 2 * pair + e, for column = s * G + h - 16 * tile. Made once
/// per thread for each distinct query (the two-stage rule's 64 calls per step share one).
struct QueryTiles {
  std::vector<float> queries;  // what they were made from: the cache key, compared by value
  std::int64_t heads = -1, head_dim = -1;
  bool finite = false;
  std::vector<std::uint16_t> words;

  bool holds(const float* q, std::int64_t h, std::int64_t d) const {
    return h == heads && d == head_dim &&
           std::memcmp(q, queries.data(), static_cast<std::size_t>(h * d) * sizeof(float)) == 0;
  }

  void make(const float* q, std::int64_t h, std::int64_t d) {
    heads = h;
    head_dim = d;
    queries.assign(q, q + h * d);
    finite = std::all_of(queries.begin(), queries.end(), [](float x) { return std::isfinite(x); });
    const std::int64_t passes = (h + kPassHeads - 1) / kPassHeads, chunks = d / kChunk;
    words.assign(static_cast<std::size_t>(passes * chunks * 2 * kTileWords), 0);
    if (!finite) return;
    for (std::int64_t head = 0; head < h; ++head) {
      const std::int64_t pass = head / kPassHeads, in_pass = head % kPassHeads;
      const std::int64_t group = std::min(kPassHeads, h - pass * kPassHeads);
      for (std::int64_t c = 0; c < d; ++c) {
        const float x = q[head * d + c];
        const std::uint16_t hi = bf16_bits(x);
        const float after_hi = x - to_float(bf16{hi});  // exact
        const std::uint16_t lo = bf16_bits(after_hi);
        const std::uint16_t rest = bf16_bits(after_hi - to_float(bf16{lo}));  // exact in bf16
        const std::uint16_t parts[3] = {hi, lo, rest};
        const std::int64_t chunk = c / kChunk, pair = (c % kChunk) / 2, e = c % 2;
        for (std::int64_t s = 0; s < 3; ++s) {
          const std::int64_t column = s * group + in_pass, tile = column / 16;
          words[static_cast<std::size_t>(((pass * chunks + chunk) * 2 + tile) * kTileWords +
                                         pair * 32 + (column % 16) * 2 + e)] = parts[s];
        }
      }
    }
  }
};

/// The tiles of `queries`, from this thread's last few: a two-stage step alternates two (the
/// channel bound's split query in its first stage, the query in its second), and remaking one
/// costs about as much as scoring a block.
const QueryTiles& query_tiles(const float* queries, std::int64_t heads, std::int64_t head_dim) {
  constexpr std::size_t kKept = 4;
  thread_local QueryTiles kept[kKept];
  thread_local std::size_t oldest = 0;
  for (const QueryTiles& tiles : kept) {
    if (tiles.holds(queries, heads, head_dim)) return tiles;
  }
  QueryTiles& tiles = kept[oldest];
  oldest = (oldest + 1) % kKept;
  tiles.make(queries, heads, head_dim);
  return tiles;
}

/// Transposes 16 rows of 16 32-bit lanes: out[w] lane r = rows[r] lane w (as Bf16Products'
/// transpose16: unpacks within 128-bit lanes, then two rounds of 128-bit shuffles).
void transpose16(const __m512i* rows, __m512i* out) {
  __m512i u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512i* r = rows + 4 * g;
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    u[4 * g + 0] = _mm512_unpacklo_epi64(t0, t2);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i a = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i b = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i c = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i d = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(3, 1, 3, 1));
    out[k] = _mm512_shuffle_i32x4(a, c, _MM_SHUFFLE(2, 0, 2, 0));
    out[8 + k] = _mm512_shuffle_i32x4(a, c, _MM_SHUFFLE(3, 1, 3, 1));
    out[4 + k] = _mm512_shuffle_i32x4(b, d, _MM_SHUFFLE(2, 0, 2, 0));
    out[12 + k] = _mm512_shuffle_i32x4(b, d, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

/// Scores of `live` (<= 16) rows from their C tiles' sums, stored as [16 rows][48 floats]
/// (columns 32-47 never written: zero): row r's score for head h is (rest + lo) + hi, columns
/// 2G + h, G + h and h; written to out[h * out_stride + r].
void store_scores(const float* sums, std::int64_t group, std::int64_t live, float* out,
                  std::ptrdiff_t out_stride) {
  __m512i by_row[16], by_head[16];
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const float* row = sums + r * 48;
    const __m512 rest = _mm512_loadu_ps(row + 2 * group), lo = _mm512_loadu_ps(row + group);
    by_row[r] = _mm512_castps_si512(_mm512_add_ps(_mm512_add_ps(rest, lo), _mm512_loadu_ps(row)));
  }
  transpose16(by_row, by_head);
  const auto rows = static_cast<__mmask16>((1u << live) - 1u);
  for (std::int64_t h = 0; h < group; ++h)
    _mm512_mask_storeu_ps(out + h * out_stride, rows, _mm512_castsi512_ps(by_head[h]));
}

/// One pass: `group` (<= kPassHeads) heads whose parts are `tiles` ([chunks][2][kTileWords]),
/// over `count` rows. `next`: the caller's next rows, asked for a share per chunk; a long scan
/// asks for its own rows kStreamStepsAhead steps ahead instead.
AMC_AMX_TARGET void score_pass(const std::uint16_t* tiles, std::int64_t group,
                               std::int64_t head_dim, const bf16* rows, std::ptrdiff_t row_stride,
                               std::int64_t count, float* out, std::ptrdiff_t out_stride,
                               Ops::AheadLines& next) {
  alignas(64) thread_local float sums[kStepRows * 48];  // [32 rows][48]: C tiles 4-7 (zeros past 32)
  thread_local std::vector<bf16> padded;                // a last step's rows, zero-padded to 32
  const bool two_tiles = 3 * group > 16;
  const std::int64_t products = two_tiles ? 4 : 2;  // tile products per chunk: one ask after each
  const bool stream = count >= kStreamMinRows;
  const std::int64_t chunks = head_dim / kChunk;
  const std::int64_t row_bytes = head_dim * static_cast<std::int64_t>(sizeof(bf16));
  for (std::int64_t r0 = 0; r0 < count; r0 += kStepRows) {
    const std::int64_t live = std::min(kStepRows, count - r0);
    const bf16* step = rows + r0 * row_stride;
    std::ptrdiff_t stride = row_stride;
    if (live < kStepRows) {
      padded.assign(static_cast<std::size_t>(kStepRows * head_dim), bf16{});
      for (std::int64_t r = 0; r < live; ++r)
        std::copy_n(step + r * row_stride, head_dim, padded.data() + r * head_dim);
      step = padded.data();
      stride = head_dim;
      asm volatile("" ::: "memory");  // the tile loads' asm does not say it reads memory
    }
    Ops::AheadLines own;
    if (stream) {
      const std::int64_t ahead = r0 + kStreamStepsAhead * kStepRows;
      own.add(rows + ahead * row_stride, row_stride * static_cast<std::ptrdiff_t>(sizeof(bf16)),
              std::clamp<std::int64_t>(count - ahead, 0, kStepRows), row_bytes);
      own.pace(chunks * products);
    }
    Ops::AheadLines& asking = stream ? own : next;
    const auto stride_bytes = static_cast<long>(stride * static_cast<std::ptrdiff_t>(sizeof(bf16)));
    _tile_zero(4);
    _tile_zero(6);
    if (two_tiles) {
      _tile_zero(5);
      _tile_zero(7);
    }
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::uint16_t* parts = tiles + c * 2 * kTileWords;
      _tile_loadd(0, step + c * kChunk, stride_bytes);
      _tile_loadd(1, step + kTileRows * stride + c * kChunk, stride_bytes);
      _tile_loadd(2, parts, 64);
      _tile_dpbf16ps(4, 0, 2);
      asking.step();
      _tile_dpbf16ps(6, 1, 2);
      asking.step();
      if (two_tiles) {
        _tile_loadd(3, parts + kTileWords, 64);
        _tile_dpbf16ps(5, 0, 3);
        asking.step();
        _tile_dpbf16ps(7, 1, 3);
        asking.step();
      }
    }
    if (stream) own.finish();
    _tile_stored(4, sums, 48 * sizeof(float));
    _tile_stored(6, sums + kTileRows * 48, 48 * sizeof(float));
    if (two_tiles) {
      _tile_stored(5, sums + 16, 48 * sizeof(float));
      _tile_stored(7, sums + kTileRows * 48 + 16, 48 * sizeof(float));
    }
    store_scores(sums, group, std::min(kTileRows, live), out + r0, out_stride);
    if (live > kTileRows) {
      store_scores(sums + kTileRows * 48, group, live - kTileRows, out + r0 + kTileRows,
                   out_stride);
    }
  }
}

/// score_rows<bf16> with AMX; the avx512 table's where the shape or the query rules it out.
AMC_AMX_TARGET void score_rows_amx(const float* queries, std::int64_t heads,
                                   std::int64_t head_dim, const bf16* rows,
                                   std::ptrdiff_t row_stride, std::int64_t count, float* out,
                                   std::ptrdiff_t out_stride, const RowsAhead& rows_ahead) {
  const QueryTiles* parts = head_dim % kChunk == 0 && count > 0
                                ? &query_tiles(queries, heads, head_dim)
                                : nullptr;
  if (parts == nullptr || !parts->finite) {
    Ops::score_rows_asking_ahead<bf16>(queries, heads, head_dim, rows, row_stride, count, out,
                                       out_stride, rows_ahead);
    return;
  }
  const bool stream = count >= kStreamMinRows;
  // The first steps' rows at once (the tile loads read 16 rows each), then the caller's next
  // rows a share per chunk of each step of the first pass (a short scan's).
  Ops::prefetch_rows(rows, row_stride,
                     std::min(count, (stream ? kStreamStepsAhead : 1) * kStepRows), head_dim);
  Ops::AheadLines next;
  if (!stream) {
    next.add(rows_ahead.first, rows_ahead.stride_bytes, rows_ahead.rows, rows_ahead.row_bytes);
    const std::int64_t products = 3 * std::min(kPassHeads, heads) > 16 ? 4 : 2;
    next.pace((count + kStepRows - 1) / kStepRows * (head_dim / kChunk) * products);
  }
  configure_tiles();
  const std::int64_t chunks = head_dim / kChunk;
  for (std::int64_t h0 = 0; h0 < heads; h0 += kPassHeads) {
    const std::int64_t pass = h0 / kPassHeads;
    score_pass(parts->words.data() + pass * chunks * 2 * kTileWords,
               std::min(kPassHeads, heads - h0), head_dim, rows, row_stride, count,
               out + h0 * out_stride, out_stride, next);
  }
  end_call();
  if (!stream) next.finish();
}

[[maybe_unused]] void score_rows_entry_amx(const float* queries, std::int64_t heads, std::int64_t head_dim,
                          const void* rows, std::ptrdiff_t row_stride, std::int64_t count,
                          float* out, std::ptrdiff_t out_stride) {
  score_rows_amx(queries, heads, head_dim, static_cast<const bf16*>(rows), row_stride, count, out,
                 out_stride, RowsAhead{});
}

/// log_sum_exp_rows<bf16>: score_rows_amx into scratch, then the avx512 table's log_sum_exp
/// (bit for bit the table's score_rows and log_sum_exp in turn, as the contract asks).
void log_sum_exp_rows_amx(const float* queries, std::int64_t heads, std::int64_t head_dim,
                          const void* rows, std::ptrdiff_t row_stride, std::int64_t count,
                          float* scratch, float* out, std::ptrdiff_t out_stride,
                          const RowsAhead& ahead) {
  score_rows_amx(queries, heads, head_dim, static_cast<const bf16*>(rows), row_stride, count,
                 scratch, count, ahead);
  Ops::log_sum_exp(scratch, heads, count, out, out_stride);
}

/// AMX-TILE (CPUID 7.0 EDX bit 24) and AMX-BF16 (bit 22), the OS saving the tile state (XCR0
/// bits 17 and 18), and this process allowed to use it: Linux asks each process to request the
/// tile data state (arch_prctl ARCH_REQ_XCOMP_PERM), and faults AMX instructions otherwise.
bool amx_available() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) return false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
  std::uint32_t xcr0_low = 0, xcr0_high = 0;
  asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr std::uint32_t kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_low & kTileState) != kTileState) return false;
#if defined(__linux__)
  constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr long kTileData = 18;               // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
  return false;
#endif
}

}  // namespace

bool amx_usable() {
  static const bool usable = amx_available();
  return usable;
}

AMC_AMX_TARGET void release_amx_tiles() {
  if (!tiles_held) return;
  _tile_release();
  tiles_held = false;
}

void amx_log_sum_exp_rows(const float* queries, std::int64_t heads, std::int64_t head_dim,
                          const bf16* rows, std::ptrdiff_t row_stride, std::int64_t count,
                          float* scratch, float* out, std::ptrdiff_t out_stride,
                          const RowsAhead& ahead) {
  log_sum_exp_rows_amx(queries, heads, head_dim, rows, row_stride, count, scratch, out, out_stride,
                       ahead);
}

}  // namespace amc::kernels::detail::amx_record
