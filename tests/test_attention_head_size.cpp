// PyTorch parity of attention whose query/key head size d_k is set apart from
// d_model / heads (Table 3 row B; AttentionOptions::d_k), for every heads'
// kernel: W_Q, W_K (H*d_k, D), W_V, W_O (D, D), scores scaled by 1/sqrt(d_k).
// torch.nn.MultiheadAttention has no such head size, so the reference is the
// same maths in plain torch ops, in float64 (tests/pytorch/plain_attention.py,
// checked there against nn.MultiheadAttention at d_k = D/H), written by
// make_attention_head_size in tests/pytorch/make_fixtures.py. D 16, H 2, d_v 8,
// d_k 3 (smaller) and 12 (larger). The loss is sum(out.y * in.upstream).
//
// Tolerance: check_close_to_scale (tests/compare.h), rtol 1e-5 and atol 1e-6
// times the tensor's largest |element| once past 1. These cases' gradients
// reach 10-16 (D 16, up to 24 rows summed), and their float32 rounding, a few
// ulp of that scale, passes check_close's fixed atol 1e-6 at small elements
// (measured: up to 3.9e-6 at an element of 0.01 in a gradient of scale 9.5,
// sparse_dk3's dW_Q, sparse and memory-efficient kernels alike; worst at most
// 0.4 of the scaled bound over every case and kernel). A wrong d_k or scale
// misses by orders of magnitude.
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
using qkv::testing::check_close;
using qkv::testing::check_close_to_scale;
using qkv::testing::check_param_grads;
using qkv::testing::ids_of;
using qkv::testing::test_generator;

namespace {

const char* kHeadSizeFixture = "attention_head_size.safetensors";

// The case's output and every gradient from qkv's MultiHeadAttention running
// `kernel`, against the fixture. Its d_k, biases and mask are the fixture's
// (metadata "<case>.d_k", ".bias", ".mask"; key lengths in "<case>.in.lens").
void head_size_case(const TensorFile& f, const std::string& c, AttentionKernel kernel) {
  CAPTURE(c);
  CAPTURE(to_string(kernel));
  const Metadata& meta = f.metadata;
  const int64_t D = std::stoll(meta.at("d_model")), H = std::stoll(meta.at("heads"));
  const int64_t d_k = std::stoll(meta.at(c + ".d_k"));
  Generator g = test_generator();
  MultiHeadAttention mha(D, H, meta.at(c + ".bias") == "true", g, d_k);
  REQUIRE(mha.d_k != mha.d_v);  // the fixture proves the head sizes apart, not the base
  CHECK(mha.w_q->weight.shape() == Shape{H * d_k, D});
  load_params(mha, f, c + ".");
  mha.kernel = kernel;
  mha.sparse = {std::stoll(meta.at("sparse.window")), std::stoll(meta.at("sparse.global_every"))};
  const bool probs = kernel == AttentionKernel::Standard && f.has(c + ".out.attn");
  mha.keep_attention(probs);

  const bool cross = f.has(c + ".in.xq");
  Var xq(f.get(c + (cross ? ".in.xq" : ".in.x")).clone(), true);
  Var xkv = cross ? Var(f.get(c + ".in.xkv").clone(), true) : xq;
  AttentionMask mask;
  mask.causal = meta.at(c + ".mask").find("causal") != std::string::npos;
  if (f.has(c + ".in.lens")) {
    const std::vector<int64_t> lens = ids_of(f.get(c + ".in.lens"));
    mask.key_lengths.assign(lens.begin(), lens.end());
  }
  Var y = mha.forward(xq, xkv, mask);
  check_close_to_scale(y.data(), f.get(c + ".out.y"), c + " out.y");
  if (probs) check_close(mha.last_attention(), f.get(c + ".out.attn"), c + " out.attn");
  y.backward(f.get(c + ".in.upstream"));
  check_close_to_scale(xq.grad(), f.get(c + (cross ? ".grad.xq" : ".grad.x")),
                       c + " grad of the query input");
  if (cross) check_close_to_scale(xkv.grad(), f.get(c + ".grad.xkv"), c + " grad.xkv");
  check_param_grads(mha.named_parameters(), f, c + ".grad.", c, 1e-5, /*to_scale=*/true);
}

const std::vector<std::string> kSoftmaxCases = {"self_dk3", "self_dk12", "cross_dk3", "cross_dk12",
                                                "self_dk12_nobias"};
const std::vector<std::string> kSparseCases = {"sparse_dk3", "sparse_dk12"};
const std::vector<std::string> kLinearCases = {"linear_dk3", "linear_dk12"};

}  // namespace

TEST_CASE(
    "standard attention with d_k != d_model/heads matches a float64 torch reference: causal + "
    "padded self- and padded cross-attention, d_k 3 and 12, with and without biases: output, "
    "per-head weights, every gradient") {
  TensorFile f = load_fixture(kHeadSizeFixture);
  for (const std::string& c : kSoftmaxCases) head_size_case(f, c, AttentionKernel::Standard);
}

TEST_CASE(
    "memory-efficient attention with d_k != d_model/heads matches the same torch reference: "
    "output and every gradient") {
  TensorFile f = load_fixture(kHeadSizeFixture);
  for (const std::string& c : kSoftmaxCases) head_size_case(f, c, AttentionKernel::MemoryEfficient);
}

TEST_CASE(
    "sparse attention with d_k != d_model/heads matches torch softmax attention with the pattern "
    "as a mask: causal + padded and padded, d_k 3 and 12") {
  TensorFile f = load_fixture(kHeadSizeFixture);
  for (const std::string& c : kSparseCases) head_size_case(f, c, AttentionKernel::Sparse);
}

TEST_CASE(
    "linear attention with d_k != d_model/heads matches torch's phi(Q) (phi(K)^T V) normalised: "
    "causal + padded self- and padded cross-attention, d_k 3 and 12") {
  TensorFile f = load_fixture(kHeadSizeFixture);
  for (const std::string& c : kLinearCases) head_size_case(f, c, AttentionKernel::Linear);
}

TEST_CASE("every case of attention_head_size.safetensors is compared by one of the tests above") {
  TensorFile f = load_fixture(kHeadSizeFixture);
  std::set<std::string> in_file, tested;
  const std::string& cases = f.metadata.at("cases");
  for (size_t b = 0, e; b <= cases.size(); b = e + 1) {
    e = cases.find(',', b);
    if (e == std::string::npos) e = cases.size();
    in_file.insert(cases.substr(b, e - b));
  }
  for (const auto* list : {&kSoftmaxCases, &kSparseCases, &kLinearCases})
    tested.insert(list->begin(), list->end());
  CHECK(in_file == tested);
}
