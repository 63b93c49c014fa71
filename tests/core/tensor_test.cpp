#include "moe/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "test_random.h"

namespace moe {
namespace {

// Runs `body`, expecting a moe::Error whose message contains `phrase`.
template <class Body>
void expect_error(Body body, const std::string& phrase) {
  try {
    body();
    ADD_FAILURE() << "expected a moe::Error containing \"" << phrase << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << phrase << "\"";
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message spans lines: " << e.what();
  }
}

// A [rows, cols] F32 tensor holding 0, 1, 2, ...
Tensor iota(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::iota(t.data_as<float>(), t.data_as<float>() + t.numel(), 0.0f);
  return t;
}

// Element at a multi-index, read through the strides (the reference for views).
float at(const Tensor& t, std::vector<int64_t> index) {
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * t.strides()[d];
  return t.data_as<float>()[offset];
}

TEST(Tensor, EmptyShapeStridesAlignment) {
  Tensor t = Tensor::empty(DType::BF16, {3, 4, 5});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{20, 5, 1}));
  EXPECT_EQ(t.numel(), 60);
  EXPECT_EQ(t.nbytes(), 120u);
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(0), 3);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.shape_string(), "[3, 4, 5]");
  EXPECT_FALSE(Tensor().defined());
}

// Large tensors (expert weights) start on a 2 MiB boundary, so that the transparent huge pages they are
// advised for cover them from their first byte; small ones keep 64-byte alignment without the padding.
TEST(Tensor, LargeTensorsAreHugePageAligned) {
  for (int64_t bytes : {int64_t{4} << 20, (int64_t{4} << 20) + 4, int64_t{9} << 20}) {
    Tensor t = Tensor::empty(DType::U8, {bytes});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % (uintptr_t{2} << 20), 0u) << bytes << " bytes";
    static_cast<unsigned char*>(t.data())[bytes - 1] = 1;  // the whole extent is writable
  }
  for (int i = 0; i < 8; ++i) {
    Tensor t = Tensor::empty(DType::U8, {(int64_t{4} << 20) - 64});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  }
}

TEST(Tensor, ZerosClears) {
  Tensor t = Tensor::zeros(DType::I32, {7, 9});
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data_as<int32_t>()[i], 0);
}

TEST(Tensor, ScalarAndZeroSize) {
  Tensor scalar = Tensor::from_f32({}, std::vector<float>{2.5f});
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_TRUE(scalar.defined());
  EXPECT_EQ(scalar.shape_string(), "[]");
  EXPECT_EQ(bf16_to_f32(scalar.to(DType::BF16).data_as<uint16_t>()[0]), 2.5f);

  Tensor nothing = Tensor::empty(DType::F16, {2, 0, 3});
  EXPECT_EQ(nothing.numel(), 0);
  EXPECT_EQ(nothing.nbytes(), 0u);
  EXPECT_TRUE(nothing.defined());
  Tensor converted = nothing.to(DType::F32);
  EXPECT_EQ(converted.shape(), nothing.shape());
  EXPECT_EQ(converted.dtype(), DType::F32);
}

TEST(Tensor, SizeOutOfRange) {
  Tensor t = Tensor::empty(DType::F32, {2, 3});
  expect_error([&] { t.size(2); }, "dimension 2 out of range");
  expect_error([&] { t.size(-3); }, "out of range for a tensor of shape [2, 3]");
}

TEST(Tensor, FromF32ChecksCount) {
  expect_error([] { Tensor::from_f32({2, 2}, std::vector<float>{1, 2, 3}); }, "3 values given for a tensor of shape [2, 2]");
}

TEST(Tensor, DataAsChecksElementSize) {
  Tensor t = Tensor::empty(DType::BF16, {4});
  expect_error([&] { t.data_as<float>(); }, "tensor of BF16 accessed as a 4-byte type");
}

TEST(Tensor, ViewKeepsOwnerAlive) {
  bool freed = false;
  auto* memory = new float[4]{1, 2, 3, 4};
  std::shared_ptr<const void> owner(memory, [&freed](const void* p) {
    delete[] static_cast<const float*>(p);
    freed = true;
  });
  Tensor t = Tensor::view(memory, DType::F32, {2, 2}, owner);
  owner.reset();
  EXPECT_FALSE(freed);
  Tensor row = t.select(1);
  t = Tensor();
  EXPECT_FALSE(freed);
  EXPECT_EQ(row.data_as<float>()[1], 4.0f);
  row = Tensor();
  EXPECT_TRUE(freed);
}

TEST(Tensor, SelectSharesMemory) {
  Tensor t = iota({4, 3, 2});
  Tensor s = t.select(2);
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.data(), static_cast<void*>(t.data_as<float>() + 12));
  EXPECT_EQ(at(s, {1, 1}), 15.0f);
  Tensor inner = s.select(2).select(1);  // a scalar view
  EXPECT_EQ(inner.dim(), 0);
  EXPECT_EQ(inner.numel(), 1);
  EXPECT_EQ(inner.data_as<float>()[0], 17.0f);
  expect_error([&] { t.select(4); }, "row 4 out of range");
  expect_error([&] { t.select(-1); }, "row -1 out of range");
  expect_error([&] { inner.select(0); }, "out of range for a tensor of shape []");
}

TEST(Tensor, NarrowMakesStridedViews) {
  Tensor t = iota({4, 6});
  Tensor rows = t.narrow(0, 1, 2);
  EXPECT_EQ(rows.shape(), (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(at(rows, {0, 0}), 6.0f);

  Tensor cols = t.narrow(-1, 2, 3);  // [4, 3] with row stride 6
  EXPECT_EQ(cols.shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(cols.strides(), (std::vector<int64_t>{6, 1}));
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.numel(), 12);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(at(cols, {r, c}), static_cast<float>(r * 6 + c + 2));

  EXPECT_EQ(t.narrow(1, 6, 0).numel(), 0);  // empty at the end is allowed
  expect_error([&] { t.narrow(1, 4, 3); }, "narrow(dim 1, start 4, length 3) out of range");
  expect_error([&] { t.narrow(2, 0, 1); }, "out of range");
  expect_error([&] { t.narrow(0, -1, 1); }, "out of range");
}

TEST(Tensor, Reshape) {
  Tensor t = iota({2, 3, 4});
  Tensor r = t.reshape({6, 4});
  EXPECT_EQ(r.strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(at(r, {5, 3}), 23.0f);
  EXPECT_EQ(t.reshape({24}).numel(), 24);
  expect_error([&] { t.reshape({5, 5}); }, "cannot reshape [2, 3, 4] into [5, 5]");
  expect_error([&] { t.narrow(2, 0, 2).reshape({12}); }, "reshape of a non-contiguous tensor");
  expect_error([&] { t.reshape({-2, -12}); }, "negative extent");
}

TEST(Tensor, ToSameDTypeContiguousIsANoOp) {
  Tensor t = iota({3, 3});
  EXPECT_EQ(t.to(DType::F32).data(), t.data());
}

// to() on views strided in different dimensions, to every float dtype.
TEST(Tensor, ToOnNonContiguousViews) {
  test::TestRng rng;
  Tensor base = rng.normal_tensor({5, 6, 7});
  const std::vector<Tensor> views = {
      base.narrow(2, 1, 5),                     // strided rows
      base.narrow(1, 2, 3),                     // gap in the middle dimension
      base.narrow(0, 1, 3).narrow(2, 3, 4),     // both
      base.narrow(2, 2, 4).select(3),           // 2-d, strided
      base.narrow(2, 6, 1).select(0).select(4).select(0),  // scalar view
  };
  for (const Tensor& view : views) {
    SCOPED_TRACE(view.shape_string());
    for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3}) {
      Tensor out = view.to(dtype);
      ASSERT_TRUE(out.is_contiguous());
      ASSERT_EQ(out.shape(), view.shape());
      ASSERT_EQ(out.dtype(), dtype);
      Tensor back = out.to_f32();
      std::vector<int64_t> index(view.dim(), 0);
      for (int64_t i = 0; i < view.numel(); ++i) {
        const float x = at(view, index);
        float want = x;
        if (dtype == DType::BF16) want = bf16_to_f32(f32_to_bf16(x));
        if (dtype == DType::F16) want = f16_to_f32(f32_to_f16(x));
        if (dtype == DType::F8_E4M3) want = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
        ASSERT_EQ(back.data_as<float>()[i], want) << "element " << i << " in " << dtype_name(dtype);
        for (size_t d = index.size(); d-- > 0;) {
          if (++index[d] < view.shape()[d]) break;
          index[d] = 0;
        }
      }
    }
  }
}

TEST(Tensor, ToCopiesIntegerViews) {
  Tensor t = Tensor::empty(DType::I64, {3, 4});
  for (int64_t i = 0; i < 12; ++i) t.data_as<int64_t>()[i] = i * 1000000007LL;
  Tensor c = t.narrow(1, 1, 2).to(DType::I64);
  ASSERT_TRUE(c.is_contiguous());
  const std::vector<int64_t> want = {1, 2, 5, 6, 9, 10};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(c.data_as<int64_t>()[i], want[i] * 1000000007LL);
  expect_error([&] { t.to(DType::F32); }, "cannot convert a I64 tensor to F32");
  expect_error([&] { iota({2}).to(DType::U8); }, "cannot convert a F32 tensor to U8");
}

TEST(Tensor, CheckedMulOverflow) {
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x"), int64_t{1} << 62);
  EXPECT_EQ(checked_mul(0, std::numeric_limits<int64_t>::max(), "x"), 0);
  expect_error([] { checked_mul(int64_t{1} << 32, int64_t{1} << 31, "expert buffer"); }, "expert buffer overflows");
  expect_error([] { checked_mul(std::numeric_limits<int64_t>::max(), 2, "rows"); }, "rows overflows");
  // Element count overflows, then the byte count alone overflows: both before anything is allocated.
  expect_error([] { Tensor::empty(DType::F32, {int64_t{1} << 40, int64_t{1} << 40}); }, "element count overflows");
  expect_error([] { Tensor::empty(DType::F32, {int64_t{1} << 62}); }, "byte size overflows");
  expect_error([] { Tensor::empty(DType::F32, {3, -1}); }, "negative extent in tensor shape [3, -1]");
}

}  // namespace
}  // namespace moe
