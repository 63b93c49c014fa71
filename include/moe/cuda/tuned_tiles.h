#pragma once
// The tuned grouped-GEMM table and the routed experts' plan live in grouped_gemm_plan.h; this name stays
// for the layer's includes (src/cuda/moe_layer.cpp) until they name that header.

#include "moe/cuda/grouped_gemm_plan.h"
