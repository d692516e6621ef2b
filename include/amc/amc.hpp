// amc: attention-mass-aware sparse decoding. Umbrella header of the public API.
#pragma once

#include "amc/aligned.hpp"
#include "amc/attention/arithmetic.hpp"
#include "amc/attention/block_summaries.hpp"
#include "amc/attention/decode.hpp"
#include "amc/attention/layer_decode.hpp"
#include "amc/attention/selectors.hpp"
#include "amc/attention/softmax_state.hpp"
#include "amc/attention/sparse_config.hpp"
#include "amc/attention/support.hpp"
#include "amc/error.hpp"
#include "amc/kernels/kernel_table.hpp"
#include "amc/kv_view.hpp"
#include "amc/parallel.hpp"
#include "amc/storage.hpp"
#include "amc/tensor.hpp"
#include "amc/version.hpp"
