// A fresh directory under the system's temp directory, removed with
// everything in it at scope exit (for tests that write files), and
// write_file, a file's bytes in one call.
#pragma once
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace qkv::testing {

struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string& prefix = "qkv_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

// Writes `bytes` to `path` (binary), replacing the file; fails the test if it cannot.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

}  // namespace qkv::testing
