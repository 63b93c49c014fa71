#pragma once
// A tensor: dtype, shape, strides (in elements), a data pointer on the host or a device, and a
// shared owner that keeps the memory alive (an allocation, a memory-mapped file, a device buffer).
// Views (select, narrow, reshape) share the owner and copy nothing.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moe/core/check.h"
#include "moe/core/dtype.h"

namespace moe {

enum class Device : uint8_t { cpu, cuda };

// a * b for sizes, with a clear error instead of a silent wrap-around.
int64_t checked_mul(int64_t a, int64_t b, const char* what);

class Tensor {
 public:
  Tensor() = default;

  // A new contiguous host tensor, 64-byte aligned; `empty` leaves it uninitialised, `zeros` clears it.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // A contiguous view of memory owned by `owner` (which may be null for memory the caller keeps alive).
  static Tensor view(void* data, DType dtype, std::vector<int64_t> shape, std::shared_ptr<const void> owner,
                     Device device = Device::cpu);
  // A contiguous F32 host tensor holding `values` (values.size() must equal the product of shape).
  static Tensor from_f32(std::vector<int64_t> shape, std::span<const float> values);

  bool defined() const { return data_ != nullptr || (numel_ == 0 && !shape_.empty()); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  // Size of dimension d; negative d counts from the end.
  int64_t size(int d) const;
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    MOE_CHECK(sizeof(T) == dtype_size(dtype_), "tensor of {} accessed as a {}-byte type", dtype_name(dtype_),
              sizeof(T));
    return static_cast<T*>(data_);
  }

  // Drops dimension 0, keeping row `index`.
  Tensor select(int64_t index) const;
  // Rows [start, start + length) of dimension d.
  Tensor narrow(int d, int64_t start, int64_t length) const;
  // Same elements, new shape; the tensor must be contiguous.
  Tensor reshape(std::vector<int64_t> shape) const;
  // A contiguous host copy in `dtype` (float dtypes convert with round-to-nearest-even); returns the
  // tensor itself where nothing changes.
  Tensor to(DType dtype) const;
  Tensor to_f32() const { return to(DType::F32); }

  // "[4, 8]"
  std::string shape_string() const;

 private:
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
  Device device_ = Device::cpu;
};

// "[4, 8]" for any shape vector.
std::string shape_to_string(std::span<const int64_t> shape);

}  // namespace moe
