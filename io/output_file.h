// Output files: what an output path may name, and the one atomic writer
// every qkv program and writer uses (checkpoints, model files, explorer
// pages, plots, DOT graphs).
//
// The rule, the same at the start of a run and at the moment of writing:
//   - a missing path or a regular file is written;
//   - a symlink is written THROUGH, as cp does: the end of its chain (at most
//     kMaxSymlinkHops links; a loop is reported as one) gets the new content,
//     and the link stays a link. A symlink to a missing file is refused, as
//     GNU cp refuses to write through one;
//   - a directory, character or block device, FIFO or socket, or a symlink
//     ending at one, is refused: an atomic writer cannot write into a device,
//     and silently replacing one (as root: /dev/null) is never what was meant.
// Refusals read "<label>: is a character device, not a regular file", the
// label being what the caller names the path by ("--save out/null").
//
//   check_output_file("--save " + brief(path), path);    // before any work
//   write_file_atomically(path, "plot: " + path, svg_text);  // at the end
#pragma once
#include <functional>
#include <string>

namespace qkv {

// The longest symlink chain followed (Linux's own limit, MAXSYMLINKS).
inline constexpr int kMaxSymlinkHops = 40;

// The file a write of `path` replaces: `path` itself when it is missing or a
// regular file, else the regular file its symlink chain ends at (a relative
// link is read from its own link's directory). Throws Error("<label>: <why>")
// for every kind refused above, a dangling link, a loop and a chain too long.
std::string output_target(const std::string& path, const std::string& label);

// The temporary file an atomic write of `target` goes through first:
// "<target>.tmp.<pid>", in the target's own directory (so the rename is atomic).
std::string atomic_temp_path(const std::string& target);

// Everything a write at the end would need, checked now (before a run's work):
// the path's kind (output_target), that the target's directory exists and
// takes files, and that the target's name and its temporary's name can be
// created there (a name near the file system's limit). Throws Error naming
// `label`. Returns the target.
std::string check_output_file(const std::string& label, const std::string& path);

// Writes `path` atomically: output_target is checked again (the path may have
// changed since the start of a long run), `fill` writes the content to the
// target's temporary file through `fd`, which is then fsynced and renamed over
// the target, and the directory is fsynced. On any failure the temporary
// file is removed, the target is left as it was, and an Error starting with
// `label` is thrown (an Error thrown by `fill` passes through as it is).
void write_file_atomically(const std::string& path, const std::string& label,
                           const std::function<void(int fd, const std::string& tmp)>& fill);
void write_file_atomically(const std::string& path, const std::string& label,
                           const std::string& content);

// Writes all `n` bytes to `fd` (retrying short writes); throws
// Error("<label>: write to <file> failed: ...").
void write_all_bytes(int fd, const void* data, size_t n, const std::string& label,
                     const std::string& file);

// Can the file `name` be created in `dir` and take a byte? Tried, not
// guessed: permissions, read-only file systems, full disks and a name past
// the file system's limit (ENAMETOOLONG) all show up here, as they would at
// the end of a run. The probe is removed again. On failure *why says why.
bool can_create_named(const std::string& dir, const std::string& name, std::string* why);

}  // namespace qkv
