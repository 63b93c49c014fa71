#include "moe/core/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "test_random.h"

namespace moe {
namespace {

using test::TempDir;

namespace fs = std::filesystem;

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file as bytes: the 8-byte length (the header's own unless `claimed` is given), the header, the data.
std::string raw_file(const std::string& header, const std::string& data = "", int64_t claimed = -1) {
  return le64(claimed < 0 ? header.size() : static_cast<uint64_t>(claimed)) + header + data;
}

// A tensor of `shape` in `dtype` with random bytes (any bit pattern: the file must carry bytes exactly).
Tensor random_bytes_tensor(test::TestRng& rng, DType dtype, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng.engine()());
  return t;
}

void expect_same_bytes(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  const Tensor w = want.to(want.dtype());  // contiguous
  ASSERT_EQ(got.nbytes(), w.nbytes());
  if (w.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(got.data(), w.data(), w.nbytes()), 0);
  }
}

// Expects SafetensorsFile::open(path) to throw a one-line moe::Error naming the file and containing `phrase`.
void expect_open_error(const fs::path& path, const std::string& phrase) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "opening " << path << " succeeded; expected an error containing \"" << phrase << "\"";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(phrase), std::string::npos) << "message \"" << message << "\" lacks \"" << phrase << "\"";
    EXPECT_NE(message.find(path.string()), std::string::npos) << "message \"" << message << "\" lacks the path";
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message spans lines: " << message;
  }
}

constexpr DType kAllDTypes[] = {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3,
                                DType::I8,  DType::U8,   DType::I32, DType::I64};

TEST(Safetensors, RoundTripEveryDType) {
  TempDir dir;
  test::TestRng rng;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType dtype : kAllDTypes) {
    const std::string name(dtype_name(dtype));
    tensors.emplace_back(name + ".matrix", random_bytes_tensor(rng, dtype, {3, 5}));
    tensors.emplace_back(name + ".cube", random_bytes_tensor(rng, dtype, {2, 3, 7}));
    tensors.emplace_back(name + ".scalar", random_bytes_tensor(rng, dtype, {}));
    tensors.emplace_back(name + ".empty", Tensor::empty(dtype, {0}));
    tensors.emplace_back(name + ".empty3", Tensor::empty(dtype, {4, 0, 2}));
  }
  const fs::path path = dir / "all.safetensors";
  write_safetensors(path, tensors);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  const std::vector<std::string> names = file.names();
  EXPECT_EQ(names.size(), tensors.size());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_TRUE(file.metadata().empty());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.contains(name));
    const Tensor got = file.get(name);
    EXPECT_EQ(file.entry(name).dtype, tensor.dtype());
    EXPECT_EQ(file.entry(name).shape, tensor.shape());
    EXPECT_EQ(file.entry(name).end - file.entry(name).begin, tensor.nbytes());
    EXPECT_TRUE(got.is_contiguous());
    expect_same_bytes(got, tensor);
    EXPECT_EQ(file.get(name).data(), got.data()) << "views must be zero-copy";
  }
  EXPECT_FALSE(file.contains("nope"));
}

TEST(Safetensors, ViewsOutliveTheFileObject) {
  TempDir dir;
  test::TestRng rng;
  const Tensor original = rng.normal_tensor({64, 33}, 1.0f, DType::BF16);
  write_safetensors(dir / "a.safetensors", {{"w", original}});
  Tensor view;
  {
    const SafetensorsFile file = SafetensorsFile::open(dir / "a.safetensors");
    view = file.get("w");
  }
  expect_same_bytes(view, original);
}

TEST(Safetensors, NonContiguousTensorsAreWrittenContiguous) {
  TempDir dir;
  test::TestRng rng;
  const Tensor base = rng.normal_tensor({6, 10});
  const Tensor strided = base.narrow(1, 3, 4);  // [6, 4], row stride 10
  const Tensor bf16 = rng.normal_tensor({4, 5, 6}, 1.0f, DType::BF16).narrow(1, 1, 3);
  ASSERT_FALSE(strided.is_contiguous());
  write_safetensors(dir / "s.safetensors", {{"strided", strided}, {"bf16", bf16}});
  const SafetensorsFile file = SafetensorsFile::open(dir / "s.safetensors");
  expect_same_bytes(file.get("strided"), strided);
  expect_same_bytes(file.get("bf16"), bf16);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(file.get("strided").data_as<float>()[r * 4 + c], base.data_as<float>()[r * 10 + 3 + c]);
}

TEST(Safetensors, MetadataRoundTrip) {
  TempDir dir;
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"note", "quotes \" and \\ and unicode \xc3\xa9"}, {"empty", ""}};
  write_safetensors(dir / "m.safetensors", {{"x", Tensor::zeros(DType::F32, {2})}}, metadata);
  EXPECT_EQ(SafetensorsFile::open(dir / "m.safetensors").metadata(), metadata);
}

TEST(Safetensors, HeaderLayout) {
  TempDir dir;
  // Names chosen so that the header's length is not already a multiple of 8 for most of them.
  for (int n = 1; n <= 9; ++n) {
    SCOPED_TRACE(n);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (int i = n; i-- > 0;) {  // given in reverse order
      std::string name(i + 2, 'x');
      name[0] = 't';
      tensors.emplace_back(name, Tensor::zeros(DType::BF16, {i + 1}));
    }
    const fs::path path = dir / "h.safetensors";
    write_safetensors(path, tensors);
    const std::string bytes = read_bytes(path);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
    EXPECT_EQ(header_bytes % 8, 0u);
    const std::string header = bytes.substr(8, header_bytes);
    ASSERT_EQ(header.front(), '{');
    const size_t close = header.find_last_of('}');
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
    EXPECT_LT(header.size() - close - 1, 8u);
    EXPECT_EQ(header.find("__metadata__"), std::string::npos) << "empty metadata is left out";
    // Keys sorted, data in name order, contiguous from 0.
    const SafetensorsFile file = SafetensorsFile::open(path);
    uint64_t offset = 0;
    size_t position = 0;
    for (const std::string& name : file.names()) {
      EXPECT_EQ(file.entry(name).begin, offset) << name;
      offset = file.entry(name).end;
      const size_t at = header.find(std::string(1, '"').append(name).append(1, '"'));
      EXPECT_GT(at, position) << name << " out of order in the header";
      position = at;
    }
    EXPECT_EQ(bytes.size(), 8 + header_bytes + offset);
  }
}

TEST(Safetensors, EmptyFileAndZeroByteDataSection) {
  TempDir dir;
  write_safetensors(dir / "none.safetensors", {});
  const SafetensorsFile none = SafetensorsFile::open(dir / "none.safetensors");
  EXPECT_TRUE(none.names().empty());
  write_safetensors(dir / "zero.safetensors", {{"e", Tensor::empty(DType::I32, {0, 5})}});
  const SafetensorsFile zero = SafetensorsFile::open(dir / "zero.safetensors");
  EXPECT_EQ(zero.get("e").shape(), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(zero.get("e").numel(), 0);
}

// Files from other writers need not pad the header, nor list tensors in order, nor use compact JSON.
TEST(Safetensors, ReadsHandWrittenFiles) {
  TempDir dir;
  std::string header =
      R"({ "b" : {"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
      R"( "a": {"dtype": "I32", "shape": [], "data_offsets": [3, 7]}, "__metadata__": {"k": "v"} })";
  if (header.size() % 8 == 0) header += ' ';
  write_bytes(dir / "h.safetensors", raw_file(header, std::string("\x01\x02\x03", 3) + le64(0x11223344).substr(0, 4)));
  const SafetensorsFile file = SafetensorsFile::open(dir / "h.safetensors");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(file.get("b").data_as<uint8_t>()[2], 3);
  int32_t a = 0;
  std::memcpy(&a, file.get("a").data(), 4);  // may be unaligned
  EXPECT_EQ(a, 0x11223344);
  EXPECT_EQ(file.metadata().at("k"), "v");
}

TEST(Safetensors, MissingTensor) {
  TempDir dir;
  write_safetensors(dir / "a.safetensors", {{"w", Tensor::zeros(DType::F32, {1})}});
  const SafetensorsFile file = SafetensorsFile::open(dir / "a.safetensors");
  try {
    file.get("v");
    FAIL() << "expected moe::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'v' not found in " + (dir / "a.safetensors").string()),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(file.entry("v"), Error);
}

TEST(Safetensors, WriterErrors) {
  TempDir dir;
  const Tensor t = Tensor::zeros(DType::F32, {2});
  const fs::path path = dir / "d.safetensors";
  try {
    write_safetensors(path, {{"a", t}, {"b", t}, {"a", t}});
    FAIL() << "expected moe::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate tensor name 'a'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", t}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"undefined", Tensor()}}), Error);

  const fs::path unwritable = dir / "no" / "such" / "dir" / "x.safetensors";
  try {
    write_safetensors(unwritable, {{"a", t}});
    FAIL() << "expected moe::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(unwritable.string()), std::string::npos) << e.what();
  }
  // Nothing is left behind in the directory on failure.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 0);
}

TEST(Safetensors, RewritingKeepsEarlierMappingsValid) {
  TempDir dir;
  const fs::path path = dir / "r.safetensors";
  const Tensor big = Tensor::from_f32({4}, std::vector<float>{1, 2, 3, 4});
  write_safetensors(path, {{"w", big}});
  const Tensor view = SafetensorsFile::open(path).get("w");
  write_safetensors(path, {});  // a shorter file at the same path
  EXPECT_EQ(view.data_as<float>()[3], 4.0f);
  EXPECT_TRUE(SafetensorsFile::open(path).names().empty());
}

struct CorruptCase {
  const char* what;
  std::string bytes;
  std::string phrase;
};

TEST(Safetensors, CorruptFilesNameTheProblem) {
  TempDir dir;
  const std::string f32_2 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\x5a');
  const std::vector<CorruptCase> cases = {
      {"empty file", "", "shorter than 8 bytes"},
      {"five bytes", "abcde", "is 5 bytes long, shorter than 8 bytes"},
      {"header longer than file", raw_file("{}", "", 1000), "header length 1000 is larger than the file (10 bytes)"},
      {"huge header length", raw_file("{}", "", int64_t{1} << 62), "is larger than the file"},
      {"zero-length header", raw_file(""), "header is not valid JSON"},
      {"not JSON", raw_file("{not json}"), "header is not valid JSON"},
      {"JSON then garbage", raw_file("{} x"), "header is not valid JSON"},
      {"NUL padding", raw_file(std::string("{}\0\0\0\0\0\0", 8)), "header is not valid JSON"},
      {"array header", raw_file("[1, 2]"), "header is a JSON array, expected an object"},
      {"string header", raw_file("\"hi\""), "header is a JSON string, expected an object"},
      {"entry not an object", raw_file(R"({"a": 3})"), "entry 'a' is a JSON number, expected an object"},
      {"no dtype", raw_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight), "tensor 'a' lacks \"dtype\""},
      {"no shape", raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight), "tensor 'a' lacks \"shape\""},
      {"no offsets", raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "tensor 'a' lacks \"data_offsets\""},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", eight),
       "unsupported dtype 'F64' (supported: F32 BF16 F16 F8_E4M3 I8 U8 I32 I64)"},
      {"lower-case dtype", raw_file(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", eight),
       "unsupported dtype 'f32'"},
      {"dtype not a string", raw_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
       "has dtype 4, expected a string"},
      {"negative extent", raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "has shape [-2]: extents must be non-negative integers"},
      {"fractional extent", raw_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       "extents must be non-negative integers"},
      {"string extent", raw_file(R"({"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", eight),
       "extents must be non-negative integers"},
      {"extent beyond int64", raw_file(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]}})", eight),
       "extents must be non-negative integers"},
      {"shape not an array", raw_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight),
       "expected an array of non-negative integers"},
      {"element count overflow",
       raw_file(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "element count overflows"},
      {"byte size overflow", raw_file(R"({"a":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,8]}})", eight),
       "byte size overflows"},
      {"offsets decreasing", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
       "expected two non-decreasing non-negative integers"},
      {"one offset", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", eight),
       "expected two non-decreasing non-negative integers"},
      {"three offsets", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", eight),
       "expected two non-decreasing non-negative integers"},
      {"negative offset", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", eight),
       "expected two non-decreasing non-negative integers"},
      {"fractional offset", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.5]}})", eight),
       "expected two non-decreasing non-negative integers"},
      {"offsets not an array", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", eight),
       "expected two non-decreasing non-negative integers"},
      {"size mismatch", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", eight),
       "tensor 'a' of F32 [2] needs 8 bytes but its data_offsets [0, 4] span 4 bytes"},
      {"size mismatch, larger", raw_file(R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", eight + eight),
       "needs 8 bytes but its data_offsets [0, 16] span 16 bytes"},
      {"truncated data", raw_file(f32_2, "1234"), "ends at byte 8 of the data section, which has only 4 bytes: the file is truncated"},
      {"offsets past the end", raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[100,104]}})", eight),
       "the file is truncated"},
      {"overlap",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                eight + "1234"),
       "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
      {"same range twice",
       raw_file(R"({"x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                eight),
       "overlap in the data section"},
      {"contained",
       raw_file(R"({"x":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"y":{"dtype":"U8","shape":[2],"data_offsets":[12,14]}})",
                eight + eight),
       "tensors 'x' [0, 16) and 'y' [12, 14) overlap"},
      {"metadata not an object", raw_file(R"({"__metadata__": "pt"})"), "__metadata__ is a JSON string, expected an object"},
      {"metadata value not a string", raw_file(R"({"__metadata__": {"format": "pt", "step": 5}})"),
       "__metadata__ entry 'step' is 5, expected a string"},
      {"metadata nested", raw_file(R"({"__metadata__": {"k": {"a": "b"}}})"), "__metadata__ entry 'k'"},
  };
  int index = 0;
  for (const CorruptCase& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path path = dir / ("corrupt" + std::to_string(index++) + ".safetensors");
    write_bytes(path, c.bytes);
    expect_open_error(path, c.phrase);
  }
}

TEST(Safetensors, ZeroSizeTensorsMayShareOffsets) {
  TempDir dir;
  write_bytes(dir / "z.safetensors",
              raw_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                       std::string(8, '\x01')));
  const SafetensorsFile file = SafetensorsFile::open(dir / "z.safetensors");
  EXPECT_EQ(file.get("a").numel(), 0);
  EXPECT_EQ(file.get("b").data_as<uint8_t>()[7], 1);
}

TEST(Safetensors, MissingOrUnreadablePaths) {
  TempDir dir;
  expect_open_error(dir / "missing.safetensors", "cannot open safetensors file");
  expect_open_error(dir.path(), "is not a regular file");
}

// The header-length cap applies before anything is parsed: a sparse file lets the test claim a 100 MB header.
TEST(Safetensors, HeaderLengthCap) {
  TempDir dir;
  const fs::path path = dir / "big.safetensors";
  write_bytes(path, le64(100'000'001));
  fs::resize_file(path, 8 + 100'000'001 + 16);
  expect_open_error(path, "header length 100000001 exceeds the 100000000-byte limit");
}

// A valid file cut short anywhere is refused with the reason that fits where it was cut.
TEST(Safetensors, TruncationAtEveryStage) {
  TempDir dir;
  test::TestRng rng;
  const fs::path whole = dir / "whole.safetensors";
  write_safetensors(whole, {{"a", random_bytes_tensor(rng, DType::F32, {16})},
                            {"b", random_bytes_tensor(rng, DType::BF16, {5, 3})},
                            {"c", random_bytes_tensor(rng, DType::I8, {7})}});
  const std::string bytes = read_bytes(whole);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
  const size_t data_start = 8 + header_bytes;
  ASSERT_EQ(bytes.size(), data_start + 64 + 30 + 7);

  const std::vector<std::pair<size_t, std::string>> cuts = {
      {0, "shorter than 8 bytes"},
      {3, "shorter than 8 bytes"},
      {7, "shorter than 8 bytes"},
      {8, "is larger than the file"},
      {8 + header_bytes / 2, "is larger than the file"},
      {data_start - 1, "is larger than the file"},
      {data_start, "the file is truncated"},
      {data_start + 1, "the file is truncated"},
      {data_start + 64, "the file is truncated"},
      {data_start + 64 + 30, "the file is truncated"},
      {bytes.size() - 1, "ends at byte 101 of the data section, which has only 100 bytes"},
  };
  for (const auto& [size, phrase] : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(size));
    const fs::path path = dir / ("cut" + std::to_string(size) + ".safetensors");
    write_bytes(path, bytes.substr(0, size));
    expect_open_error(path, phrase);
  }
  // Extra bytes after the last tensor are tolerated: they are never read.
  write_bytes(dir / "longer.safetensors", bytes + "trailing");
  EXPECT_EQ(SafetensorsFile::open(dir / "longer.safetensors").names().size(), 3u);
}

}  // namespace
}  // namespace moe
