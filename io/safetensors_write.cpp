// Writing safetensors files (io/safetensors.h): validate and lay out
// everything first, then write atomically (io/output_file.h: a temporary
// file, fsynced and renamed over the path, then the directory fsynced), so a
// crash mid-save leaves the previous file.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/output_file.h"
#include "io/safetensors.h"
#include "io/safetensors_rules.h"

namespace qkv {

namespace {

using namespace safetensors_detail;

// ---- writing ------------------------------------------------------------------
class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& msg) const {
    throw Error("write_safetensors: " + brief(path_) + ": " + msg);
  }

  // Validate and lay out everything before any file is created, then write
  // the file atomically (io/output_file.h: a symlink is written through; a
  // device, FIFO or socket is refused).
  void write(const NamedTensors& tensors, const Metadata& metadata, FileDtype dtype) {
    const std::vector<size_t> order = sorted_by_name(tensors);
    const int esize = dtype == FileDtype::F32 ? 4 : 8;
    const std::string header = header_text(tensors, order, metadata, esize);
    const std::string label = "write_safetensors: " + path_;
    write_file_atomically(path_, label, [&](int fd, const std::string& tmp) {
      unsigned char len[8];
      store_le(len, header.size(), 8);
      write_all_bytes(fd, len, 8, label, tmp);
      write_all_bytes(fd, header.data(), header.size(), label, tmp);
      for (size_t i : order) write_data(fd, tensors[i].second, esize, tmp);
    });
  }

 private:
  // The tensors' indices sorted by name; checks the names (non-empty, not
  // reserved, unique) and that every tensor is defined.
  std::vector<size_t> sorted_by_name(const NamedTensors& tensors) const {
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors[a].first < tensors[b].first; });
    for (size_t k = 0; k < order.size(); ++k) {
      const auto& [name, t] = tensors[order[k]];
      if (const char* why = bad_tensor_name(name)) fail(why);
      if (k > 0 && tensors[order[k - 1]].first == name)
        fail("duplicate tensor name '" + brief(name) + "'");
      if (!t.defined()) fail("tensor '" + brief(name) + "' is undefined");
    }
    return order;
  }

  // The JSON header, padded with spaces to a multiple of 8 bytes.
  // ordered_json keeps insertion order: tensors sorted by name, each entry as
  // dtype, shape, data_offsets, then __metadata__ (as tests/pytorch/st.py).
  std::string header_text(const NamedTensors& tensors, const std::vector<size_t>& order,
                          const Metadata& metadata, int esize) const {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    uint64_t offset = 0;
    for (size_t i : order) {
      const auto& [name, t] = tensors[i];
      const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * esize;
      header[name] = {{"dtype", esize == 4 ? "F32" : "F64"},
                      {"shape", t.shape()},
                      {"data_offsets", {offset, offset + nbytes}}};
      offset += nbytes;
    }
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::string text;
    try {
      text = header.dump(-1, ' ', /*ensure_ascii=*/true);
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("cannot encode the header (tensor names and metadata must be UTF-8): ") +
           brief(e.what()));
    }
    text.append((8 - text.size() % 8) % 8, ' ');  // pad to a multiple of 8 bytes
    // The reader's limit (a huge metadata value or very many tensors would
    // otherwise make a file no reader opens).
    if (text.size() > kMaxSafetensorsHeaderBytes)
      fail("the header would be " + std::to_string(text.size()) + " bytes, over the limit of " +
           std::to_string(kMaxSafetensorsHeaderBytes) +
           " that readers accept (metadata too large?)");
    return text;
  }

  // One tensor's numbers as little-endian F32 or F64 (esize 4 or 8 bytes),
  // converted in chunks of kChunk elements.
  void write_data(int fd, const Tensor& t, int esize, const std::string& file) {
    constexpr int64_t kChunk = 1 << 14;  // elements converted per write
    buf_.resize(static_cast<size_t>(kChunk) * esize);
    const real* src = t.data();
    for (int64_t start = 0; start < t.numel(); start += kChunk) {
      const int64_t m = std::min(kChunk, t.numel() - start);
      unsigned char* p = buf_.data();
      if (esize == 4) {
        for (int64_t j = 0; j < m; ++j) {
          const float f = static_cast<float>(src[start + j]);
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          store_le(p + 4 * j, bits, 4);
        }
      } else {
        for (int64_t j = 0; j < m; ++j) {
          const double d = static_cast<double>(src[start + j]);
          uint64_t bits;
          std::memcpy(&bits, &d, 8);
          store_le(p + 8 * j, bits, 8);
        }
      }
      write_all_bytes(fd, p, static_cast<size_t>(m) * esize, "write_safetensors: " + path_, file);
    }
  }

  std::string path_;
  std::vector<unsigned char> buf_;  // write_data's conversion buffer, allocated once
};

// A writer killed mid-save leaves its "<path>.tmp.<pid>" behind. Before each
// save, remove those of processes that no longer exist, so that repeated
// crashes (tests/cli/train_kill.sh) never pile temporaries up.
void remove_stale_temporaries(const std::string& target_path) {
  namespace fs = std::filesystem;
  const fs::path target(target_path);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t p = static_cast<pid_t>(std::stol(pid));
    if (p != ::getpid() && ::kill(p, 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);
  }
}

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const Metadata& metadata, FileDtype dtype) {
  // The temporaries sit beside the file a symlink `path` leads to.
  remove_stale_temporaries(output_target(path, "write_safetensors: " + path));
  Writer(path).write(tensors, metadata, dtype);
}

std::string safetensors_temp_path(const std::string& path) { return atomic_temp_path(path); }

}  // namespace qkv
