// A line on stderr every ~10 s while a long phase runs, saying what it is
// doing and how far it is:
//   final evaluation (greedy): 1500 of 10000 sequences, 31 s
// A phase that ends within the interval prints nothing. The interval is
// QKV_PROGRESS_SECONDS (default 10; tests set 0: a line at every call).
// MPI ranks other than 0 print nothing.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/distributed.h"

namespace qkv::train {

class Progress {
 public:
  Progress(std::string what, int64_t total, std::string unit)
      : what_(std::move(what)), unit_(std::move(unit)), total_(total) {
    const char* e = std::getenv("QKV_PROGRESS_SECONDS");
    char* end = nullptr;
    const double v = e ? std::strtod(e, &end) : 10;
    interval_ = e && end != e && v >= 0 ? v : 10;
    start_ = last_ = Clock::now();
  }
  // `done` of the total units are finished.
  void at(int64_t done) {
    const auto now = Clock::now();
    if (dist::rank() != 0 || seconds(last_, now) < interval_) return;
    last_ = now;
    std::fprintf(stderr, "%s: %lld of %lld %s, %.0f s\n", what_.c_str(), (long long)done,
                 (long long)total_, unit_.c_str(), seconds(start_, now));
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  std::string what_, unit_;
  int64_t total_;
  double interval_;
  Clock::time_point start_, last_;
};

}  // namespace qkv::train
