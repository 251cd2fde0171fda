// The training program's plots (trainer/plots.h): the terminal heatmap's token
// labels are cut at character boundaries, and a plot that could not be
// written whole is an error, never reported as written.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/loaders.h"
#include "errors.h"
#include "temp_dir.h"
#include "trainer/plots.h"

using namespace qkv;

TEST_CASE(
    "ascii_heatmap: labels of 2-, 3- and 4-byte characters are cut whole, controls shown as ?") {
  const std::vector<std::string> src = {"é", "✓✓✓", "𝄞𝄞", "ab\x1b[2J", "x"},
                                 tgt = {"✓✓✓✓✓✓", "𝄞", "\x1b]0;t\x07", "\xff\xfe"};
  const std::vector<real> w(tgt.size() * src.size(), real(0.5));
  const std::string out =
      plots::ascii_heatmap(w.data(), int64_t(tgt.size()), int64_t(src.size()), src, tgt);
  INFO(out);
  CHECK(data::first_invalid_utf8(out) == std::string::npos);
  for (char c : out) CHECK((c == '\n' || static_cast<unsigned char>(c) >= 0x20));
  CHECK(out.find("✓✓ ") != std::string::npos);     // a column label: 2 characters
  CHECK(out.find("✓✓✓✓✓ ") != std::string::npos);  // a row label: 5 characters
  CHECK(out.find("    𝄞 ") != std::string::npos);  // right-aligned by characters, not bytes
  CHECK(plots::label_cell("ab\x1b[2J", 5) == "ab?[2");
}

TEST_CASE("write_loss_svg: a plot cut short by the file system is an error, not a file written") {
  testing::TempDir tmp("qkv_plots");
  const std::string path = tmp.file("loss.svg");
  const std::vector<double> steps = {1, 2, 3}, loss = {3, 2, 1};
  plots::write_loss_svg(path, steps, loss, {}, {}, "t");
  const auto whole = std::filesystem::file_size(path);
  REQUIRE(whole > 200);
  // A file-size limit below the plot's size: the writes fail as on a full disk.
  struct rlimit old {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 100;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string msg =
      testing::error_of([&] { plots::write_loss_svg(path, steps, loss, {}, {}, "t"); });
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  // The atomic writer (io/output_file.h) names the plot and the system's reason,
  // and leaves the plot written before untouched.
  CHECK(msg.rfind("plot: " + path + ": write to ", 0) == 0);
  CHECK(msg.find("failed: File too large") != std::string::npos);
  CHECK(std::filesystem::file_size(path) == whole);
}
