// log.csv, the training loop's log (trainer/run.cpp), with every write
// checked: a failed write is reported once and the run ends with a non-zero
// status, but training goes on (the model matters more).
#pragma once
#include <fstream>
#include <string>

namespace qkv::train {

class CsvLog {
 public:
  // `append`: a resumed run adds its rows to the run's log (the header is
  // written only to a new or empty file; a log begun by an older build, with
  // fewer columns, gets rows of its own columns). A symlink is written through
  // and a device or FIFO refused (io/output_file.h); "" logs nowhere (MPI ranks > 0).
  CsvLog(const std::string& path, bool append);
  template <class... A>
  void row(const A&... fields) {
    if (failed_) return;
    int i = 0;
    ((i < columns_ ? (f_ << (i++ ? "," : "") << fields, 0) : 0), ...);
    f_ << "\n";
    if (!f_.flush()) fail("write failed");
  }
  bool failed() const { return failed_; }
  void close();

 private:
  void fail(const char* what);
  std::string path_;
  std::ofstream f_;
  bool failed_ = false;
  int columns_ = 1 << 20;  // fields written per row: the header's, when appending to one
};

}  // namespace qkv::train
