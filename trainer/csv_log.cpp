#include "trainer/csv_log.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/output_file.h"

namespace qkv::train {

CsvLog::CsvLog(const std::string& path, bool append) : path_(path) {
  std::string target = "/dev/null";
  try {
    if (!path.empty()) target = output_target(path, path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nwarning: %s; training goes on\n", e.what());
    failed_ = true;
    return;
  }
  std::error_code ec;
  const bool fresh = !append || std::filesystem::file_size(target, ec) == 0 || ec;
  if (!fresh) {  // the columns of the header already there
    std::ifstream old(target);
    std::string header;
    if (std::getline(old, header) && !header.empty())
      columns_ = 1 + static_cast<int>(std::count(header.begin(), header.end(), ','));
  }
  f_.open(target, append ? std::ios::app : std::ios::trunc);
  if (!f_) fail("cannot open it");
  if (fresh)
    f_ << "step,loss,lr,tokens_per_s,grad_norm,heldout_exact,heldout_token,heldout_loss,"
          "heldout_bleu,heldout_bits_per_byte\n";
}

void CsvLog::close() {
  if (!failed_) {
    f_.close();
    if (f_.fail()) fail("close failed");
  }
}

void CsvLog::fail(const char* what) {
  if (!failed_)
    std::fprintf(stderr, "\nwarning: %s: %s (%s); training goes on\n", path_.c_str(), what,
                 std::strerror(errno));
  failed_ = true;
}

}  // namespace qkv::train
