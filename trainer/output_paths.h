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

// Can the file `name` be created in `dir` and take a byte? Tried, not
// guessed: permissions, read-only file systems, full disks and a name past
// the file system's limit (ENAMETOOLONG) all show up here, as they would at
// the end of a run. The probe is removed again. On failure *why says why.
inline bool can_create_named(const std::filesystem::path& dir, const std::string& name,
                             std::string* why) {
  const std::filesystem::path probe = dir / name;
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

// Can a file be created in `dir`? (A probe under a name of this process's own.)
inline bool can_create_in(const std::filesystem::path& dir, std::string* why) {
  return can_create_named(dir, ".qkv-write-test." + std::to_string(getpid()), why);
}

// `path` (given with `flag`) can be written as a file: it is not a directory,
// and its directory exists and takes files, under the path's own name and
// under `temp_name` when given (the temporary file an atomic writer uses
// first). Throws Error otherwise.
inline void check_file_path(const std::string& flag, const std::string& path,
                            const std::string& temp_name = "") {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (path.empty()) throw Error(flag + ": the path is empty");
  if (fs::is_directory(p, ec))
    throw Error(flag + " " + brief(path) + ": is a directory, not a file path");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error(flag + " " + brief(path) + ": the directory " + brief(dir.string()) +
                " does not exist");
  std::string why;
  if (!can_create_in(dir, &why))
    throw Error(flag + " " + brief(path) + ": cannot write files in " + brief(dir.string()) + ": " +
                why);
  // The names themselves (a file name of 246+ bytes is legal, its temporary's may not be).
  for (const std::string& name : {p.filename().string(), temp_name}) {
    if (name.empty() || fs::exists(dir / name, ec)) continue;
    if (!can_create_named(dir, name, &why))
      throw Error(flag + " " + brief(path) + ": cannot create the file " + brief(name) + " in " +
                  brief(dir.string()) + ": " + why);
  }
}

}  // namespace qkv::outputs
