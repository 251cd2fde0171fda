// Output paths checked before a program does any work: a run that could not
// keep its result is refused at once, naming the flag and the path.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace qkv::outputs {

// Can a file be created in `dir`? Tried, not guessed: permissions, read-only
// file systems and full disks all show up here. On failure *why says why.
inline bool can_create_in(const std::filesystem::path& dir, std::string* why) {
  const std::filesystem::path probe = dir / (".qkv-write-test." + std::to_string(getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  const bool wrote = ::write(fd, "x", 1) == 1;
  if (!wrote) *why = std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return wrote;
}

// `path` (given with `flag`) can be written as a file: it is not a directory,
// and its directory exists and takes files. Throws Error otherwise.
inline void check_file_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (path.empty()) throw Error(flag + ": the path is empty");
  if (fs::is_directory(p, ec)) throw Error(flag + " " + path + ": is a directory, not a file path");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw Error(flag + " " + path + ": the directory " + dir.string() + " does not exist");
  std::string why;
  if (!can_create_in(dir, &why)) throw Error(flag + " " + path + ": cannot write files in " + dir.string() + ": " + why);
}

}  // namespace qkv::outputs
