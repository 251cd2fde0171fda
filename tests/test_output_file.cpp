// Output paths (io/output_file.h): a symlink is written through, a device,
// FIFO, socket or dangling symlink is refused, at the start (check_output_file)
// and at the moment of writing (write_file_atomically, write_safetensors).
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/tensor.h"
#include "io/output_file.h"
#include "io/safetensors.h"
#include "tests/errors.h"
#include "tests/temp_dir.h"

using namespace qkv;
using namespace qkv::testing;
namespace fs = std::filesystem;

namespace {

std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The names in `dir`, sorted (to see that no temporary or stray file appeared).
std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += n + " ";
  return out;
}

// Each way an output can be given a special file: refused by the check at the
// start, by the atomic writer and by write_safetensors, naming the kind; the
// node is left as it was and nothing appears beside it.
void check_refused(const TempDir& tmp, const std::string& path, const std::string& kind) {
  const std::string before = listing(tmp.dir);
  const auto mode_before = fs::symlink_status(path).type();
  CHECK(error_of([&] { check_output_file("--save " + path, path); }) ==
        "--save " + path + ": " + kind);
  CHECK(error_of([&] { write_file_atomically(path, "plot: " + path, "x"); }) ==
        "plot: " + path + ": " + kind);
  CHECK(error_of([&] {
          write_safetensors(path, {{"x", Tensor::ones({2})}});
        }) == "write_safetensors: " + path + ": " + kind);
  CHECK(fs::symlink_status(path).type() == mode_before);
  CHECK(listing(tmp.dir) == before);
}

}  // namespace

TEST_CASE(
    "output file: a symlink is written through (the target gets the content, the link stays a "
    "link), for a relative link, an absolute one and a chain") {
  TempDir tmp;
  fs::create_directory(tmp.dir / "sub");
  std::ofstream(tmp.file("sub/real.txt")) << "old";
  fs::permissions(tmp.file("sub/real.txt"), fs::perms(0640));
  fs::create_symlink("sub/real.txt", tmp.file("rel"));         // relative to its own folder
  fs::create_symlink(tmp.file("rel"), tmp.file("sub/chain"));  // absolute, to a link
  for (const std::string link : {"rel", "sub/chain"}) {
    const std::string path = tmp.file(link);
    CHECK(check_output_file("--save " + path, path) == tmp.file("sub/real.txt"));
    write_file_atomically(path, "t", "new " + link);
    CHECK(fs::is_symlink(path));
    CHECK(text_of(tmp.file("sub/real.txt")) == "new " + link);
  }
  // The file replaced keeps its permissions, as cp keeps them.
  CHECK((fs::status(tmp.file("sub/real.txt")).permissions() & fs::perms::all) == fs::perms(0640));
  CHECK(listing(tmp.dir) == "rel sub ");
  CHECK(listing(tmp.dir / "sub") == "chain real.txt ");

  // write_safetensors the same way: the file reads back through the link.
  write_safetensors(tmp.file("rel"), {{"x", Tensor::from_vector({1, 2, 3})}});
  CHECK(fs::is_symlink(tmp.file("rel")));
  CHECK(read_safetensors(tmp.file("sub/real.txt")).get("x").to_vector() ==
        std::vector<real>{1, 2, 3});
}

TEST_CASE(
    "output file: a dangling symlink, a symlink loop and a chain of more than 40 links are "
    "refused, each said as such") {
  TempDir tmp;
  fs::create_symlink("nowhere/missing.txt", tmp.file("dangling"));
  check_refused(tmp, tmp.file("dangling"),
                "is a symlink to a missing file " + brief(tmp.file("nowhere/missing.txt")));
  fs::create_symlink("loop_b", tmp.file("loop_a"));
  fs::create_symlink("loop_a", tmp.file("loop_b"));
  check_refused(tmp, tmp.file("loop_a"),
                "is a symlink loop (" + brief(tmp.file("loop_a")) + " leads back to itself)");
  std::ofstream(tmp.file("end")) << "x";
  std::string next = "end";
  for (int i = 0; i <= kMaxSymlinkHops; ++i) {  // 41 links: l40 -> l39 -> ... -> l0 -> end
    fs::create_symlink(next, tmp.file("l" + std::to_string(i)));
    next = "l" + std::to_string(i);
  }
  check_refused(tmp, tmp.file(next), "is a chain of more than 40 symlinks");
  CHECK(check_output_file("x", tmp.file("l39")) == tmp.file("end"));  // 40 links: followed
}

TEST_CASE(
    "output file: a FIFO, a socket, a character device and a directory are refused (also "
    "through a symlink), and stay what they were") {
  TempDir tmp;
  REQUIRE(mkfifo(tmp.file("fifo").c_str(), 0600) == 0);
  check_refused(tmp, tmp.file("fifo"), "is a FIFO, not a regular file");
  CHECK(fs::is_fifo(tmp.file("fifo")));

  const int s = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = tmp.file("sock");
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  check_refused(tmp, sock, "is a socket, not a regular file");
  CHECK(fs::is_socket(sock));
  close(s);

  fs::create_directory(tmp.dir / "adir");
  check_refused(tmp, tmp.file("adir"), "is a directory, not a file path");

  fs::create_symlink("fifo", tmp.file("to_fifo"));
  check_refused(tmp, tmp.file("to_fifo"),
                "is a symlink to " + brief(tmp.file("fifo")) + ", a FIFO, not a regular file");

  // /dev/null's own numbers (1, 3), made here: no test touches the real /dev.
  if (mknod(tmp.file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    MESSAGE("mknod refused here (not root?): the character device case is skipped");
    return;
  }
  check_refused(tmp, tmp.file("null"), "is a character device, not a regular file");
  CHECK(fs::is_character_file(tmp.file("null")));
}

TEST_CASE(
    "output file: the writer checks the path again when it writes: a file that became a FIFO "
    "during the write is refused and left a FIFO, with no temporary left behind") {
  TempDir tmp;
  const std::string path = tmp.file("out.txt");
  std::ofstream(path) << "old";
  CHECK(error_of([&] {
          write_file_atomically(path, "plot: " + path, [&](int fd, const std::string&) {
            write_all_bytes(fd, "new", 3, "plot", path);
            fs::remove(path);
            REQUIRE(mkfifo(path.c_str(), 0600) == 0);
          });
        }) == "plot: " + path + ": is a FIFO, not a regular file");
  CHECK(fs::is_fifo(path));
  CHECK(listing(tmp.dir) == "out.txt ");
}
