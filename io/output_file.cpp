// Output files (io/output_file.h): which paths may be written, and the
// atomic writer.
#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"

namespace qkv {

namespace {

namespace fs = std::filesystem;

// What a file that is neither a regular file nor a symlink is, for a message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string directory_of(const std::string& file) {
  const fs::path p(file);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

}  // namespace

std::string output_target(const std::string& path, const std::string& label) {
  if (path.empty()) throw Error(label + ": the path is empty");
  std::string cur = path;
  std::set<std::pair<dev_t, ino_t>> links_seen;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(cur.c_str(), &st) != 0) {
      const int err = errno;
      if (hops == 0 && err == ENOENT) return cur;  // a new file (its directory is checked later)
      if (hops == 0) throw Error(label + ": " + std::strerror(err));
      if (err == ENOENT) throw Error(label + ": is a symlink to a missing file " + brief(cur));
      throw Error(label + ": is a symlink to " + brief(cur) + ": " + std::strerror(err));
    }
    if (S_ISREG(st.st_mode)) return cur;
    if (S_ISLNK(st.st_mode)) {
      if (!links_seen.insert({st.st_dev, st.st_ino}).second)
        throw Error(label + ": is a symlink loop (" + brief(cur) + " leads back to itself)");
      if (hops == kMaxSymlinkHops)
        throw Error(label + ": is a chain of more than " + std::to_string(kMaxSymlinkHops) +
                    " symlinks");
      std::vector<char> buf(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4095) + 1);
      const ssize_t n = ::readlink(cur.c_str(), buf.data(), buf.size());
      if (n <= 0 || static_cast<size_t>(n) >= buf.size())
        throw Error(label + ": cannot read the symlink " + brief(cur) +
                    (n < 0 ? std::string(": ") + std::strerror(errno) : std::string()));
      const std::string link(buf.data(), static_cast<size_t>(n));
      // A relative link is read from the directory of the link itself.
      cur = link.front() == '/' || !fs::path(cur).has_parent_path()
                ? link
                : (fs::path(cur).parent_path() / link).string();
      continue;
    }
    const std::string what = hops == 0 ? "is " : "is a symlink to " + brief(cur) + ", ";
    throw Error(label + ": " + what + kind_of(st.st_mode) +
                (S_ISDIR(st.st_mode) ? ", not a file path" : ", not a regular file"));
  }
}

std::string atomic_temp_path(const std::string& target) {
  return target + ".tmp." + std::to_string(::getpid());
}

bool can_create_named(const std::string& dir, const std::string& name, std::string* why) {
  const fs::path probe = fs::path(dir) / name;
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

std::string check_output_file(const std::string& label, const std::string& path) {
  const std::string target = output_target(path, label);
  const std::string dir = directory_of(target);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(label + ": the directory " + brief(dir) + " does not exist");
  std::string why;
  if (!can_create_named(dir, ".qkv-write-test." + std::to_string(::getpid()), &why))
    throw Error(label + ": cannot write files in " + brief(dir) + ": " + why);
  // The names themselves (a file name of 246+ bytes is legal, its temporary's may not be).
  for (const std::string& file : {target, atomic_temp_path(target)}) {
    const std::string name = fs::path(file).filename().string();
    if (fs::exists(fs::symlink_status(file, ec))) continue;
    if (!can_create_named(dir, name, &why))
      throw Error(label + ": cannot create the file " + brief(name) + " in " + brief(dir) + ": " +
                  why);
  }
  return target;
}

void write_all_bytes(int fd, const void* data, size_t n, const std::string& label,
                     const std::string& file) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw Error(label + ": write to " + file + " failed: " + std::strerror(errno));
    p += put;
    n -= static_cast<size_t>(put);
  }
}

void write_file_atomically(const std::string& path, const std::string& label,
                           const std::function<void(int fd, const std::string& tmp)>& fill) {
  const std::string target = output_target(path, label);
  const std::string tmp = atomic_temp_path(target);
  ::unlink(tmp.c_str());  // O_EXCL below: never a file (or link) someone put there
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw Error(label + ": cannot create " + tmp + ": " + std::strerror(errno));
  try {
    struct stat st {};  // the file replaced keeps its permissions, as cp keeps them
    if (::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      (void)::fchmod(fd, st.st_mode & 07777);
    fill(fd, tmp);
    if (::fsync(fd) != 0)
      throw Error(label + ": fsync of " + tmp + " failed: " + std::strerror(errno));
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(label + ": close of " + tmp + " failed: " + std::strerror(errno));
    // Checked again now: a long run's path may have become a device or a link since.
    if (output_target(path, label) != target)
      throw Error(label + ": changed while it was written (now " +
                  brief(output_target(path, label)) + "); not written");
    if (::rename(tmp.c_str(), target.c_str()) != 0)
      throw Error(label + ": rename of " + tmp + " failed: " + std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Makes the rename itself durable. File systems that cannot fsync a
  // directory (EINVAL) are fine: the file is in place either way.
  const std::string dir = directory_of(target);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP)
    throw Error(label + ": saved, but fsync of directory " + dir +
                " failed: " + std::strerror(err));
}

void write_file_atomically(const std::string& path, const std::string& label,
                           const std::string& content) {
  write_file_atomically(path, label, [&](int fd, const std::string& tmp) {
    write_all_bytes(fd, content.data(), content.size(), label, tmp);
  });
}

}  // namespace qkv
