#include "explorer/program.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/real.h"

namespace qkv::explorer {

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
                twin.string() + ", which is not built: make " + twin.string());
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
