// The record's AMX kernel (amx_kernel.cpp).
#pragma once

#include "amc/kernels/kernel_table.hpp"

namespace amc::kernels::detail::amx_record {
/// Kept configured between calls while true (the library's ScanScope), else released each call.
extern bool hold_tiles;
/// Whether this CPU and OS run AMX and this process may (asks Linux once).
bool amx_usable();
/// Releases tiles kept while hold_tiles was set.
void release_amx_tiles();
/// KernelTable::log_sum_exp_rows<bf16> with AMX scores.
void amx_log_sum_exp_rows(const float* queries, std::int64_t heads, std::int64_t head_dim,
                          const bf16* rows, std::ptrdiff_t row_stride, std::int64_t count,
                          float* scratch, float* out, std::ptrdiff_t out_stride,
                          const RowsAhead& ahead);
}  // namespace amc::kernels::detail::amx_record
