// Steady-state training allocates nothing: once a model has taken a couple of
// steps, a whole step (zero grads, forward, loss, backward, clipping, update)
// and a forward pass without grad make no heap block. This binary replaces the
// global operator new with one that counts, so any new allocation anywhere in
// the step -- a std::vector, a shared_ptr, a string -- makes these tests fail;
// the pool's and the tensor allocator's miss counters must stay flat as well.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "autograd/qkv_autograd.h"
#include "core/allocator.h"
#include "core/pool.h"
#include "nn/cross_entropy.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "test_seed.h"

// Sanitizer builds keep ASan's own operator new (and the pool passes every
// request through to it), so there is nothing to count there.
#ifndef QKV_POOL_PASSTHROUGH
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_news{0};
}  // namespace

// GCC cannot see that these replace the global pair, and warns about free()
// on memory from operator new.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {  // the array and nothrow forms call this one
  if (g_counting.load(std::memory_order_relaxed)) g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::test_seed;

namespace {

struct Allocs {
  int64_t heap = 0, pool_misses = 0, tensor_misses = 0;
};

// Runs `step` twice to warm up (the optimizer makes its state in its first
// step, which takes blocks the second step's graph then needs), then counts
// what steps 3 to 6 allocate.
template <class F>
Allocs allocations_of_steps_3_to_6(F step) {
  step();
  step();
  Allocs a;
  const int64_t pool0 = pool_stats().system_allocs;
  const int64_t tensor0 = allocator_stats().system_allocs;
#ifndef QKV_POOL_PASSTHROUGH
  const int64_t heap0 = g_news.load();
  g_counting = true;
#endif
  for (int i = 0; i < 4; ++i) step();
#ifndef QKV_POOL_PASSTHROUGH
  g_counting = false;
  a.heap = g_news.load() - heap0;
#endif
  a.pool_misses = pool_stats().system_allocs - pool0;
  a.tensor_misses = allocator_stats().system_allocs - tensor0;
  return a;
}

void check_none(const Allocs& a) {
  CHECK(a.heap == 0);
  CHECK(a.pool_misses == 0);
  CHECK(a.tensor_misses == 0);
}

// A batch of 4 sequences, some padded (lengths below len), ids in [1, V).
Tokens batch(int64_t V, int64_t len, std::vector<int64_t> lengths, int64_t seed) {
  Tokens t;
  t.batch = static_cast<int64_t>(lengths.size());
  t.len = len;
  t.lengths = std::move(lengths);
  for (int64_t i = 0; i < t.batch * len; ++i) t.ids.push_back(1 + (i * 7 + seed) % (V - 1));
  return t;
}

}  // namespace

TEST_CASE("a steady-state training step of an encoder-decoder Transformer allocates no heap block" *
          doctest::skip(!kPoolCaches)) {
  // Padding in both sequences, dropout on, label smoothing with ignored
  // targets, gradient clipping and AdamW: every part of a real training step.
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 11;
  c.d_model = 16;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 32;
  c.dropout = 0.1;
  c.seed = test_seed();
  Seq2SeqTransformer model(c);
  model.train();
  const Tokens src = batch(11, 6, {6, 4, 5, 2}, 1), tgt = batch(11, 5, {5, 5, 3, 4}, 2);
  std::vector<int64_t> targets(4 * 5);
  for (size_t i = 0; i < targets.size(); ++i)
    targets[i] = i % 5 == 4 ? -100 : static_cast<int64_t>(1 + i % 10);
  optim::AdamW opt(model.parameters(), 1e-3);

  const Allocs a = allocations_of_steps_3_to_6([&] {
    opt.zero_grad();
    Var loss = cross_entropy(model.forward(src, tgt), targets, -100, 0.1);
    loss.backward();
    optim::clip_grad_norm(opt.params(), 1.0);
    opt.step();
  });
  check_none(a);
}

TEST_CASE(
    "a steady-state GPT training step, and a forward pass without grad, allocate no heap block" *
    doctest::skip(!kPoolCaches)) {
  // V * D = 10240 > 8192: clipping sums the embedding's gradient in chunks.
  GPTConfig c;
  c.vocab = 640;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 8;
  c.seed = test_seed();
  GPT model(c);
  const Tokens ids = batch(640, 8, {8, 6}, 3);
  std::vector<int64_t> targets(2 * 8);
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int64_t>(i * 31 % 640);
  optim::Adam opt(model.parameters());

  SUBCASE("training") {
    check_none(allocations_of_steps_3_to_6([&] {
      opt.zero_grad();
      Var loss = cross_entropy(model.forward(ids), targets);
      // The trainer asks every model for its auxiliary loss each step (none
      // without experts): asking must not allocate either.
      if (Var aux = model.aux_loss(); aux.defined()) loss = loss + aux;
      loss.backward();
      optim::clip_grad_norm(opt.params(), 0.5);
      opt.step();
    }));
  }
  SUBCASE("forward only") {
    NoGradGuard no_grad;
    check_none(allocations_of_steps_3_to_6([&] { cross_entropy(model.forward(ids), targets); }));
  }
}

TEST_CASE(
    "a steady-state training step of the llama-style GPT (RoPE, 1 of 2 key/value heads, "
    "RMSNorm, SwiGLU, no biases) allocates no heap block" *
    doctest::skip(!kPoolCaches)) {
  GPTConfig c;
  c.vocab = 64;
  c.d_model = 16;
  c.heads = 2;
  c.kv_heads = 1;
  c.rope_base = 10000;  // the rotation's table is built once and shared
  c.norm = "rms";
  c.activation = Activation::SwiGLU;
  c.bias = false;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 8;
  c.seed = test_seed();
  GPT model(c);
  const Tokens ids = batch(64, 8, {8, 6}, 3);
  std::vector<int64_t> targets(2 * 8);
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int64_t>(i * 31 % 64);
  optim::Adam opt(model.parameters());
  check_none(allocations_of_steps_3_to_6([&] {
    opt.zero_grad();
    Var loss = cross_entropy(model.forward(ids), targets);
    loss.backward();
    opt.step();
  }));
}
