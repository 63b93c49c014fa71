#pragma once
// Tensors: dtype, shape, strides, host or device memory, views that share their owner.

#include "moe/core/tensor.h"  // IWYU pragma: export
