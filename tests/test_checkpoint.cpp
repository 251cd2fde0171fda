// Checkpoints: the safetensors reader and writer (io/safetensors.h), module
// save/load (checkpoint/checkpoint.h) and the fixture helpers (tests/fixture.h).
// Bad files are crafted byte by byte; every rejection must be a qkv::Error
// naming the file and the tensor (these tests also run under ASan/UBSan).
#include <doctest/doctest.h>

#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/elementwise.h"
#include "core/error.h"
#include "io/run_program.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_file.h"
#include "nn/linear.h"
#include "tests/fixture.h"

using namespace qkv;
namespace fs = std::filesystem;

using qkv::testing::error_of;
using qkv::testing::test_seed;

namespace {

using testing::TempDir;

// Two Linear children with every parameter (biases too) drawn from `seed`.
struct TwoLinear : nn::Module {
  std::shared_ptr<nn::Linear> linear1, linear2;
  TwoLinear(int64_t in, int64_t hidden, int64_t out, uint64_t seed) {
    Generator g(seed);
    linear1 = register_module("linear1", std::make_shared<nn::Linear>(in, hidden, true, g));
    linear2 = register_module("linear2", std::make_shared<nn::Linear>(hidden, out, true, g));
    for (auto& [name, p] : named_parameters()) p.data().copy_(Tensor::normal(p.shape(), 0, 1, g));
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string f32_bytes(const std::vector<float>& v) {
  std::string s;
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    for (int i = 0; i < 4; ++i) s += static_cast<char>(b >> (8 * i));
  }
  return s;
}
std::string f64_bytes(const std::vector<double>& v) {
  std::string s;
  for (double d : v) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    for (int i = 0; i < 8; ++i) s += static_cast<char>(b >> (8 * i));
  }
  return s;
}
std::string u16_bytes(const std::vector<uint16_t>& v) {
  std::string s;
  for (uint16_t h : v) {
    s += static_cast<char>(h & 0xff);
    s += static_cast<char>(h >> 8);
  }
  return s;
}
// A safetensors file from a header text and a data section (header unpadded:
// padding is the writer's habit, not a reader requirement).
std::string st_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Writes `bytes` to a file and checks that reading it fails with a message
// naming the file, the tensor (when given) and `fragment`.
void expect_rejected(const TempDir& tmp, const std::string& bytes, const std::string& tensor,
                     const std::string& fragment) {
  const std::string path = tmp.file("bad.safetensors");
  write_bytes(path, bytes);
  const std::string msg = error_of([&] { read_safetensors(path); });
  INFO("message: " << msg);
  CHECK(!msg.empty());
  CHECK(contains(msg, path));
  if (!tensor.empty()) CHECK(contains(msg, "'" + tensor + "'"));
  CHECK(contains(msg, fragment));
}

// A valid two-tensor file: a (2,) F32 at [0,8), b (1,2) F32 at [8,16).
const char* kGoodHeader = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}})";
std::string good_data() { return f32_bytes({1.5f, -2.0f, 0.25f, 4.0f}); }

std::vector<std::string> tmp_leftovers(const TempDir& tmp) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(tmp.dir))
    if (contains(e.path().filename().string(), ".tmp")) out.push_back(e.path().string());
  return out;
}

}  // namespace

// ---- round trips --------------------------------------------------------------

TEST_CASE(
    "checkpoint: save then load into a differently seeded model restores every parameter exactly "
    "and in place") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  TwoLinear a(3, 4, 2, test_seed()), b(3, 4, 2, test_seed(1));
  REQUIRE(a.linear1->weight.data().to_vector() != b.linear1->weight.data().to_vector());
  nn::save(a, path);

  // Vars held elsewhere (as an optimizer holds them) must see the new values.
  const Var held = b.linear2->bias;
  const real* storage_before = b.linear1->weight.data().data();
  nn::load(b, path);
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == 4);
  REQUIRE(pb.size() == 4);
  for (size_t i = 0; i < pa.size(); ++i) {
    CHECK(pa[i].first == pb[i].first);
    CHECK(pa[i].second.data().to_vector() == pb[i].second.data().to_vector());
  }
  CHECK(b.linear1->weight.data().data() == storage_before);
  CHECK(held.data().to_vector() == a.linear2->bias.data().to_vector());
}

TEST_CASE("checkpoint: state_dict lists dotted parameter names and shares their storage") {
  TwoLinear m(3, 4, 2, test_seed());
  const NamedTensors sd = nn::state_dict(m);
  REQUIRE(sd.size() == 4);
  CHECK(sd[0].first == "linear1.weight");
  CHECK(sd[1].first == "linear1.bias");
  CHECK(sd[2].first == "linear2.weight");
  CHECK(sd[3].first == "linear2.bias");
  CHECK(sd[0].second.shape() == Shape{4, 3});
  CHECK(sd[0].second.shares_storage_with(m.linear1->weight.data()));
}

TEST_CASE(
    "checkpoint: metadata round-trips through save and load, including quotes, empty and non-ASCII "
    "values") {
  TempDir tmp;
  const std::string path = tmp.file("meta.safetensors");
  TwoLinear m(2, 2, 2, test_seed());
  const Metadata md = {{"step", "1200"},
                       {"note", "say \"hi\"\n\tbye"},
                       {"empty", ""},
                       {"unicode", "\xc3\xa9t\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80"}};
  nn::save(m, path, md);
  TwoLinear other(2, 2, 2, test_seed(1));
  CHECK(nn::load(other, path) == md);
  CHECK(read_safetensors(path).metadata == md);
}

TEST_CASE(
    "safetensors: scalars and zero-element tensors round-trip, with a space-padded 8-byte-aligned "
    "header") {
  TempDir tmp;
  const std::string path = tmp.file("edge.safetensors");
  write_safetensors(path, {{"s", Tensor::scalar(2.5)},
                           {"empty", Tensor::zeros({0, 3})},
                           {"v", Tensor::from_vector({1, 2, 3})}});
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= bytes.size());
  CHECK(bytes.size() == 8 + n + 4 * 4);  // 1 + 0 + 3 floats
  CHECK(nlohmann::json::parse(bytes.substr(8, n)).is_object());
  const std::string header = bytes.substr(8, n);
  CHECK(header[header.find_last_not_of(' ')] == '}');  // the JSON, then only space padding

  const TensorFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].first == "empty");  // sorted by name
  CHECK(f.tensors[1].first == "s");
  CHECK(f.tensors[2].first == "v");
  CHECK(f.get("s").shape() == Shape{});
  CHECK(f.get("s").item() == 2.5);
  CHECK(f.get("empty").shape() == Shape{0, 3});
  CHECK(f.get("v").to_vector() == std::vector<real>{1, 2, 3});
}

TEST_CASE("safetensors: FileDtype::F64 writes F64 entries that read back to the same values") {
  TempDir tmp;
  const std::string path = tmp.file("f64.safetensors");
  const Tensor t = Tensor::from_vector({0.1f, -3.0f, 1e-30f, 7.0f}, {2, 2});
  write_safetensors(path, {{"t", t}}, {}, FileDtype::F64);
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["t"]["dtype"] == "F64");
  CHECK(header["t"]["data_offsets"][1] == 32);
  CHECK(read_safetensors(path).get("t").to_vector() == t.to_vector());
}

TEST_CASE(
    "safetensors: TensorFile::get names the file and the tensor when it is absent; has() agrees") {
  TempDir tmp;
  const std::string path = tmp.file("one.safetensors");
  write_safetensors(path, {{"w", Tensor::ones({2})}});
  const TensorFile f = read_safetensors(path);
  CHECK(f.path == path);
  CHECK(f.has("w"));
  CHECK_FALSE(f.has("nope"));
  const std::string msg = error_of([&] { f.get("nope"); });
  CHECK(contains(msg, path));
  CHECK(contains(msg, "'nope'"));
}

// ---- reading other writers' files -----------------------------------------------

TEST_CASE(
    "safetensors: reads the PyTorch-written fixture adam.safetensors (values, shapes, metadata)") {
  const TensorFile f = load_fixture("adam.safetensors");
  const Tensor& p0 = f.get("p0");
  CHECK(p0.shape() == Shape{2, 3});
  CHECK(p0.at({0, 0}) == static_cast<real>(-0.48678076f));
  CHECK(p0.at({0, 1}) == static_cast<real>(-0.6038216f));
  CHECK(f.get("g1").at({0, 0}) == static_cast<real>(-1.401702f));
  CHECK(f.get("sgd_nesterov.p3").at({0, 2}) == static_cast<real>(-0.8478093f));
  CHECK(f.metadata.at("steps") == "3");
  CHECK(f.metadata.at("adam.optimizer") == "Adam");
}

TEST_CASE(
    "safetensors: rewriting a PyTorch-written fixture reproduces its header entries and data bytes "
    "exactly") {
  TempDir tmp;
  const std::string src = fixture_path("adam.safetensors");
  const std::string dst = tmp.file("adam_copy.safetensors");
  const TensorFile f = read_safetensors(src);
  write_safetensors(dst, f.tensors, f.metadata);
  auto split = [](const std::string& bytes, nlohmann::json& header, std::string& data) {
    REQUIRE(bytes.size() >= 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    REQUIRE(8 + n <= bytes.size());
    header = nlohmann::json::parse(bytes.substr(8, n));
    data = bytes.substr(8 + n);
  };
  nlohmann::json h1, h2;
  std::string d1, d2;
  split(read_bytes(src), h1, d1);
  split(read_bytes(dst), h2, d2);
  CHECK(h1 == h2);  // same names, dtypes, shapes, offsets and metadata
  CHECK(d1 == d2);  // same layout and bit-identical values
}

TEST_CASE("safetensors: F64, F16 and BF16 data convert to qkv::real") {
  TempDir tmp;
  const std::string path = tmp.file("dtypes.safetensors");
  const std::string header = R"({"d":{"dtype":"F64","shape":[3],"data_offsets":[0,24]},)"
                             R"("h":{"dtype":"F16","shape":[2,4],"data_offsets":[24,40]},)"
                             R"("z":{"dtype":"BF16","shape":[4],"data_offsets":[40,48]}})";
  const std::string data =
      f64_bytes({0.1, -2.5, 1e-3}) +
      // F16: 1, -2, 0.5, 65504 (largest), 2^-24 (smallest subnormal), 2^-14
      // (smallest normal), -0, +inf
      u16_bytes({0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x0400, 0x8000, 0x7C00}) +
      // BF16: 1, -2, 3.140625, 1e38-ish (0x7E96 = 1.0e38 rounded)
      u16_bytes({0x3F80, 0xC000, 0x4049, 0x7E96});
  write_bytes(path, st_file(header, data));
  const TensorFile f = read_safetensors(path);

  const auto d = f.get("d").to_vector();
  CHECK(d[0] == static_cast<real>(0.1));
  CHECK(d[1] == real(-2.5));
  CHECK(d[2] == static_cast<real>(1e-3));

  const Tensor& h = f.get("h");
  CHECK(h.shape() == Shape{2, 4});
  const auto hv = h.to_vector();
  CHECK(hv[0] == real(1));
  CHECK(hv[1] == real(-2));
  CHECK(hv[2] == real(0.5));
  CHECK(hv[3] == real(65504));
  CHECK(hv[4] == std::ldexp(real(1), -24));
  CHECK(hv[5] == std::ldexp(real(1), -14));
  CHECK(hv[6] == real(0));
  CHECK(std::signbit(hv[6]));
  CHECK(std::isinf(hv[7]));
  CHECK(hv[7] > 0);

  const auto z = f.get("z").to_vector();
  CHECK(z[0] == real(1));
  CHECK(z[1] == real(-2));
  CHECK(z[2] == real(3.140625));
  uint32_t bits = 0x7E960000u;
  float big;
  std::memcpy(&big, &bits, 4);
  CHECK(z[3] == static_cast<real>(big));
}

// ---- crafted bad files: every rejection names the file and the tensor ---------------

TEST_CASE(
    "safetensors: the crafted well-formed base file reads (control for the rejection tests)") {
  TempDir tmp;
  const std::string path = tmp.file("good.safetensors");
  write_bytes(path, st_file(kGoodHeader, good_data()));
  const TensorFile f = read_safetensors(path);
  CHECK(f.get("a").to_vector() == std::vector<real>{1.5, -2});
  CHECK(f.get("b").shape() == Shape{1, 2});
  CHECK(f.get("b").to_vector() == std::vector<real>{0.25, 4});
}

TEST_CASE("safetensors: rejects a missing file, a directory, and files shorter than 8 bytes") {
  TempDir tmp;
  const std::string missing = tmp.file("nothing.safetensors");
  const std::string m1 = error_of([&] { read_safetensors(missing); });
  CHECK(contains(m1, missing));
  CHECK(contains(m1, "cannot open"));
  const std::string m2 = error_of([&] { read_safetensors(tmp.dir.string()); });
  CHECK(contains(m2, tmp.dir.string()));
  CHECK(contains(m2, "directory"));
  expect_rejected(tmp, "", "", "too short");
  expect_rejected(tmp, std::string("\x10\0\0\0\0", 5), "", "too short");
  expect_rejected(tmp, std::string(7, '\0'), "", "too short");
}

TEST_CASE(
    "safetensors: rejects a header length larger than the file (truncated header) or absurd") {
  TempDir tmp;
  const std::string good = st_file(kGoodHeader, good_data());
  expect_rejected(tmp, good.substr(0, 40), "", "larger than");  // cut inside the header
  const std::string h = kGoodHeader;
  expect_rejected(tmp, le64(h.size() + good_data().size() + 1) + h + good_data(), "",
                  "larger than");
  expect_rejected(tmp, le64(100'000'001) + h + good_data(), "", "absurd");
  expect_rejected(tmp, le64(std::numeric_limits<uint64_t>::max()) + h, "", "absurd");
}

TEST_CASE("safetensors: a truncated data section is rejected naming the tensor that runs past it") {
  TempDir tmp;
  const std::string good = st_file(kGoodHeader, good_data());
  expect_rejected(tmp, good.substr(0, good.size() - 3), "b", "end beyond the data section");
}

TEST_CASE("safetensors: rejects invalid JSON and a header that is not an object") {
  TempDir tmp;
  expect_rejected(tmp, st_file(R"({"a": {"dtype": )", ""), "", "not valid JSON");
  expect_rejected(tmp, st_file(std::string("{\"a\"\0\0}", 7), ""), "", "not valid JSON");
  expect_rejected(tmp, st_file("[1,2]", ""), "", "not a JSON object");
  expect_rejected(tmp, st_file("        ", ""), "", "not valid JSON");
}

TEST_CASE("safetensors: rejects an entry that is not an object, naming the tensor") {
  TempDir tmp;
  expect_rejected(tmp, st_file(R"({"w": 5})", ""), "w", "not an object");
  expect_rejected(tmp, st_file(R"({"w": [0, 8]})", ""), "w", "not an object");
}

TEST_CASE("safetensors: rejects entries missing dtype, shape or data_offsets, naming the tensor") {
  TempDir tmp;
  expect_rejected(tmp,
                  st_file(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", good_data().substr(0, 8)),
                  "w", "'dtype'");
  expect_rejected(
      tmp, st_file(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", good_data().substr(0, 8)), "w",
      "'shape'");
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"F32","shape":[2]}})", good_data().substr(0, 8)),
                  "w", "'data_offsets'");
}

TEST_CASE("safetensors: rejects unknown and unsupported dtypes, naming the tensor and the dtype") {
  TempDir tmp;
  const std::string d8 = good_data().substr(0, 8);
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", d8),
                  "w", "unknown dtype 'F33'");
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", d8),
                  "w", "I64 is not supported");
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", d8),
                  "w", "I32 is not supported");
  expect_rejected(tmp, st_file(R"({"w":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", d8), "w",
                  "dtype is not a string");
}

TEST_CASE(
    "safetensors: rejects shapes with negative, fractional or too many dimensions, naming the "
    "tensor") {
  TempDir tmp;
  const std::string d8 = good_data().substr(0, 8);
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", d8),
                  "w", "negative dimension");
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8),
                  "w", "not a list of integers");
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", d8),
                  "w", "shape is not a list");
  expect_rejected(
      tmp, st_file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})", d8),
      "w", "rank 9");
}

TEST_CASE(
    "safetensors: rejects data_offsets that are not [begin, end] with begin <= end, naming the "
    "tensor") {
  TempDir tmp;
  const std::string d8 = good_data().substr(0, 8);
  for (const char* offsets : {"[8]", "[0,8,8]", "[-8,0]", "[0,\"8\"]", "{\"begin\":0}", "8"}) {
    CAPTURE(offsets);
    expect_rejected(
        tmp,
        st_file(std::string(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)") + offsets + "}}",
                d8),
        "w", "is not [begin, end]");
  }
  expect_rejected(tmp, st_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8),
                  "w", "begin > end");
}

TEST_CASE("safetensors: rejects an end offset beyond the data section, naming the tensor") {
  TempDir tmp;
  expect_rejected(
      tmp, st_file(R"({"w":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})", good_data()),
      "w", "end beyond the data section");
  expect_rejected(
      tmp,
      st_file(
          R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551607,18446744073709551615]}})",
          good_data()),
      "w", "end beyond the data section");
}

TEST_CASE(
    "safetensors: rejects a byte length that does not match shape and dtype (even when numel "
    "overflows), naming the tensor") {
  TempDir tmp;
  expect_rejected(tmp,
                  st_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                          good_data().substr(0, 8)),
                  "w", "needs 12");
  expect_rejected(tmp,
                  st_file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})",
                          good_data().substr(0, 8)),
                  "w", "needs 16");
  // 2^32 * 2^32 * 16 elements: numel * 4 overflows 64 bits; nothing may be allocated.
  expect_rejected(
      tmp,
      st_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
              good_data().substr(0, 8)),
      "w", "more than 2^64");
}

TEST_CASE(
    "safetensors: rejects overlapping ranges, gaps and bytes after the last tensor, naming the "
    "tensors") {
  TempDir tmp;
  const std::string d = good_data();  // 16 bytes
  // b starts inside a.
  expect_rejected(tmp,
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          d.substr(0, 12)),
                  "b", "offsets overlap with tensor 'a'");
  // Two tensors on the same bytes.
  expect_rejected(tmp,
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                          d.substr(0, 8)),
                  "b", "offsets overlap");
  // 4 unused bytes between a and b.
  expect_rejected(tmp,
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                          d),
                  "b", "gap of 4 bytes");
  // The data section does not start at 0.
  expect_rejected(tmp, st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", d),
                  "a", "gap of 8 bytes");
  // 8 trailing bytes nobody owns.
  expect_rejected(tmp, st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d), "a",
                  "8 bytes after the last tensor");
  expect_rejected(tmp, st_file("{}", d), "", "16 bytes after the header");
}

TEST_CASE("safetensors: rejects duplicate tensor names, naming the tensor") {
  TempDir tmp;
  expect_rejected(tmp,
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                          good_data()),
                  "a", "duplicate tensor name");
}

TEST_CASE(
    "safetensors: rejects non-string metadata values and a non-object __metadata__, naming the "
    "key") {
  TempDir tmp;
  expect_rejected(tmp, st_file(R"({"__metadata__":{"step":12}})", ""), "",
                  "'step' is not a string");
  expect_rejected(tmp, st_file(R"({"__metadata__":["x"]})", ""), "",
                  "__metadata__ is not an object");
  // null metadata is what some writers emit for "none": accepted as empty.
  const std::string path = tmp.file("nullmeta.safetensors");
  write_bytes(path, st_file(R"({"__metadata__":null})", ""));
  CHECK(read_safetensors(path).metadata.empty());
}

// ---- writing ---------------------------------------------------------------------

TEST_CASE(
    "safetensors: the writer rejects duplicate, empty, reserved names and undefined tensors, "
    "creating no file") {
  TempDir tmp;
  const std::string path = tmp.file("w.safetensors");
  const Tensor t = Tensor::ones({2});
  CHECK(contains(error_of([&] {
                   write_safetensors(path, {{"x", t}, {"x", t}});
                 }),
                 "duplicate tensor name 'x'"));
  CHECK(contains(error_of([&] { write_safetensors(path, {{"", t}}); }), "empty name"));
  CHECK(contains(error_of([&] { write_safetensors(path, {{"__metadata__", t}}); }), "reserved"));
  CHECK(contains(error_of([&] {
                   write_safetensors(path, {{"u", Tensor()}});
                 }),
                 "'u' is undefined"));
  CHECK(contains(error_of([&] { write_safetensors(path, {{"bad\xff", t}}); }), path));
  CHECK_FALSE(fs::exists(path));
  CHECK(tmp_leftovers(tmp).empty());
}

TEST_CASE(
    "checkpoint: a successful save leaves no temporary file; a save into a missing directory "
    "throws and leaves the old file intact") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  TwoLinear a(3, 4, 2, test_seed());
  nn::save(a, path);
  nn::save(a, path);  // over an existing file
  CHECK(tmp_leftovers(tmp).empty());
  const std::string before = read_bytes(path);

  const std::string nowhere = tmp.file("no/such/dir/model.safetensors");
  const std::string msg = error_of([&] { nn::save(a, nowhere); });
  CHECK(contains(msg, nowhere));
  CHECK(read_bytes(path) == before);
  CHECK(tmp_leftovers(tmp).empty());
}

TEST_CASE(
    "checkpoint: a save that fails midway (file size limit hit) keeps the old file byte for byte "
    "and removes the temporary") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  TwoLinear small(2, 2, 2, test_seed());
  nn::save(small, path);
  const std::string before = read_bytes(path);
  TwoLinear big(64, 64, 64, test_seed(1));  // ~33 KB of data

  // RLIMIT_FSIZE makes write() fail with EFBIG past 4 KB (SIGXFSZ ignored), a
  // real failure in the middle of the data section.
  struct rlimit old_limit;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 4096;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) {
    signal(SIGXFSZ, old_handler);
    MESSAGE("skipped: setrlimit(RLIMIT_FSIZE) refused, midway failure not simulated");
    return;
  }
  std::string msg;  // nothing else may run (or throw past the restore) while the limit is on
  try {
    nn::save(big, path);
  } catch (const Error& e) {
    msg = e.what();
  } catch (...) {
    msg = "an exception that is not a qkv::Error";
  }
  const int restored = setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  REQUIRE(restored == 0);

  INFO("message: " << msg);
  CHECK(contains(msg, path));
  CHECK(contains(msg, "write"));
  CHECK(read_bytes(path) == before);
  CHECK(tmp_leftovers(tmp).empty());
  TwoLinear check(2, 2, 2, test_seed(2));
  nn::load(check, path);  // still a valid checkpoint of `small`
  CHECK(check.linear1->weight.data().to_vector() == small.linear1->weight.data().to_vector());
}

// ---- strict module loading ----------------------------------------------------------

TEST_CASE("checkpoint: load names a missing tensor and the file, and changes no parameter") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  TwoLinear a(3, 4, 2, test_seed()), b(3, 4, 2, test_seed(1));
  NamedTensors sd = nn::state_dict(a);
  sd.pop_back();  // drop linear2.bias
  write_safetensors(path, sd);
  const auto before = b.linear1->weight.data().to_vector();
  const std::string msg = error_of([&] { nn::load(b, path); });
  CHECK(msg == "load: " + path + ": missing tensor 'linear2.bias'");
  CHECK(b.linear1->weight.data().to_vector() == before);
}

TEST_CASE("checkpoint: load names an unexpected extra tensor, and changes no parameter") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  TwoLinear a(3, 4, 2, test_seed()), b(3, 4, 2, test_seed(1));
  NamedTensors sd = nn::state_dict(a);
  sd.emplace_back("foo", Tensor::ones({1}));
  write_safetensors(path, sd);
  const auto before = b.linear2->bias.data().to_vector();
  CHECK(error_of([&] { nn::load(b, path); }) == "load: " + path + ": unexpected tensor 'foo'");
  CHECK(b.linear2->bias.data().to_vector() == before);
}

TEST_CASE(
    "checkpoint: a shape mismatch in a later parameter is reported with both shapes before any "
    "parameter is modified") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  TwoLinear a(3, 4, 2, test_seed()), b(3, 4, 2, test_seed(1));
  NamedTensors sd = nn::state_dict(a);
  sd[2].second = Tensor::zeros({4, 2});  // linear2.weight is (2,4) in the model
  write_safetensors(path, sd);
  const auto before = b.linear1->weight.data().to_vector();
  CHECK(error_of([&] { nn::load(b, path); }) ==
        "load: " + path + ": tensor 'linear2.weight' has shape (4,2) but the model expects (2,4)");
  CHECK(b.linear1->weight.data().to_vector() == before);  // linear1 comes first: untouched
}

TEST_CASE(
    "checkpoint: load_state_dict with a prefix takes prefix+name, ignores other tensors, and is "
    "strict within the prefix") {
  TempDir tmp;
  const std::string path = tmp.file("both.safetensors");
  TwoLinear a(3, 4, 2, test_seed()), b(3, 4, 2, test_seed(1));
  NamedTensors sd;
  for (const auto& [name, t] : nn::state_dict(a)) sd.emplace_back("model." + name, t);
  sd.emplace_back("optim.step", Tensor::scalar(3));
  sd.emplace_back("linear1.weight", Tensor::zeros({4, 3}));  // outside the prefix: ignored
  write_safetensors(path, sd);
  const TensorFile f = read_safetensors(path);
  nn::load_state_dict(b, f, "model.");
  CHECK(b.linear1->weight.data().to_vector() == a.linear1->weight.data().to_vector());
  CHECK(b.linear2->bias.data().to_vector() == a.linear2->bias.data().to_vector());

  // Without the prefix the same file is wrong: its names do not match.
  TwoLinear c(3, 4, 2, test_seed(2));
  CHECK(
      contains(error_of([&] { nn::load_state_dict(c, f); }),
               "missing 3 tensors: 'linear1.bias', 'linear2.weight', 'linear2.bias'; unexpected"));

  sd.emplace_back("model.extra", Tensor::ones({1}));
  write_safetensors(path, sd);
  CHECK(error_of([&] { nn::load_state_dict(c, read_safetensors(path), "model."); }) ==
        "load: " + path + ": unexpected tensor 'model.extra'");
}

// ---- fixture helpers -------------------------------------------------------------

TEST_CASE(
    "fixture: load_params loads <prefix>param.<name> tensors from a PyTorch fixture and names a "
    "missing one") {
  const TensorFile f = load_fixture("layers.safetensors");
  TwoLinear ffn(8, 16, 8, test_seed());  // the ffn_relu case: linear1 (16,8), linear2 (8,16)
  load_params(ffn, f, "ffn_relu.");
  CHECK(ffn.linear1->weight.data().at({0, 0}) == static_cast<real>(-0.093836375f));
  CHECK(ffn.linear1->weight.data().to_vector() ==
        f.get("ffn_relu.param.linear1.weight").to_vector());
  CHECK(ffn.linear2->bias.data().to_vector() == f.get("ffn_relu.param.linear2.bias").to_vector());

  TwoLinear wrong(8, 16, 8, test_seed());
  const auto before = wrong.linear1->weight.data().to_vector();
  const std::string msg = error_of([&] { load_params(wrong, f, "ffn_gelu_nope."); });
  CHECK(contains(msg, "missing tensor 'ffn_gelu_nope.param.linear1.weight'"));
  CHECK(contains(msg, "layers.safetensors"));
  CHECK(wrong.linear1->weight.data().to_vector() == before);
}

// ---- Python reads ours -------------------------------------------------------------

TEST_CASE(
    "checkpoint: a stdlib-only Python reader (check_qkv_checkpoint.py) reads a file qkv wrote") {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) {
    MESSAGE("skipped: /usr/bin/python3 not found");
    return;
  }
  TempDir tmp;
  const std::string path = tmp.file("py.safetensors");
  TwoLinear m(3, 4, 2, test_seed());
  // Exactly representable values: fc1.weight = k/4 - 1 for k = 0..11, sum 4.5.
  std::vector<real> w(12);
  for (int k = 0; k < 12; ++k) w[k] = real(k) / 4 - 1;
  m.linear1->weight.data().copy_(Tensor::from_vector(w, {4, 3}));
  nn::save(m, path, {{"epoch", "7"}});

  // Run without a shell (io/run_program.h): the temporary folder's name is an argument.
  const ProgramRun r =
      run_program({python, repo_root() + "/tests/pytorch/check_qkv_checkpoint.py", path});
  const std::string out = r.out + r.err;
  INFO("output: " << out);
  CHECK(r.status == 0);
  CHECK(contains(out, "linear1.weight F32 (4, 3) first=-1.0 sum=4.5"));
  CHECK(contains(out, "linear2.bias F32 (2,)"));
  CHECK(contains(out, "metadata epoch=7"));
  CHECK(contains(out, "ok: 4 tensors"));
}

TEST_CASE(
    "a file written before the output layer's rename (generator -> lm_head) loads, as a model file "
    "and as a training checkpoint's prefix") {
  TempDir dir;
  nn::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 9;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 16;
  c.seed = test_seed();
  for (const bool tied : {false, true}) {
    c.tie_weights = tied;
    nn::Seq2SeqTransformer model(c);
    // Today's names, and the names of files written before the rename.
    NamedTensors old_names;
    for (auto& [name, t] : nn::state_dict(model)) {
      std::string n = name;
      if (n.rfind("lm_head.", 0) == 0) n = "generator." + n.substr(8);
      old_names.emplace_back("model." + n, t);
    }
    CHECK(std::any_of(old_names.begin(), old_names.end(),
                      [](auto& nt) { return nt.first == "model.generator.bias"; }));
    const std::string path = dir.file("old_names.safetensors");
    Metadata md = nn::model_metadata(model, "model.");
    write_safetensors(path, old_names, md);
    auto back = nn::load_seq2seq(path);
    auto a = nn::state_dict(model), b = nn::state_dict(*back);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(a[i].first == b[i].first);
      CHECK(max_abs_diff(a[i].second, b[i].second) == 0);
    }
  }
}
