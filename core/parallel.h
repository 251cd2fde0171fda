// Threading policy: one pool. Our kernels use OpenMP, and we link the OpenMP
// build of OpenBLAS, so sgemm runs on the same OpenMP threads. sgemm itself
// is always single-threaded; big products are cut across our threads
// (core/blas.cpp), so every team is one of ours. set_num_threads governs them.
//
// Graceful under a competing load. A parallel region ends only when every
// thread of the team has finished its share. When another process keeps one
// core busy, the thread on that core waits for an OS time slice (milliseconds)
// in most regions, and a training step of ~250 regions took 20-40x longer than
// on one thread. So every team region is timed on the calling thread: its own
// work (busy) and the time it then waited for the others (wait). When the team
// loses more time waiting than its second thread saves (TeamPolicy below), the
// calling thread runs the regions alone for a while, then tries the team again.
// Alone, it runs each thread's share in turn, with that share's ThreadSlots
// slot, so results do not depend on the load: only on set_num_threads(n).
#pragma once
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qkv {

void set_num_threads(int n);  // n >= 1; also OpenMP's default for the calling thread
int get_num_threads();

// Elementwise loops below this many elements run on the calling thread: waking
// a second thread costs tens of microseconds, more than the work it would take.
inline constexpr int64_t kParallelGrain = 32768;

// The grain of a loop over items that each do `work_per_item` elements of
// work (a row of D numbers, say): enough items that a task holds about
// kParallelGrain elements, and at least one.
inline int64_t grain_for(int64_t work_per_item) {
  if (work_per_item >= kParallelGrain) return 1;
  return kParallelGrain / (work_per_item > 1 ? work_per_item : 1);
}

namespace detail {
// True while the calling thread runs the parts of a benched team in turn
// (run_parts): code called from there must act as inside a region.
extern thread_local bool tl_in_parts;
}  // namespace detail

inline bool in_parallel_region() {
#ifdef _OPENMP
  return detail::tl_in_parts || omp_in_parallel();
#else
  return false;
#endif
}

// When to stop using the team, from the timings of its regions. Pure logic
// (times are passed in, in nanoseconds), so a test can feed it synthetic ones.
//   record(busy, wait, now) after a team region: the calling thread's own work
//     and the time it then waited for the other threads.
//   use_team(now) before a region: false while the team is benched.
// The regions are judged by windows of window_ns of their time (busy + wait).
// Waiting longer than the calling thread worked over a window means the team
// took longer than one thread doing both shares would have (with equal shares
// the other thread's work is about `busy`). Then the team is benched for
// `solo` ns, four times longer each time the next window fails too (a load
// that persists costs one window of slow regions per try: after a few tries,
// one per second), back to the minimum after a clean window. A single stall
// does not bench the team: on a virtual machine the other vCPU can vanish for
// a few ms with nothing else running, and a first step's page faults make its
// regions uneven; a competing process makes nearly every region wait.
// A cold region, the first one, or one that starts more than cold_gap_ns after
// the previous team region ended, is not judged at all: its threads have gone
// to sleep, and on this project's VM waking them costs up to ~8 ms after a
// 20 ms gap (a few us after 5 ms). Judged, that wake-up failed every try.
class TeamPolicy {
 public:
  struct Params {
    int64_t window_ns = 50'000'000;       // judge 50 ms of region time at once
    int64_t solo_min_ns = 20'000'000;     // first bench: 20 ms
    int64_t solo_max_ns = 1'000'000'000;  // longest bench: 1 s
    int64_t cold_gap_ns = 2'000'000;      // idle longer than 2 ms: threads asleep
  };
  TeamPolicy() = default;
  explicit TeamPolicy(const Params& p) : p_(p), solo_ns_(p.solo_min_ns) {}
  bool use_team(int64_t now) const { return now >= solo_until_; }
  // Returns true when this region benched the team. `now` is the region's end.
  bool record(int64_t busy, int64_t wait, int64_t now);
  int64_t solo_until() const { return solo_until_; }
  int64_t next_solo_ns() const { return solo_ns_; }

 private:
  Params p_{};
  int64_t busy_ = 0, wait_ = 0;  // sums over the current window
  int64_t last_end_ = -1;        // when the last team region ended (-1: none yet)
  int64_t solo_until_ = 0;       // benched until this time
  int64_t solo_ns_ = Params{}.solo_min_ns;
};

// What the calling thread's regions did since the thread started: regions run
// on a team, regions whose parts ran in turn because the team was benched,
// and how many times it was benched. For benchmarks and diagnostics.
struct TeamStats {
  int64_t team_regions = 0, benched_regions = 0, benches = 0;
};
TeamStats team_stats();

// Whether the adaptive policy is on (default) for parallel regions opened by
// the calling thread. Off, every region uses get_num_threads() threads.
// set_num_threads also resets the policy's state.
void set_adaptive_threads(bool on);
bool adaptive_threads();

namespace detail {
int64_t now_ns();
bool team_available();                // the calling thread's policy lets a team run now
TeamPolicy& calling_thread_policy();  // for tests: feed it timings
void team_record(int64_t busy_ns, int64_t wait_ns);
// The calling thread's ThreadSlots row in the current region, or while the
// calling thread runs the parts of a benched team in turn.
extern thread_local int tl_slot;
}  // namespace detail

// How many parts a region opened here and now should be cut into (the
// thread count), and whether they run on a team or in turn on this thread.
struct TeamPlan {
  int parts = 1;
  bool team = false;
};
inline TeamPlan plan_team() {
#ifdef _OPENMP
  const int nt = get_num_threads();
  if (nt < 2 || in_parallel_region()) return {1, false};
  return {nt, detail::team_available()};
#else
  return {1, false};
#endif
}

// Runs body(t, n) for every part t of n = plan.parts: on a team of n threads
// (timed for the policy), or in turn on the calling thread. Either way
// ThreadSlots::slot() is t inside body(t, n). body must not throw.
template <class Body>
void run_parts(const TeamPlan& plan, Body&& body) {
#ifdef _OPENMP
  if (plan.team && plan.parts > 1) {
    const int64_t t0 = detail::now_ns();
    int64_t busy = 0;
#pragma omp parallel num_threads(plan.parts)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      const int64_t b0 = t == 0 ? detail::now_ns() : 0;
      detail::tl_slot = t;
      body(t, n);
      detail::tl_slot = 0;
      if (t == 0) busy = detail::now_ns() - b0;
    }
    const int64_t wall = detail::now_ns() - t0;
    detail::team_record(busy, wall - busy);
    return;
  }
#endif
  detail::tl_in_parts = plan.parts > 1;
  for (int t = 0; t < plan.parts; ++t) {
    detail::tl_slot = t;
    body(t, plan.parts);
  }
  detail::tl_slot = 0;
  detail::tl_in_parts = false;
}

// Calls f(begin, end) on contiguous chunks covering [0, n), one per thread, when
// n is at least `grain`; otherwise once on the calling thread. f must not throw.
// The chunks depend only on n and the thread count, not on whether the team
// or the calling thread alone runs them.
template <class F>
void parallel_for(int64_t n, F&& f, int64_t grain = kParallelGrain) {
  if (n <= 0) return;
  const TeamPlan plan = n >= grain ? plan_team() : TeamPlan{};
  if (plan.parts > 1) {
    run_parts(plan, [&](int t, int nt) {
      const int64_t b = n * t / nt, e = n * (t + 1) / nt;
      if (b < e) f(b, e);
    });
    return;
  }
  f(int64_t{0}, n);
}

// Per-thread scratch for one parallel_for: count() rows, and in the loop body
// slot() is the calling part's row, private to it. Make it before the loop.
// Called from inside someone else's parallel region, parallel_for runs on the
// calling thread alone, so there is one row and every call uses row 0.
class ThreadSlots {
 public:
  ThreadSlots() : nested_(in_parallel_region()) {}
  int count() const { return nested_ ? 1 : get_num_threads(); }
  int slot() const { return nested_ ? 0 : detail::tl_slot; }

 private:
  bool nested_;
};

}  // namespace qkv
