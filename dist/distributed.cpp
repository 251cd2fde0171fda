#include "dist/distributed.h"

#include "core/hash.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/pool.h"

#ifdef QKV_MPI
#include <mpi.h>
#endif

namespace qkv::dist {

namespace {

// MPI's own state is process-wide; these two mirror it after init().
int g_rank = 0, g_size = 1;

#ifdef QKV_MPI

MPI_Datatype real_type() { return sizeof(real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT; }

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string(what) + ": " + std::string(msg, static_cast<size_t>(len)));
}
#endif

}  // namespace

#ifdef QKV_MPI
bool built_with_mpi() { return true; }

void init(int* argc, char*** argv) {
  int done = 0;
  MPI_Initialized(&done);
  if (!done) {
    int provided = 0;
    // Funneled: OpenMP threads compute, only the main thread talks to MPI.
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  }
  // Errors come back as return codes (check() turns them into qkv::Error)
  // instead of MPI's default of aborting with its own message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
}

void finalize() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Finalize();
}

void abort_all(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

double sum(double x) {
  if (g_size == 1) return x;
  double out = 0;
  check(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "dist::sum");
  return out;
}

int64_t sum(int64_t x) {
  if (g_size == 1) return x;
  int64_t out = 0;
  check(MPI_Allreduce(&x, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "dist::sum");
  return out;
}

bool all_equal(const std::string& s) {
  if (g_size == 1) return true;
  // Equal hashes and lengths everywhere iff min == max of each.
  const uint64_t mine[2] = {fnv1a64(s), s.size()};
  uint64_t lo[2], hi[2];
  check(MPI_Allreduce(mine, lo, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD), "dist::all_equal");
  check(MPI_Allreduce(mine, hi, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "dist::all_equal");
  return lo[0] == hi[0] && lo[1] == hi[1];
}

std::vector<std::string> all_gather(const std::string& s) {
  if (g_size == 1) return {s};
  const int len = static_cast<int>(s.size());
  std::vector<int> lens(static_cast<size_t>(g_size)), at(static_cast<size_t>(g_size));
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD),
        "dist::all_gather");
  int total = 0;
  for (int r = 0; r < g_size; ++r) {
    at[r] = total;
    total += lens[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Allgatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), at.data(), MPI_CHAR,
                       MPI_COMM_WORLD),
        "dist::all_gather");
  std::vector<std::string> out;
  for (int r = 0; r < g_size; ++r)
    out.push_back(all.substr(static_cast<size_t>(at[r]), static_cast<size_t>(lens[r])));
  return out;
}

double allreduce_gradients(const std::vector<Var>& params, int64_t bucket_bytes) {
  if (g_size == 1) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = params.size();
  // Which parameters have a gradient on some rank: those take part everywhere
  // (zeros where missing), so every rank reduces the same buckets.
  PoolVector<int> has(n), any(n);
  for (size_t i = 0; i < n; ++i) has[i] = params[i].grad().defined() ? 1 : 0;
  check(
      MPI_Allreduce(has.data(), any.data(), static_cast<int>(n), MPI_INT, MPI_MAX, MPI_COMM_WORLD),
      "allreduce_gradients");
  for (size_t i = 0; i < n; ++i)
    if (any[i] && !has[i]) params[i].impl()->grad = Tensor::zeros(params[i].shape());

  // Buckets: runs of consecutive parameters of about bucket_bytes together (a
  // larger parameter is a bucket of its own). Two staging buffers: bucket k is
  // packed while bucket k-1 is in flight; a buffer is unpacked before reuse.
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(real)));
  struct Bucket {
    size_t first, last;  // parameters [first, last)
    int64_t numel;
  };
  PoolVector<Bucket> buckets;
  for (size_t i = 0; i < n;) {
    if (!any[i]) {
      ++i;
      continue;
    }
    Bucket b{i, i, 0};
    while (b.last < n && (b.numel == 0 || b.numel + params[b.last].numel() <= cap)) {
      if (any[b.last]) b.numel += params[b.last].numel();
      ++b.last;
    }
    buckets.push_back(b);
    i = b.last;
  }
  int64_t biggest = 0;
  for (const Bucket& b : buckets) biggest = std::max(biggest, b.numel);
  PoolVector<real> buf[2] = {PoolVector<real>(static_cast<size_t>(biggest)),
                             PoolVector<real>(static_cast<size_t>(biggest))};
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  auto copy = [&](const Bucket& b, real* flat, bool pack) {
    for (size_t i = b.first; i < b.last; ++i) {
      if (!any[i]) continue;
      Tensor g = params[i].grad();  // a handle: writing it writes the Var's gradient
      if (pack)
        std::copy(g.data(), g.data() + g.numel(), flat);
      else
        std::copy(flat, flat + g.numel(), g.data());
      flat += g.numel();
    }
  };
  auto finish = [&](size_t k) {
    check(MPI_Wait(&req[k % 2], MPI_STATUS_IGNORE), "allreduce_gradients");
    copy(buckets[k], buf[k % 2].data(), false);
  };
  for (size_t k = 0; k < buckets.size(); ++k) {
    if (k >= 2) finish(k - 2);
    copy(buckets[k], buf[k % 2].data(), true);
    check(MPI_Iallreduce(MPI_IN_PLACE, buf[k % 2].data(), static_cast<int>(buckets[k].numel),
                         real_type(), MPI_SUM, MPI_COMM_WORLD, &req[k % 2]),
          "allreduce_gradients");
  }
  for (size_t k = buckets.size() >= 2 ? buckets.size() - 2 : 0; k < buckets.size(); ++k) finish(k);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#else  // one process: rank 0 of 1

bool built_with_mpi() { return false; }
void init(int*, char***) {}
void finalize() {}
void abort_all(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}
double sum(double x) { return x; }
int64_t sum(int64_t x) { return x; }
bool all_equal(const std::string&) { return true; }
std::vector<std::string> all_gather(const std::string& s) { return {s}; }
double allreduce_gradients(const std::vector<Var>&, int64_t) { return 0; }

#endif

int rank() { return g_rank; }
int size() { return g_size; }

Share share(int64_t n, int r, int ranks) {
  if (ranks < 1 || r < 0 || r >= ranks)
    throw Error("dist::share: rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                " ranks");
  const int64_t base = n / ranks, extra = n % ranks;
  const int64_t begin = r * base + std::min<int64_t>(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

}  // namespace qkv::dist
