// qkv::dist: data-parallel training over MPI, the way llm.c and PyTorch DDP
// do it. N copies of the program (ranks, started by mpirun) hold the same
// parameters; each computes the gradient of its share of the global batch,
// the gradients are summed over the ranks (MPI_Allreduce), and every rank
// then takes the same optimizer step, so the copies stay identical.
//
//   dist::init(&argc, &argv);                    // first thing in main
//   ... loss on this rank's rows, weighted by local_tokens / global_tokens ...
//   loss.backward();
//   dist::allreduce_gradients(opt.params());     // now every rank has the sum
//   opt.step();
//   dist::finalize();
//
// Built without MPI (no -DQKV_MPI, the default build) every call is the
// one-process case: rank 0 of 1, sums of one value, nothing sent. The API is
// the same either way, so a program needs no #ifdef.
//
// This file knows Vars and their gradients, nothing of layers or models.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/var.h"

namespace qkv::dist {

// True when this library was built with MPI (make MPI=1).
bool built_with_mpi();

// Starts MPI (MPI_Init_thread, funneled: only the main thread calls MPI).
// Call once, first thing in main; a no-op without MPI.
void init(int* argc, char*** argv);
// Ends MPI before a normal return from main (every rank must call it).
void finalize();

int rank();  // this process's number, 0 .. size() - 1
int size();  // how many processes take part (1 without MPI or mpirun)

// After an error on this rank: ends every rank of the run with `code`
// (MPI_Abort), so that the others do not wait forever in a collective call.
// In one process it is std::exit(code).
[[noreturn]] void abort_all(int code);

// The sum of x over all ranks, on every rank (collective: every rank calls it).
double sum(double x);
int64_t sum(int64_t x);
// True on every rank iff every rank passed the same string (collective).
bool all_equal(const std::string& s);
// Every rank's string, in rank order, on every rank (collective).
std::vector<std::string> all_gather(const std::string& s);

// The rows [begin, end) of n that rank r of `ranks` takes: contiguous, in rank
// order, sizes differing by at most one (rank r's share is n/ranks, the first
// n % ranks ranks one more).
struct Share {
  int64_t begin, end;
};
Share share(int64_t n, int r, int ranks);

// Sums every parameter's gradient over the ranks, in place (collective). The
// gradients are packed into buckets of about bucket_bytes; while one bucket is
// being reduced (MPI_Iallreduce) the next is packed, and each is unpacked as
// it arrives. A parameter without a gradient on this rank takes part with
// zeros (and gets the sum); one without a gradient on every rank stays without
// one. Returns the seconds spent (packing, waiting and unpacking); 0 in one
// process, where nothing is done.
double allreduce_gradients(const std::vector<Var>& params, int64_t bucket_bytes = int64_t(4) << 20);

}  // namespace qkv::dist
