// Hostile files for the safetensors reader, and non-finite checkpoints.
//
// tests/test_checkpoint.cpp covers the well-formed round trips and one
// rejection per header field. This file covers what an attacker or a broken
// disk would hand the reader: things that are not regular files, files whose
// size changes under the reader, headers claiming shapes whose sizes overflow
// (which must fail before anything is allocated: under ASan an attempt would
// abort the binary), absurd nesting, and the in-memory parser the fuzzer
// drives (fuzz/). Then the NaN/Inf policy of nn::load and nn::save, and the
// rules reader and writer share: whatever one refuses the other refuses, and
// whatever the reader accepts writes back unchanged.
#include <doctest/doctest.h>

#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "checkpoint/checkpoint.h"
#include "nn/linear.h"

using namespace qkv;
namespace fs = std::filesystem;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_seed;

namespace {

using testing::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string st_file(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}
// A header with one F32 tensor "w" of `shape` (JSON text) at data_offsets [0, end).
std::string one_tensor(const std::string& shape, uint64_t end, const std::string& dtype = "F32") {
  return R"({"w":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":[0,)" +
         std::to_string(end) + "]}}";
}

// Parses `bytes` in memory and expects a refusal naming the buffer, tensor "w"
// (when `names_w`) and `fragment`; also checks that the bytes used by tensors
// did not grow (nothing was allocated for a refused header).
void expect_refused(const std::string& bytes, const std::string& fragment, bool names_w = true) {
  const int64_t before = allocator_stats().bytes_in_use;
  const std::string msg =
      error_of([&] { parse_safetensors(bytes.data(), bytes.size(), "hostile.st"); });
  INFO("message: " << msg);
  CHECK(has(msg, "parse_safetensors: hostile.st: "));
  if (names_w) CHECK(has(msg, "tensor 'w'"));
  CHECK(has(msg, fragment));
  CHECK(allocator_stats().bytes_in_use == before);
}

struct TwoLinear : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  explicit TwoLinear(uint64_t seed) {
    Generator g(seed);
    a = register_module("a", std::make_shared<nn::Linear>(3, 4, true, g));
    b = register_module("b", std::make_shared<nn::Linear>(4, 2, true, g));
  }
};

std::vector<std::vector<real>> values_of(const nn::Module& m) {
  std::vector<std::vector<real>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.data().to_vector());
  return out;
}

}  // namespace

// ---- what is not a regular file --------------------------------------------------

TEST_CASE("hostile: a FIFO is refused at once (no blocking open, no read) naming the file") {
  TempDir tmp;
  const std::string fifo = tmp.file("pipe.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // No writer ever opens it: a blocking open or read would hang this test.
  const std::string msg = error_of([&] { read_safetensors(fifo); });
  CHECK(has(msg, "read_safetensors: " + fifo + ": "));
  CHECK(has(msg, "FIFO"));
  CHECK(has(msg, "not a regular file"));
}

TEST_CASE(
    "hostile: /dev/zero (endless) and /dev/null are refused as character devices naming the file") {
  for (const char* dev : {"/dev/zero", "/dev/null"}) {
    CAPTURE(dev);
    const std::string msg = error_of([&] { read_safetensors(dev); });
    CHECK(has(msg, std::string(dev) + ": is a character device, not a regular file"));
  }
}

TEST_CASE("hostile: a directory and a Unix socket are refused naming the file") {
  TempDir tmp;
  CHECK(has(error_of([&] { read_safetensors(tmp.dir.string()); }),
            tmp.dir.string() + ": is a directory, not a regular file"));
  const std::string sock_path = tmp.file("s.sock");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock_path.size() < sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  // open() of a socket fails (ENXIO): still an Error naming the file.
  const std::string msg = error_of([&] { read_safetensors(sock_path); });
  ::close(s);
  CHECK(has(msg, "read_safetensors: " + sock_path + ": "));
}

TEST_CASE(
    "hostile: a symlink to a valid file reads (control: the regular-file test follows links)") {
  TempDir tmp;
  const std::string real_file = tmp.file("real.safetensors");
  write_safetensors(real_file, {{"x", Tensor::from_vector({1, 2, 3})}});
  fs::create_symlink(real_file, tmp.file("link.safetensors"));
  CHECK(read_safetensors(tmp.file("link.safetensors")).get("x").to_vector() ==
        std::vector<real>{1, 2, 3});
}

// ---- files whose size is not what stat says -----------------------------------------
// Kernel pseudo-files are regular files whose size means nothing: the reader
// sees exactly what it sees when a writer appends to or truncates a file while
// it reads, but deterministically.

TEST_CASE(
    "hostile: a file longer than its stat size (it grew while being read) is refused naming the "
    "file") {
  const std::string path = "/proc/self/status";  // stat size 0, content hundreds of bytes
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  REQUIRE(S_ISREG(st.st_mode));
  REQUIRE(st.st_size == 0);
  const std::string msg = error_of([&] { read_safetensors(path); });
  CHECK(has(msg, "read_safetensors: " + path + ": grew while being read"));
  CHECK(has(msg, "its size was 0 bytes"));
}

TEST_CASE(
    "hostile: a file shorter than its stat size (it shrank while being read) is refused naming the "
    "file") {
  // sysfs attributes report 4096 bytes and hold a few.
  const std::string path = "/sys/devices/system/cpu/online";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || st.st_size <= static_cast<off_t>(read_bytes(path).size())) {
    MESSAGE("no sysfs attribute shorter than its stat size here; case not run");
    return;
  }
  const std::string msg = error_of([&] { read_safetensors(path); });
  CHECK(has(msg, "read_safetensors: " + path + ": shrank while being read"));
  CHECK(has(msg, "its size was " + std::to_string(st.st_size) + " bytes"));
}

// ---- headers that claim more than the file holds -------------------------------------

TEST_CASE(
    "hostile: numel fits in 64 bits but numel * dtype size does not: refused before allocating") {
  // 2^31 * 2^31 = 2^62 elements; times 4 bytes = 2^64.
  expect_refused(st_file(one_tensor("[2147483648,2147483648]", 8), std::string(8, '\0')),
                 "more than 2^64");
  // 2^62 * 8 bytes (F64) and 2^63 * 2 bytes (F16) overflow the same way.
  expect_refused(st_file(one_tensor("[4611686018427387904]", 8, "F64"), std::string(8, '\0')),
                 "more than 2^64");
  expect_refused(st_file(one_tensor("[2,4611686018427387904]", 8, "BF16"), std::string(8, '\0')),
                 "more than 2^64");
}

TEST_CASE(
    "hostile: a product of dims that overflows 64 bits on its own is refused, however it is "
    "split") {
  // 2^16 ^ 4 = 2^64 elements: the overflow happens in the last multiplication.
  expect_refused(st_file(one_tensor("[65536,65536,65536,65536]", 8), std::string(8, '\0')),
                 "more than 2^64");
  // A product that wraps exactly to a small value must not pass as that value:
  // 2^63 * 2 = 2^64 wraps to 0 elements, which would match data_offsets [0,0].
  expect_refused(st_file(one_tensor("[9223372036854775807,2]", 0)), "more than 2^64");
  expect_refused(st_file(one_tensor("[4294967296,4294967296]", 0)), "more than 2^64");
}

TEST_CASE(
    "hostile: sizes that fit in 64 bits but exceed the data section are refused with the byte "
    "count") {
  // 3 * 2^61 elements * 2 bytes = 3 * 2^62 bytes: no overflow in uint64, far beyond the file.
  expect_refused(st_file(one_tensor("[3,2305843009213693952]", 8, "F16"), std::string(8, '\0')),
                 "needs 13835058055282163712");
}

TEST_CASE(
    "hostile: a zero-size dim does not let overflowing dims through (0 elements, strides "
    "overflow)") {
  // 0 * 2^96 = 0 bytes matches data_offsets [0,0], but no tensor can have this shape.
  expect_refused(st_file(one_tensor("[0,4294967296,4294967296,4294967296]", 0)),
                 "too large for a tensor");
  // Control: a zero-size tensor with ordinary dims reads.
  const std::string ok = st_file(one_tensor("[0,1000000,1000]", 0));
  CHECK(parse_safetensors(ok.data(), ok.size(), "ok").get("w").shape() == Shape{0, 1000000, 1000});
}

TEST_CASE("hostile: a dimension past int64 is refused naming the tensor") {
  expect_refused(st_file(one_tensor("[9223372036854775808]", 8), std::string(8, '\0')),
                 "dimension too large");
  expect_refused(st_file(one_tensor("[1e30]", 8), std::string(8, '\0')), "not a list of integers");
}

TEST_CASE("hostile: headers nested deeper than 8 levels are refused while parsing") {
  // A million nested lists as a shape: the reader before this check parsed it
  // and then overflowed the stack quoting the shape in its error (the json
  // library prints recursively). Now parsing stops at depth 8.
  const int n = 1000000;
  const std::string deep = R"({"w":{"dtype":"F32","shape":)" + std::string(n, '[') +
                           std::string(n, ']') + R"(,"data_offsets":[0,0]}})";
  expect_refused(st_file(deep), "deeper than 8 levels", /*names_w=*/false);
  const std::string deep_meta =
      "{\"__metadata__\":{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{}}}}}}}}}";
  expect_refused(st_file(deep_meta), "deeper than 8", false);
  // Legal depth: a header of 3 levels reads.
  const std::string ok = st_file(one_tensor("[2]", 8), std::string(8, '\0'));
  CHECK(parse_safetensors(ok.data(), ok.size(), "ok").tensors.size() == 1);
}

TEST_CASE("hostile: a huge JSON value is quoted clipped in the message, not whole") {
  std::string shape = "[";
  for (int i = 0; i < 20000; ++i) shape += "1,";
  shape += "\"x\"]";
  const std::string bytes = st_file(one_tensor(shape, 8), std::string(8, '\0'));
  const std::string msg =
      error_of([&] { parse_safetensors(bytes.data(), bytes.size(), "hostile.st"); });
  CHECK(has(msg, "tensor 'w'"));
  CHECK(has(msg, "..."));
  CHECK(msg.size() < 400);
}

TEST_CASE(
    "hostile: parse_safetensors reads from memory exactly as read_safetensors reads the same "
    "bytes") {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  write_safetensors(path,
                    {{"b", Tensor::from_vector({1, 2, 3, 4}, {2, 2})}, {"a", Tensor::scalar(5)}},
                    {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  const TensorFile mem = parse_safetensors(bytes.data(), bytes.size(), "in-memory");
  const TensorFile file = read_safetensors(path);
  CHECK(mem.path == "in-memory");
  CHECK(mem.metadata == file.metadata);
  REQUIRE(mem.tensors.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(mem.tensors[i].first == file.tensors[i].first);
    CHECK(mem.tensors[i].second.shape() == file.tensors[i].second.shape());
    CHECK(mem.tensors[i].second.to_vector() == file.tensors[i].second.to_vector());
  }
  // Every prefix of a valid file is refused, from memory as from a file (no
  // out-of-bounds read under ASan, whatever the cut).
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(parse_safetensors(bytes.data(), n, "cut"), Error);
  }
  write_bytes(path, bytes.substr(0, bytes.size() - 1));
  CHECK(has(error_of([&] { read_safetensors(path); }), "read_safetensors: " + path + ": "));
}

// ---- non-finite values -------------------------------------------------------------

TEST_CASE(
    "nonfinite: find_nonfinite reports the first bad tensor, its first bad element and the count") {
  const real nan = std::numeric_limits<real>::quiet_NaN();
  const real inf = std::numeric_limits<real>::infinity();
  NamedTensors ts{{"ok", Tensor::ones({3})},
                  {"bad", Tensor::from_vector({1, 2, -inf, 4, nan, 6}, {2, 3})},
                  {"worse", Tensor::from_vector({nan})}};
  const auto nf = find_nonfinite(ts);
  REQUIRE(nf.has_value());
  CHECK(nf->tensor == "bad");
  CHECK(nf->index == 2);
  CHECK(nf->value == -std::numeric_limits<double>::infinity());
  CHECK(nf->count == 2);
  const std::string msg = error_of([&] { check_finite(ts, "here"); });
  CHECK(msg ==
        "here: tensor 'bad' holds -inf at index (0,2) of shape (2,3) (2 non-finite values in it)");
  CHECK_FALSE(find_nonfinite({{"ok", Tensor::ones({3})}, {"undef", Tensor()}}).has_value());
  CHECK_NOTHROW(check_finite(NamedTensors{{"ok", Tensor::zeros({2, 2})}}, "here"));
  // The scan covers the last element too.
  Tensor last = Tensor::zeros({1000});
  last.data()[999] = nan;
  CHECK(has(error_of([&] { check_finite({{"l", last}}, "x"); }), "holds nan at index (999)"));
}

TEST_CASE(
    "nonfinite: nn::load refuses NaN or Inf naming the file and the tensor, and changes no "
    "parameter") {
  TempDir tmp;
  TwoLinear src(test_seed()), dst(test_seed(1));
  const auto before = values_of(dst);
  const std::string path = tmp.file("nan.safetensors");
  for (real bad : {std::numeric_limits<real>::quiet_NaN(), std::numeric_limits<real>::infinity()}) {
    CAPTURE(bad);
    NamedTensors sd = nn::state_dict(src);
    Tensor w = sd[2].second.clone();  // b.weight, (2,4): corrupt element (1,1)
    w.data()[5] = bad;
    sd[2].second = w;
    write_safetensors(path, sd);  // the generic writer writes what it is given
    const std::string msg = error_of([&] { nn::load(dst, path); });
    CHECK(has(msg, "load: " + path + ": tensor '" + sd[2].first + "' holds "));
    CHECK(has(msg, "at index (1,1) of shape (2,4)"));
    CHECK(values_of(dst) == before);  // all or nothing
    // The generic reader reads it as it is: read_safetensors is not a policy.
    const TensorFile f = read_safetensors(path);
    CHECK_FALSE(std::isfinite(f.get(sd[2].first).data()[5]));
    CHECK(has(error_of([&] { check_finite(f); }), "check_finite: " + path + ": tensor 'b.weight'"));
    CHECK(has(error_of([&] { nn::load_state_dict(dst, f); }), "tensor 'b.weight' holds"));
  }
}

TEST_CASE("nonfinite: LoadOptions::allow_nonfinite loads a NaN checkpoint for inspection") {
  TempDir tmp;
  TwoLinear src(test_seed()), dst(test_seed(1));
  NamedTensors sd = nn::state_dict(src);
  Tensor w = sd[0].second.clone();
  w.data()[0] = std::numeric_limits<real>::quiet_NaN();
  sd[0].second = w;
  const std::string path = tmp.file("nan.safetensors");
  write_safetensors(path, sd);
  nn::LoadOptions inspect;
  inspect.allow_nonfinite = true;
  nn::load(dst, path, inspect);
  CHECK(std::isnan(dst.a->weight.data().data()[0]));
  CHECK(dst.b->weight.data().to_vector() == src.b->weight.data().to_vector());
}

TEST_CASE(
    "nonfinite: a prefixed load checks only the tensors it takes; check_finite(file) checks all") {
  TempDir tmp;
  TwoLinear src(test_seed()), dst(test_seed(1));
  NamedTensors all;
  for (auto& [n, t] : nn::state_dict(src)) all.emplace_back("model." + n, t);
  all.emplace_back("optim.exp_avg.0",
                   Tensor::from_vector({0, std::numeric_limits<real>::infinity()}));
  const std::string path = tmp.file("train.safetensors");
  write_safetensors(path, all);
  const TensorFile f = read_safetensors(path);
  nn::load_state_dict(dst, f, "model.");  // the model part is finite
  CHECK(dst.a->weight.data().to_vector() == src.a->weight.data().to_vector());
  // The optimizer's part is the caller's to check (a trainer resuming from it).
  CHECK(has(
      error_of([&] { check_finite(f); }),
      "check_finite: " + path + ": tensor 'optim.exp_avg.0' holds inf at index (1) of shape (2)"));
}

TEST_CASE(
    "nonfinite: nn::save refuses a NaN parameter naming the path and the tensor, writing nothing") {
  TempDir tmp;
  TwoLinear m(test_seed());
  const std::string path = tmp.file("m.safetensors");
  nn::save(m, path);
  const std::string good = read_bytes(path);
  m.b->bias.data().data()[1] = std::numeric_limits<real>::quiet_NaN();
  const std::string msg = error_of([&] { nn::save(m, path); });
  CHECK(msg ==
        "save: " + path +
            ": tensor 'b.bias' holds nan at index (1) of shape (2) (1 non-finite value in it)");
  CHECK(read_bytes(path) == good);  // the good checkpoint is still there, byte for byte
  const std::string fresh = tmp.file("fresh.safetensors");
  CHECK_THROWS_AS(nn::save(m, fresh), Error);
  CHECK_FALSE(fs::exists(fresh));
  // With the opt-in it is written (and reads back as NaN).
  nn::SaveOptions post_mortem;
  post_mortem.allow_nonfinite = true;
  nn::save(m, fresh, {}, post_mortem);
  CHECK(std::isnan(read_safetensors(fresh).get("b.bias").data()[1]));
}

// ---- reader and writer agree on every rule --------------------------------------------

namespace {

// A header laying out tensors back to back: each entry is (name as a JSON
// string literal, dtype, shape as JSON, element size), with `metadata` (JSON
// text, or "" for none) last. The data section is filled with random bytes.
struct RawTensor {
  std::string json_name, dtype, shape;
  int64_t numel;
  int esize;
};
std::string layout(const std::vector<RawTensor>& ts, const std::string& metadata, Generator& g) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const RawTensor& t : ts) {
    const uint64_t n = static_cast<uint64_t>(t.numel * t.esize);
    if (header.size() > 1) header += ",";
    header += t.json_name + R"(:{"dtype":")" + t.dtype + R"(","shape":)" + t.shape +
              R"(,"data_offsets":[)" + std::to_string(offset) + "," + std::to_string(offset + n) +
              "]}";
    offset += n;
  }
  if (!metadata.empty())
    header += std::string(header.size() > 1 ? "," : "") + R"("__metadata__":)" + metadata;
  header += "}";
  std::string data(offset, '\0');
  for (char& c : data) c = static_cast<char>(g.randint(0, 256));
  return st_file(header, data);
}

// Same bits, or both NaN.
bool same_value(real a, real b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

}  // namespace

TEST_CASE(
    "hostile: a tensor named \"\" is refused by the reader with the writer's words (the fuzzer's "
    "round-trip finding)") {
  TempDir tmp;
  const std::string bytes =
      st_file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  const std::string read =
      error_of([&] { parse_safetensors(bytes.data(), bytes.size(), "hostile.st"); });
  CHECK(read == "parse_safetensors: hostile.st: a tensor has an empty name");
  const std::string path = tmp.file("w.safetensors");
  CHECK(error_of([&] {
          write_safetensors(path, {{"", Tensor::ones({1})}});
        }) == "write_safetensors: " + path + ": a tensor has an empty name");
  // Also beside well-named tensors, wherever it sorts.
  const std::string two = st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  std::string(8, '\0'));
  CHECK(has(error_of([&] { parse_safetensors(two.data(), two.size(), "hostile.st"); }),
            "a tensor has an empty name"));
}

TEST_CASE("hostile: whatever the writer refuses to write, the reader refuses to read") {
  TempDir tmp;
  const std::string path = tmp.file("w.safetensors");
  const Tensor t = Tensor::ones({1});
  const std::string four(4, '\0');
  auto entry = [](const std::string& json_name, uint64_t begin) {
    return json_name + R"(:{"dtype":"F32","shape":[1],"data_offsets":[)" + std::to_string(begin) +
           "," + std::to_string(begin + 4) + "]}";
  };
  struct Rule {
    const char* what;
    std::function<void()> write;  // must throw, creating no file
    std::string file;             // the same content as bytes: must be refused
    const char* refusal;
  };
  const std::vector<Rule> rules = {
      {"an empty name",
       [&] {
         write_safetensors(path, {{"", t}});
       },
       st_file("{" + entry(R"("")", 0) + "}", four), "a tensor has an empty name"},
      {"a duplicate name",
       [&] {
         write_safetensors(path, {{"x", t}, {"x", t}});
       },
       st_file("{" + entry(R"("x")", 0) + "," + entry(R"("x")", 4) + "}", four + four),
       "duplicate tensor name"},
      {"a name that is not UTF-8",
       [&] {
         write_safetensors(path, {{"bad\xff", t}});
       },
       st_file("{" + entry("\"bad\xff\"", 0) + "}", four), "not valid JSON"},
      {"a name holding a lone UTF-16 surrogate",
       [&] {
         write_safetensors(path, {{"s\xed\xa0\x80", t}});
       },
       st_file("{" + entry(R"("s\ud800")", 0) + "}", four), "not valid JSON"},
      {"metadata that is not UTF-8",
       [&] {
         write_safetensors(path, {{"x", t}}, {{"k", "v\xfe"}});
       },
       st_file("{" + entry(R"("x")", 0) + ",\"__metadata__\":{\"k\":\"v\xfe\"}}", four),
       "not valid JSON"},
      {"a tensor named __metadata__",
       [&] {
         write_safetensors(path, {{"__metadata__", t}});
       },
       st_file("{" + entry(R"("__metadata__")", 0) + "}", four),
       "__metadata__ value for 'data_offsets' is not a string"},
  };
  for (const Rule& r : rules) {
    CAPTURE(r.what);
    CHECK(error_of(r.write) != "<no throw>");
    CHECK_FALSE(fs::exists(path));
    const std::string msg =
        error_of([&] { parse_safetensors(r.file.data(), r.file.size(), "hostile.st"); });
    CHECK(has(msg, "parse_safetensors: hostile.st: "));
    CHECK(has(msg, r.refusal));
  }
}

TEST_CASE("hostile: the writer refuses a header over the reader's 100 MB limit, creating no file") {
  TempDir tmp;
  const std::string path = tmp.file("big.safetensors");
  // One metadata value alone makes the header kMaxSafetensorsHeaderBytes + ~40 bytes.
  const Metadata md{{"notes", std::string(kMaxSafetensorsHeaderBytes, 'n')}};
  const std::string msg = error_of([&] {
    write_safetensors(path, {{"x", Tensor::ones({1})}}, md);
  });
  CHECK(has(msg, "write_safetensors: " + path + ": the header would be "));
  CHECK(has(msg, "over the limit of 100000000"));
  CHECK(msg.size() < 400);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE(
    "hostile: files the reader accepts at the edges of the rules write back and read back "
    "unchanged") {
  TempDir tmp;
  Generator g = testing::test_generator();
  const std::vector<std::pair<std::vector<RawTensor>, std::string>> files = {
      // Names: NUL and other control characters, quotes, backslashes, non-ASCII
      // (raw and as escapes, a surrogate pair), a lone "." and a very long one.
      {{{R"("a\u0000b")", "F32", "[2]", 2, 4},
        {R"("line\nbreak\t\"q\"\\")", "F64", "[1,2]", 2, 8},
        {"\"gr\xc3\xb6\xc3\x9f"
         "e\"",
         "F16", "[3]", 3, 2},
        {R"("\u00e9\ud83d\ude00")", "BF16", "[2,1]", 2, 2},
        {R"(".")", "F32", "[]", 1, 4},
        {"\"" + std::string(5000, 'n') + "\"", "F32", "[1]", 1, 4}},
       R"({"":"empty key","k":"","__metadata__":"a key like the reserved name","\u0001":"\u0002\n"})"},
      // Shapes: zero-size dims, rank 0, the largest rank.
      {{{R"("zero")", "F32", "[0,3]", 0, 4},
        {R"("zero_rank8")", "F16", "[1,1,1,1,1,1,1,0]", 0, 2},
        {R"("rank8")", "F64", "[1,2,1,2,1,1,1,2]", 8, 8},
        {R"("scalar")", "BF16", "[]", 1, 2}},
       "null"},
      // No tensors at all; metadata only, and nothing.
      {{}, R"({"only":"metadata"})"},
      {{}, ""},
  };
  const std::string path = tmp.file("round.safetensors");
  for (size_t k = 0; k < files.size(); ++k) {
    CAPTURE(k);
    const std::string bytes = layout(files[k].first, files[k].second, g);
    const TensorFile f = parse_safetensors(bytes.data(), bytes.size(), "edge.st");
    REQUIRE(f.tensors.size() == files[k].first.size());
    for (FileDtype dtype : {FileDtype::F64, FileDtype::F32}) {
      write_safetensors(path, f.tensors, f.metadata, dtype);
      const TensorFile back = read_safetensors(path);
      CHECK(back.metadata == f.metadata);
      REQUIRE(back.tensors.size() == f.tensors.size());
      for (size_t i = 0; i < f.tensors.size(); ++i) {
        CAPTURE(brief(f.tensors[i].first));
        CHECK(back.tensors[i].first == f.tensors[i].first);
        const Tensor& a = f.tensors[i].second;
        const Tensor& b = back.tensors[i].second;
        REQUIRE(a.shape() == b.shape());
        if (dtype == FileDtype::F32 && !std::is_same<real, float>::value)
          continue;  // F64 values round in F32
        for (int64_t j = 0; j < a.numel(); ++j) CHECK(same_value(a.data()[j], b.data()[j]));
      }
    }
  }
  // The names as decoded: escapes resolved, NUL kept.
  const std::string bytes = layout(files[0].first, files[0].second, g);
  const TensorFile f = parse_safetensors(bytes.data(), bytes.size(), "edge.st");
  CHECK(f.has(std::string("a\0b", 3)));
  CHECK(f.has("line\nbreak\t\"q\"\\"));
  CHECK(f.has("\xc3\xa9\xf0\x9f\x98\x80"));
  CHECK(f.metadata.at("") == "empty key");
}

TEST_CASE(
    "hostile: a 1 MB tensor name, dtype or metadata key is quoted briefly, control characters "
    "escaped") {
  const std::string big(1 << 20, 'n');
  // A name that long with a dtype qkv does not read.
  const std::string named = st_file(
      "{\"" + big + R"(":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  std::string msg = error_of([&] { parse_safetensors(named.data(), named.size(), "hostile.st"); });
  CHECK(has(msg, "tensor 'nnnn"));
  CHECK(has(msg, "... (1048576 bytes)': dtype I32 is not supported"));
  CHECK(msg.size() < 400);
  // A dtype that long.
  const std::string typed = st_file(
      R"({"w":{"dtype":")" + big + R"(","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  msg = error_of([&] { parse_safetensors(typed.data(), typed.size(), "hostile.st"); });
  CHECK(has(msg, "tensor 'w': unknown dtype 'nnn"));
  CHECK(msg.size() < 400);
  // A metadata key that long, with a value that is not a string.
  const std::string keyed = st_file("{\"__metadata__\":{\"" + big + "\":1}}");
  msg = error_of([&] { parse_safetensors(keyed.data(), keyed.size(), "hostile.st"); });
  CHECK(has(msg, "__metadata__ value for 'nnn"));
  CHECK(msg.size() < 400);
  // Control characters in a name show escaped.
  const std::string ctrl =
      st_file(R"({"a\nb\u001b[2J":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
              std::string(4, '\0'));
  msg = error_of([&] { parse_safetensors(ctrl.data(), ctrl.size(), "hostile.st"); });
  CHECK(has(msg, "tensor 'a\\x0ab\\x1b[2J': dtype I32"));
  CHECK(msg.find('\n') == std::string::npos);
  // And a name quoted by nn::load_state_dict and check_finite.
  const std::string nan_name = std::string(3000, 'q') + "\n";
  CHECK(error_of([&] {
          check_finite({{nan_name, Tensor::from_vector({std::numeric_limits<real>::quiet_NaN()})}},
                       "here");
        }).size() < 400);
}
