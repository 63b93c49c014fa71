// The device forward of the CUDA stages on device tensors it allocates itself: what the decoder on the GPU
// calls between its attention and its next norm.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/device_tensor.h"
#include "moe/layer/cuda_stages.h"
#include "moe/layer/moe_layer.h"

namespace moe {

LayerOutput forward_device_tensors(MoeLayer& layer, const Tensor& x, Stream stream, const TopK* topk_into) {
  const int64_t T = x.size(0), H = layer.config().hidden_size, k = layer.config().router.top_k;
  MOE_CHECK(x.device() == Device::cuda && x.dtype() == DType::BF16 && x.dim() == 2 && x.size(1) == H,
            "the MoE block's device forward takes x [T, {}] BF16 on the device, got {} {} on the {}", H,
            dtype_name(x.dtype()), x.shape_string(), x.device() == Device::cuda ? "device" : "host");
  const auto cuda_stream = static_cast<cudaStream_t>(stream.handle());
  LayerOutput out;
  out.hidden_states = cuda::device_empty(DType::F32, {T, H}, cuda_stream);  // [T, H]
  if (topk_into) {
    const std::vector<int64_t> shape{T, k};
    MOE_CHECK(topk_into->ids.device() == Device::cuda && topk_into->ids.dtype() == DType::I32 &&
                  topk_into->ids.shape() == shape && topk_into->ids.is_contiguous() &&
                  topk_into->weights.device() == Device::cuda && topk_into->weights.dtype() == DType::F32 &&
                  topk_into->weights.shape() == shape && topk_into->weights.is_contiguous(),
              "the MoE block's device forward writes its routing into [{}, {}] I32 and F32 device tensors", T, k);
    out.topk = *topk_into;
  } else {
    out.topk = {.ids = cuda::device_empty(DType::I32, {T, k}, cuda_stream),  // [T, k]
                .weights = cuda::device_empty(DType::F32, {T, k}, cuda_stream)};
  }
  const int64_t chunk = layer.max_tokens() > 0 ? layer.max_tokens() : T;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const TopK topk{.ids = out.topk.ids.narrow(0, t0, n), .weights = out.topk.weights.narrow(0, t0, n)};
    Tensor hidden = out.hidden_states.narrow(0, t0, n);
    layer.forward(x.narrow(0, t0, n), topk, hidden, stream);
  }
  return out;
}

}  // namespace moe
