#include "cpu/clamp.h"

#include <algorithm>

namespace moe::cpu {

void clamp(Tensor& x, float clip) {
  MOE_CHECK(x.dtype() == DType::F32 && x.is_contiguous(), "clamp expects contiguous F32, got {} {}",
            dtype_name(x.dtype()), x.shape_string());
  for (float *p = x.data_as<float>(), *end = p + x.numel(); p != end; ++p) *p = std::clamp(*p, -clip, clip);
}

}  // namespace moe::cpu
