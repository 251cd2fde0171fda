// T5's relative position bias inside the fused attention op against a
// float64 PyTorch reference composed from plain torch ops
// (tests/fixtures/attention_relative.safetensors, written by
// make_attention_relative in tests/pytorch/make_fixtures.py: Hugging Face's
// T5 bucket function, the table gathered into the scores). D 16, H 4, d_k =
// d_v = 4, B 2; each case's key/value heads, buckets, max distance, query
// offset and mask are in the fixture's metadata. Also the buckets of rel in
// [-300, 300] for T5's defaults, both kinds, against the reference's.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "fixture.h"
#include "nn/attention.h"
#include "nn/relative_bias.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_close_to_scale;
using qkv::testing::check_param_grads;
using qkv::testing::ids_of;
using qkv::testing::test_generator;

namespace {

const char* kRelativeFixture = "attention_relative.safetensors";

void relative_case(const TensorFile& f, const std::string& c, AttentionKernel kernel) {
  CAPTURE(c);
  CAPTURE(to_string(kernel));
  const Metadata& meta = f.metadata;
  const int64_t D = std::stoll(meta.at("d_model")), H = std::stoll(meta.at("heads"));
  const int64_t K = std::stoll(meta.at(c + ".kv_heads"));
  Generator g = test_generator();
  MultiHeadAttention mha(D, H, true, g, 0, K);
  load_params(mha, f, c + ".");
  Var table(f.get(c + ".param.rel_bias").clone(), true);  // (H, buckets)

  const bool cross = f.has(c + ".in.xq");
  Var xq(f.get(c + (cross ? ".in.xq" : ".in.x")).clone(), true);
  Var xkv = cross ? Var(f.get(c + ".in.xkv").clone(), true) : xq;
  AttentionOptions o;
  o.heads = H;
  o.kv_heads = K;
  o.kernel = kernel;
  o.rel_bias = table;
  o.rel_bidirectional = meta.at(c + ".bidirectional") == "true";
  o.rel_max_distance = std::stoll(meta.at(c + ".max_distance"));
  o.rel_pos0 = std::stoll(meta.at(c + ".pos0"));
  CHECK(table.size(1) == std::stoll(meta.at(c + ".buckets")));
  o.mask.causal = meta.at(c + ".causal") == "true";
  const std::vector<int64_t> lens = ids_of(f.get(c + ".in.lens"));
  o.mask.key_lengths.assign(lens.begin(), lens.end());
  Var y = multi_head_attention(xq, xkv, mha.weights(), o).out;
  check_close_to_scale(y.data(), f.get(c + ".out.y"), c + " out.y");
  y.backward(f.get(c + ".in.upstream"));
  check_close_to_scale(xq.grad(), f.get(c + (cross ? ".grad.xq" : ".grad.x")),
                       c + " grad of the query input");
  if (cross) check_close_to_scale(xkv.grad(), f.get(c + ".grad.xkv"), c + " grad.xkv");
  check_close_to_scale(table.grad(), f.get(c + ".grad.rel_bias"), c + " grad.rel_bias");
  check_param_grads(mha.named_parameters(), f, c + ".grad.", c, 1e-5, /*to_scale=*/true);
}

const std::vector<std::string> kRelativeCases = {"encoder", "decoder_gqa2", "t5_defaults",
                                                 "offset"};

}  // namespace

TEST_CASE(
    "relative buckets of rel in [-300, 300] (32 buckets, max distance 128) equal Hugging Face's "
    "T5 bucket function in the torch reference, bidirectional and causal") {
  TensorFile f = load_fixture(kRelativeFixture);
  const std::vector<int64_t> rel = ids_of(f.get("buckets.in.rel"));
  const std::vector<int64_t> bi = ids_of(f.get("buckets.out.bidirectional"));
  const std::vector<int64_t> causal = ids_of(f.get("buckets.out.causal"));
  REQUIRE(rel.size() == 601);
  for (size_t i = 0; i < rel.size(); ++i) {
    CAPTURE(rel[i]);
    CHECK(relative_position_bucket(rel[i], true, 32, 128) == bi[i]);
    CHECK(relative_position_bucket(rel[i], false, 32, 128) == causal[i]);
  }
}

TEST_CASE(
    "standard attention with T5's relative bias matches a float64 torch reference: output and "
    "every gradient, the table's included") {
  TensorFile f = load_fixture(kRelativeFixture);
  for (const std::string& c : kRelativeCases) relative_case(f, c, AttentionKernel::Standard);
}

TEST_CASE(
    "memory-efficient attention with T5's relative bias matches the same torch reference: output "
    "and every gradient") {
  TensorFile f = load_fixture(kRelativeFixture);
  for (const std::string& c : kRelativeCases) relative_case(f, c, AttentionKernel::MemoryEfficient);
}

TEST_CASE("every case of attention_relative.safetensors is compared by the tests above") {
  TensorFile f = load_fixture(kRelativeFixture);
  std::set<std::string> in_file;
  const std::string& cases = f.metadata.at("cases");
  for (size_t b = 0, e; b <= cases.size(); b = e + 1) {
    e = cases.find(',', b);
    if (e == std::string::npos) e = cases.size();
    in_file.insert(cases.substr(b, e - b));
  }
  CHECK(in_file == std::set<std::string>(kRelativeCases.begin(), kRelativeCases.end()));
}
