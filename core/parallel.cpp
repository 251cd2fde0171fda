#include "core/parallel.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/blas.h"
#include "core/error.h"

namespace qkv {
namespace {
int g_threads = 0;  // 0: not set yet, use the OpenMP default

// One policy per calling thread: it judges the teams that thread opens.
thread_local TeamPolicy tl_policy;
thread_local bool tl_adaptive = true;
thread_local TeamStats tl_stats;
}  // namespace

namespace detail {
thread_local int tl_slot = 0;
thread_local bool tl_in_parts = false;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TeamPolicy& calling_thread_policy() { return tl_policy; }

bool team_available() {
  if (!tl_adaptive || tl_policy.use_team(now_ns())) return true;
  ++tl_stats.benched_regions;
  return false;
}

void team_record(int64_t busy_ns, int64_t wait_ns) {
  ++tl_stats.team_regions;
  if (tl_adaptive && tl_policy.record(busy_ns, wait_ns, now_ns())) ++tl_stats.benches;
}
}  // namespace detail

bool TeamPolicy::record(int64_t busy, int64_t wait, int64_t now) {
  const int64_t start = now - busy - wait;
  const bool cold = last_end_ < 0 || start - last_end_ > p_.cold_gap_ns;
  last_end_ = now;
  if (cold) return false;  // its wait is the threads waking up, not the load
  busy_ += busy;
  wait_ += wait;
  if (busy_ + wait_ < p_.window_ns) return false;  // judge whole windows only
  const bool lost = wait_ > busy_;                 // the team cost more than it gave
  busy_ = wait_ = 0;
  if (lost) {
    solo_until_ = now + solo_ns_;
    solo_ns_ = std::min(4 * solo_ns_, p_.solo_max_ns);
    return true;
  }
  solo_ns_ = p_.solo_min_ns;  // a clean window: forget the past
  return false;
}

TeamStats team_stats() { return tl_stats; }

void set_adaptive_threads(bool on) {
  tl_adaptive = on;
  tl_policy = TeamPolicy();
}

bool adaptive_threads() { return tl_adaptive; }

void set_num_threads(int n) {
  if (n < 1) throw Error("set_num_threads: need at least 1 thread, got " + std::to_string(n));
  g_threads = n;
  tl_policy = TeamPolicy();
  blas_single_threaded();  // also sets OpenMP's default to 1: set it after
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

int get_num_threads() {
#ifdef _OPENMP
  if (g_threads == 0) g_threads = omp_get_max_threads();
  return g_threads;
#else
  return 1;
#endif
}

}  // namespace qkv
