#include "explorer/program.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/real.h"

namespace qkv::explorer {

namespace {

// The command that builds `twin` (<tree>/<build>/<mode>-f64/NAME), runnable
// from anywhere: make's targets are paths relative to the source tree, so it
// names the tree with -C, and a sanitizer or MPI build's switches come along
// (san-f64: SANITIZE=1, rel-mpi-f64: MPI=1). Outside a source tree (the
// program copied elsewhere) it says where to run make instead.
std::string make_command(const std::filesystem::path& twin) {
  namespace fs = std::filesystem;
  const std::string mode = twin.parent_path().filename().string();  // rel-f64, san-f64, ...
  const fs::path build = twin.parent_path().parent_path();
  std::string flags;
  if (mode.rfind("san", 0) == 0) flags += " SANITIZE=1";
  if (mode.find("-mpi-") != std::string::npos) flags += " MPI=1";
  const std::string in_build = "/" + mode + "/" + twin.filename().string();
  std::error_code ec;
  const fs::path tree = build.parent_path();
  if (!fs::is_regular_file(tree / "Makefile", ec) || !fs::is_directory(tree / "examples", ec))
    return "in the qkv source tree, make" + flags + " build" + in_build;
  const std::string b = build.filename().string();  // make BUILD=NAME builds in <tree>/NAME
  if (b != "build") flags += " BUILD=" + b;
  return "make -C " + tree.string() + flags + " " + b + in_build;
}

}  // namespace

void run_in_float64(const char* flag, char** argv) {
  if (sizeof(real) == 8) return;  // already float64
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::string dir = self.parent_path().filename().string();
  if (ec || dir.size() < 4 || dir.compare(dir.size() - 4, 4, "-f32") != 0)
    throw Error(std::string(flag) + ": cannot find the float64 build beside " + self.string());
  dir.replace(dir.size() - 4, 4, "-f64");
  const std::filesystem::path twin = self.parent_path().parent_path() / dir / self.filename();
  if (!std::filesystem::exists(twin, ec))
    throw Error(std::string(flag) + ": the page's finite differences are computed in float64 by " +
                twin.string() + ", which is not built: " + make_command(twin));
  execv(twin.c_str(), argv);
  throw Error(std::string(flag) + ": cannot run " + twin.string());
}

std::string docs_url_beside_build() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path docs = self.parent_path().parent_path().parent_path() / "docs";
  if (!std::filesystem::is_directory(docs, ec)) return "";
  return "file://" + std::filesystem::canonical(docs, ec).string() + "/";
}

}  // namespace qkv::explorer
