// Test helpers for the PyTorch reference fixtures in tests/fixtures/.
//
//   TensorFile f = load_fixture("layers.safetensors");
//   nn::LayerNorm ln(16);
//   load_params(ln, f, "ln.");   // ln.param.weight, ln.param.bias -> ln's parameters
//   const Tensor& x = f.get("ln.in.x");
//
// The repository root is QKV_SOURCE_DIR when that macro is defined, else the
// current directory when it holds tests/fixtures (the Makefile runs tests from
// the root), else the nearest ancestor of the test binary's directory that does.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/module.h"
#include "io/safetensors.h"

namespace qkv {

inline std::string repo_root() {
  namespace fs = std::filesystem;
  auto has_fixtures = [](const fs::path& dir) {
    std::error_code ec;
    return fs::is_directory(dir / "tests" / "fixtures", ec);
  };
#ifdef QKV_SOURCE_DIR
  if (has_fixtures(QKV_SOURCE_DIR)) return QKV_SOURCE_DIR;
#endif
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!ec && has_fixtures(cwd)) return cwd.string();
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (has_fixtures(dir)) return dir.string();
      if (dir == dir.root_path()) break;
    }
  throw Error("repo_root: cannot find tests/fixtures from the current directory (" + cwd.string() +
              ") or the test binary's directory; run from the repository root");
}

inline std::string fixture_path(const std::string& name) {
  return repo_root() + "/tests/fixtures/" + name;
}

inline TensorFile load_fixture(const std::string& name) {
  return read_safetensors(fixture_path(name));
}

// Copies the tensors named prefix + "param." + <parameter name> into m's
// parameters. Every parameter must be there with its shape; other tensors are
// ignored. Nothing changes unless every parameter checks out.
inline void load_params(nn::Module& m, const TensorFile& f, const std::string& prefix) {
  auto params = m.named_parameters();
  std::vector<const Tensor*> src;
  for (const auto& [name, v] : params) {
    const std::string full = prefix + "param." + name;
    if (!f.has(full)) throw Error("load_params: " + f.path + ": missing tensor '" + full + "'");
    const Tensor& t = f.get(full);
    if (t.shape() != v.shape())
      throw Error("load_params: " + f.path + ": tensor '" + full + "' has shape " +
                  to_string(t.shape()) + " but the model expects " + to_string(v.shape()));
    src.push_back(&t);
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].second.data().copy_(*src[i]);
}

}  // namespace qkv

using qkv::load_fixture;
using qkv::load_params;
