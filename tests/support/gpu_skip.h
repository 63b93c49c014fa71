#pragma once
// GPU tests skip, not fail, where no GPU is visible (CI has none; the device runs them).

#include <gtest/gtest.h>

#include "cuda/device_info.h"

#define MOE_SKIP_WITHOUT_GPU()                                         \
  do {                                                                 \
    if (::moe::cuda::visible_gpus().empty()) GTEST_SKIP() << "no GPU"; \
  } while (0)
