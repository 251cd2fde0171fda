// Output paths checked before a program does any work: a run that could not
// keep its result is refused at once, naming the flag and the path. The rule
// for symlinks and special files is io/output_file.h's, the same the writers
// apply when they write.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/output_file.h"

namespace qkv::outputs {

// Can the file `name` be created in `dir` and take a byte? (io/output_file.h)
inline bool can_create_named(const std::filesystem::path& dir, const std::string& name,
                             std::string* why) {
  return qkv::can_create_named(dir.string(), name, why);
}

// Can a file be created in `dir`? (A probe under a name of this process's own.)
inline bool can_create_in(const std::filesystem::path& dir, std::string* why) {
  return can_create_named(dir, ".qkv-write-test." + std::to_string(getpid()), why);
}

// `path` (given with `flag`) can be written as a file by the atomic writer
// (write_file_atomically): it is missing or a regular file, or a symlink
// whose chain ends at one (written through); not a directory, device, FIFO
// or socket, nor a dangling symlink; and the target's directory exists and
// takes files, under the target's own name and its temporary's. Throws Error
// "<flag> <path>: <why>" otherwise.
inline void check_file_path(const std::string& flag, const std::string& path) {
  if (path.empty()) throw Error(flag + ": the path is empty");
  check_output_file(flag + " " + brief(path), path);
}

}  // namespace qkv::outputs
