#include "cuda_step_tables.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/check.h"
#include "cuda/device_tensor.h"

namespace moe::engine {

namespace {

// Offsets of the tables in the one buffer, the 8-byte ones first.
struct Layout {
  size_t choices = 0, positions = 0, ids = 0, slots = 0, row_table = 0, row_visible = 0, last_rows = 0,
         block_tables = 0, bytes = 0;
};

Layout layout_for(int64_t rows, int64_t n_choices, int64_t n_last_rows, int64_t n_tables) {
  Layout l;
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    const size_t start = at;
    at += (bytes + 15) / 16 * 16;
    return start;
  };
  l.choices = take(n_choices * sizeof(cuda::TokenChoiceArgs));
  l.positions = take(rows * sizeof(int64_t));
  l.ids = take(rows * sizeof(int32_t));
  l.slots = take(rows * sizeof(int32_t));
  l.row_table = take(rows * sizeof(int32_t));
  l.row_visible = take(rows * sizeof(int32_t));
  l.last_rows = take(n_last_rows * sizeof(int32_t));
  l.block_tables = take(n_tables * sizeof(int32_t));
  l.bytes = std::max<size_t>(at, 16);
  return l;
}

}  // namespace

CudaStepTables::~CudaStepTables() {
  if (copied_) {
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
  if (host_) cudaFreeHost(host_);
}

void CudaStepTables::reserve_host(size_t bytes) {
  if (!copied_) MOE_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  // NOTE: the last copy may still be reading the staging buffer.
  MOE_CUDA_CHECK(cudaEventSynchronize(copied_));
  if (bytes <= host_bytes_) return;
  if (host_) MOE_CUDA_CHECK(cudaFreeHost(host_));
  host_ = nullptr;
  host_bytes_ = 0;
  MOE_CUDA_CHECK(cudaMallocHost(&host_, bytes));
  host_bytes_ = bytes;
}

const CudaStepTables::View& CudaStepTables::upload(const model::StepInputs& step, cudaStream_t stream) {
  const model::BatchLayout& batch = step.batch;
  const model::ModelKvCache& cache = step.cache;
  const int64_t rows = batch.total, block_tokens = cache.block_tokens();
  MOE_CHECK(static_cast<int64_t>(step.ids.size()) == rows && static_cast<int64_t>(batch.positions.size()) == rows,
            "the step's tables: {} ids and {} positions for {} rows", step.ids.size(), batch.positions.size(), rows);
  // A recorded step's tables: each span's block table at a stride of the longest a sequence can have.
  const int64_t stride = step.recorded_rows > 0 ? (cache.max_length() + block_tokens - 1) / block_tokens : 0;
  int64_t n_tables = 0;
  for (const model::BatchLayout::Span& s : batch.spans)
    n_tables += stride > 0 ? stride : static_cast<int64_t>(cache.block_table(s.seq).size());
  const auto n_choices = static_cast<int64_t>(step.choices.size());
  const auto n_last = static_cast<int64_t>(step.last_rows.size());
  const Layout l = layout_for(rows, n_choices, n_last, n_tables);

  reserve_host(l.bytes);
  auto* base = static_cast<uint8_t*>(host_);
  std::memset(base, 0, l.bytes);
  auto* choices = reinterpret_cast<cuda::TokenChoiceArgs*>(base + l.choices);
  for (int64_t i = 0; i < n_choices; ++i) {
    const model::TokenChoice& c = step.choices[i];
    choices[i] = {.temperature = static_cast<float>(c.temperature),
                  .top_p = static_cast<float>(c.top_p),
                  .top_k = c.top_k,
                  .uniform = c.uniform};
  }
  std::copy(batch.positions.begin(), batch.positions.end(), reinterpret_cast<int64_t*>(base + l.positions));
  std::copy(step.ids.begin(), step.ids.end(), reinterpret_cast<int32_t*>(base + l.ids));
  auto* slots = reinterpret_cast<int32_t*>(base + l.slots);
  auto* row_table = reinterpret_cast<int32_t*>(base + l.row_table);
  auto* row_visible = reinterpret_cast<int32_t*>(base + l.row_visible);
  auto* tables = reinterpret_cast<int32_t*>(base + l.block_tables);
  int64_t max_sequence_rows = 0, table_at = 0;
  for (const model::BatchLayout::Span& s : batch.spans) {
    max_sequence_rows = std::max(max_sequence_rows, s.count);
    const std::vector<int32_t>& table = cache.block_table(s.seq);
    MOE_CHECK(stride == 0 || static_cast<int64_t>(table.size()) <= stride,
              "the step's tables: sequence {} holds {} blocks, more than max_length allows ({})", s.seq,
              table.size(), stride);
    std::copy(table.begin(), table.end(), tables + table_at);
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t row = s.row + i, p = s.start + i;
      slots[row] = s.pad ? -1 : static_cast<int32_t>(table.at(p / block_tokens) * block_tokens + p % block_tokens);
      row_table[row] = static_cast<int32_t>(table_at);
      row_visible[row] = static_cast<int32_t>(p + 1);
    }
    table_at += stride > 0 ? stride : static_cast<int64_t>(table.size());
  }
  std::copy(step.last_rows.begin(), step.last_rows.end(), reinterpret_cast<int32_t*>(base + l.last_rows));

  Tensor* device = &eager_;
  if (step.recorded_rows > 0) device = &recorded_[step.recorded_rows];
  if (step.recorded_rows == 0 || !device->defined() || device->nbytes() != l.bytes)
    *device = cuda::device_empty(DType::U8, {static_cast<int64_t>(l.bytes)}, stream);
  MOE_CUDA_CHECK(cudaMemcpyAsync(device->data(), host_, l.bytes, cudaMemcpyHostToDevice, stream));
  MOE_CUDA_CHECK(cudaEventRecord(copied_, stream));

  const auto* d = static_cast<const uint8_t*>(device->data());
  view_ = {.rows = rows,
           .spans = static_cast<int64_t>(batch.spans.size()),
           .max_sequence_rows = max_sequence_rows,
           .ids = reinterpret_cast<const int32_t*>(d + l.ids),
           .positions = reinterpret_cast<const int64_t*>(d + l.positions),
           .slots = reinterpret_cast<const int32_t*>(d + l.slots),
           .block_tables = reinterpret_cast<const int32_t*>(d + l.block_tables),
           .row_table = reinterpret_cast<const int32_t*>(d + l.row_table),
           .row_visible = reinterpret_cast<const int32_t*>(d + l.row_visible),
           .last_rows = reinterpret_cast<const int32_t*>(d + l.last_rows),
           .n_last_rows = n_last,
           .choices = reinterpret_cast<const cuda::TokenChoiceArgs*>(d + l.choices),
           .n_choices = n_choices};
  uploaded_ = true;
  return view_;
}

const CudaStepTables::View& CudaStepTables::view() const {
  MOE_CHECK(uploaded_, "the GPU decoder's ops ran an op before the forward's begin_step");
  return view_;
}

}  // namespace moe::engine
