// Grouped-query attention and rotary positions inside the fused attention op
// against a float64 PyTorch reference composed from plain torch ops
// (tests/fixtures/attention_gqa_rope.safetensors, written by
// make_attention_gqa_rope in tests/pytorch/make_fixtures.py: repeat_interleave
// of each key/value head over its group, Llama's rotation of adjacent pairs).
// D 16, H 4, d_k = d_v = 4, B 2; each case's kv_heads, rope_base, pos0,
// biases and mask are in the fixture's metadata.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "fixture.h"
#include "nn/attention.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_close_to_scale;
using qkv::testing::check_param_grads;
using qkv::testing::ids_of;
using qkv::testing::test_generator;

namespace {

const char* kGqaFixture = "attention_gqa_rope.safetensors";

// The case's output and every gradient from qkv's fused op through the
// module, kernel `kernel`, against the fixture. rope_pos0 is not a module
// field (the KV cache sets positions itself), so the op is called directly
// with the module's weights.
void gqa_rope_case(const TensorFile& f, const std::string& c, AttentionKernel kernel) {
  CAPTURE(c);
  CAPTURE(to_string(kernel));
  const Metadata& meta = f.metadata;
  const int64_t D = std::stoll(meta.at("d_model")), H = std::stoll(meta.at("heads"));
  const int64_t K = std::stoll(meta.at(c + ".kv_heads"));
  Generator g = test_generator();
  MultiHeadAttention mha(D, H, meta.at(c + ".bias") == "true", g, 0, K);
  CHECK(mha.w_k->weight.shape() == Shape{K * mha.d_k, D});
  CHECK(mha.w_v->weight.shape() == Shape{K * mha.d_v, D});
  load_params(mha, f, c + ".");

  const bool cross = f.has(c + ".in.xq");
  Var xq(f.get(c + (cross ? ".in.xq" : ".in.x")).clone(), true);
  Var xkv = cross ? Var(f.get(c + ".in.xkv").clone(), true) : xq;
  AttentionOptions o;
  o.heads = H;
  o.kv_heads = K;
  o.kernel = kernel;
  o.rope_base = std::stod(meta.at(c + ".rope_base"));
  o.rope_pos0 = std::stoll(meta.at(c + ".pos0"));
  o.mask.causal = meta.at(c + ".mask").find("causal") != std::string::npos;
  if (f.has(c + ".in.lens")) {
    const std::vector<int64_t> lens = ids_of(f.get(c + ".in.lens"));
    o.mask.key_lengths.assign(lens.begin(), lens.end());
  }
  Var y = multi_head_attention(xq, xkv, mha.weights(), o).out;
  check_close_to_scale(y.data(), f.get(c + ".out.y"), c + " out.y");
  y.backward(f.get(c + ".in.upstream"));
  check_close_to_scale(xq.grad(), f.get(c + (cross ? ".grad.xq" : ".grad.x")),
                       c + " grad of the query input");
  if (cross) check_close_to_scale(xkv.grad(), f.get(c + ".grad.xkv"), c + " grad.xkv");
  check_param_grads(mha.named_parameters(), f, c + ".grad.", c, 1e-5, /*to_scale=*/true);
}

const std::vector<std::string> kGqaCases = {
    "mqa", "gqa2", "rope", "gqa2_rope", "mqa_rope_nobias", "cross_gqa2"};

}  // namespace

TEST_CASE(
    "standard attention with grouped-query heads (K = 1, 2 of 4) and rotary positions matches a "
    "float64 torch reference (repeat_interleave, Llama's rotation): output and every gradient") {
  TensorFile f = load_fixture(kGqaFixture);
  for (const std::string& c : kGqaCases) gqa_rope_case(f, c, AttentionKernel::Standard);
}

TEST_CASE(
    "memory-efficient attention with grouped-query heads and rotary positions matches the same "
    "torch reference: output and every gradient") {
  TensorFile f = load_fixture(kGqaFixture);
  for (const std::string& c : kGqaCases) gqa_rope_case(f, c, AttentionKernel::MemoryEfficient);
}

TEST_CASE("every case of attention_gqa_rope.safetensors is compared by the tests above") {
  TensorFile f = load_fixture(kGqaFixture);
  std::set<std::string> in_file;
  const std::string& cases = f.metadata.at("cases");
  for (size_t b = 0, e; b <= cases.size(); b = e + 1) {
    e = cases.find(',', b);
    if (e == std::string::npos) e = cases.size();
    in_file.insert(cases.substr(b, e - b));
  }
  CHECK(in_file == std::set<std::string>(kGqaCases.begin(), kGqaCases.end()));
}
