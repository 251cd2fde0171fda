// Writing safetensors files (io/safetensors.h): validate and lay out
// everything first, write to a temporary file, fsync it and rename it over the
// path, then fsync the directory, so a crash mid-save leaves the previous file.
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

  void write_all(int fd, const unsigned char* p, size_t n, const std::string& file) const {
    while (n > 0) {
      const ssize_t put = ::write(fd, p, n);
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) fail("write to " + file + " failed: " + std::strerror(errno));
      p += put;
      n -= static_cast<size_t>(put);
    }
  }

  // Validate and lay out everything before any file is created, then write
  // to a temporary file and rename it over the path (atomic).
  void write(const NamedTensors& tensors, const Metadata& metadata, FileDtype dtype) {
    const std::vector<size_t> order = sorted_by_name(tensors);
    const int esize = dtype == FileDtype::F32 ? 4 : 8;
    const std::string header = header_text(tensors, order, metadata, esize);

    const std::string tmp = safetensors_temp_path(path_);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) fail("cannot create " + tmp + ": " + std::strerror(errno));
    try {
      unsigned char len[8];
      store_le(len, header.size(), 8);
      write_all(fd, len, 8, tmp);
      write_all(fd, reinterpret_cast<const unsigned char*>(header.data()), header.size(), tmp);
      for (size_t i : order) write_data(fd, tensors[i].second, esize, tmp);
      if (::fsync(fd) != 0) fail("fsync of " + tmp + " failed: " + std::strerror(errno));
      const int rc = ::close(fd);
      fd = -1;
      if (rc != 0) fail("close of " + tmp + " failed: " + std::strerror(errno));
      if (::rename(tmp.c_str(), path_.c_str()) != 0)
        fail("rename of " + tmp + " failed: " + std::strerror(errno));
    } catch (...) {
      if (fd >= 0) ::close(fd);
      ::unlink(tmp.c_str());
      throw;
    }
    sync_directory();
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
      write_all(fd, p, static_cast<size_t>(m) * esize, file);
    }
  }

  // Makes the rename itself durable. Filesystems that cannot fsync a
  // directory (EINVAL) are fine: the file is in place either way.
  void sync_directory() const {
    std::string dir = std::filesystem::path(path_).parent_path().string();
    if (dir.empty()) dir = ".";
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL && err != ENOTSUP)
      fail("saved, but fsync of directory " + dir + " failed: " + std::strerror(err));
  }

  std::string path_;
  std::vector<unsigned char> buf_;  // write_data's conversion buffer, allocated once
};

// A writer killed mid-save leaves its "<path>.tmp.<pid>" behind. Before each
// save, remove those of processes that no longer exist, so that repeated
// crashes (tests/cli/train_kill.sh) never pile temporaries up.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
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
  remove_stale_temporaries(path);
  Writer(path).write(tensors, metadata, dtype);
}

std::string safetensors_temp_path(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

}  // namespace qkv
