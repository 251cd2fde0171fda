// The Vision Transformer in float32 (models/vit.h): its patch projection
// against PyTorch's conv2d and the whole model against PyTorch (fixture
// vit.safetensors, made in float64 by tests/pytorch/make_fixtures.py), its
// shapes and parameter names, its errors, its model file, its answers and
// its class-token attention maps. The float64 gradient checks are in
// test_vit_grad.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "autograd/qkv_autograd.h"
#include "checkpoint/vit_codec.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "generation/answer.h"
#include "io/run_program.h"
#include "models/vit.h"
#include "nn/cross_entropy.h"
#include "nn/patch_embed.h"
#include "temp_dir.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::check_close;
using qkv::testing::check_error;
using qkv::testing::has;
using qkv::testing::ids_of;
using qkv::testing::test_generator;

namespace {

ViTConfig small_vit() {
  ViTConfig c;
  c.image = 8;
  c.channels = 2;
  c.patch = 4;  // N = 4, T = 5
  c.classes = 3;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 16;
  return c;
}

// B images of random pixels 0..255, labelled 0, 1, 2, 0, ...
std::vector<data::Pair> random_pairs(const ViTConfig& c, int64_t B, Generator& g) {
  std::vector<data::Pair> pairs(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < c.pixels(); ++i)
      pairs[b].src.push_back(static_cast<int64_t>(g.uniform() * 255.999));
    pairs[b].tgt = {b % c.classes};
  }
  return pairs;
}

}  // namespace

TEST_CASE("patch_embed equals PyTorch's conv2d with kernel = stride = P: output and every grad") {
  TensorFile f = load_fixture("vit.safetensors");
  const Tensor& w = f.get("patch.param.weight");  // (D, C*P*P)
  Var images(f.get("patch.in.images").clone(), true), weight(w.clone(), true),
      bias(f.get("patch.param.bias").clone(), true);
  Var y = patch_embed(images, weight, bias, 3);  // (2, 3, 6, 9) in 3 x 3 patches -> (2, 6, 5)
  check_close(y.data(), f.get("patch.out.y"), "patch out.y");
  y.backward(f.get("patch.in.upstream"));
  check_close(images.grad(), f.get("patch.grad.images"), "patch grad.images");
  qkv::testing::check_close_to_scale(weight.grad(), f.get("patch.grad.weight"), "grad.weight");
  qkv::testing::check_close_to_scale(bias.grad(), f.get("patch.grad.bias"), "grad.bias");
}

TEST_CASE(
    "a tiny ViT matches PyTorch (conv2d patches, class token, positions, Pre-LN): logits, "
    "loss and every gradient") {
  TensorFile f = load_fixture("vit.safetensors");
  const ViTConfig c =
      vit_config_from_json(nlohmann::json::parse(f.metadata.at("model_config")), "vit.safetensors");
  ViT model(c);
  std::set<std::string> ours, theirs;
  for (auto& [n, v] : model.named_parameters()) ours.insert(n);
  for (auto& [n, t] : f.tensors)
    if (n.rfind("model.param.", 0) == 0) theirs.insert(n.substr(12));
  CHECK(ours == theirs);
  load_params(model, f, "model.");
  const Tensor& px = f.get("model.in.pixels");  // (B, C*H*W) as F32
  const std::vector<int64_t> labels = ids_of(f.get("model.in.labels"));
  std::vector<data::Pair> pairs;
  for (int64_t b = 0; b < px.size(0); ++b) {
    data::Pair p;
    for (int64_t i = 0; i < px.size(1); ++i) p.src.push_back(std::lround(px.at({b, i})));
    p.tgt = {labels[b]};
    pairs.push_back(p);
  }
  TeacherForced tf = model.forward_pairs(pairs);
  check_close(tf.logits.data().reshape({px.size(0), c.classes}), f.get("model.out.logits"),
              "logits");
  Var loss = cross_entropy(tf.logits, tf.targets, tf.ignore_index);
  check_close(loss.data().reshape({1}), f.get("model.out.loss"), "loss");
  loss.backward();
  qkv::testing::check_param_grads(model.named_parameters(), f, "model.grad.", "vit");
}

TEST_CASE(
    "ViT shapes: logits (B, classes), forward_pairs (B, 1, classes) with every label scored, "
    "positions N + 1, stable parameter names") {
  Generator g = test_generator();
  ViTConfig c = small_vit();
  ViT m(c);
  CHECK(std::string(m.kind()) == "vit");
  CHECK(m.vocab_size() == 3);
  CHECK(m.max_positions() == 5);
  CHECK(m.positions_to_answer(128, 1) == 5);
  Var y = m.forward(Tensor::uniform({3, 2, 8, 8}, 0, 1, g));
  CHECK(y.shape() == Shape{3, 3});
  TeacherForced tf = m.forward_pairs(random_pairs(c, 4, g));
  CHECK(tf.logits.shape() == Shape{4, 1, 3});
  CHECK(tf.targets == std::vector<int64_t>{0, 1, 2, 0});
  CHECK(tf.target_tokens == 4);
  CHECK(tf.ignore_index == -1);  // label 0 is a class: nothing ignored
  std::vector<std::string> names;
  for (auto& [n, v] : m.named_parameters()) names.push_back(n);
  for (const char* n :
       {"patch.weight", "patch.bias", "cls_token", "pos_embed",
        "encoder.layers.0.self_attn.w_q.weight", "encoder.layers.1.ffn.linear2.bias",
        "encoder.norm.weight", "head.weight", "head.bias"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  CHECK(m.patch->weight.shape() == Shape{8, 32});  // (D, C*P*P)
  CHECK(m.cls_token.shape() == Shape{1, 1, 8});
  CHECK(m.pos_embed.shape() == Shape{5, 8});
  // The patch weight decays as a Linear's; the class token and positions do not.
  const std::vector<bool> decay = weight_decay_mask(m);
  const std::vector<Var> params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].same_as(m.patch->weight)) CHECK(decay[i]);
    if (params[i].same_as(m.cls_token) || params[i].same_as(m.pos_embed)) CHECK_FALSE(decay[i]);
  }
}

TEST_CASE("patch_embed and ViT refuse bad shapes and pixels, naming the op and the shapes") {
  Var w(Tensor::zeros({4, 8})), b(Tensor::zeros({4}));
  check_error(
      [&] {
        patch_embed(Var(Tensor::zeros({2, 8, 8})), w, b, 2);
      },
      {"patch_embed", "(2,8,8)", "(B, C, H, W)"});
  check_error(
      [&] {
        patch_embed(Var(Tensor::zeros({1, 2, 6, 5})), w, b, 2);
      },
      {"patch_embed", "(1,2,6,5)", "W 5", "multiples of P"});
  check_error(
      [&] {
        patch_embed(Var(Tensor::zeros({1, 3, 4, 4})), w, b, 2);
      },
      {"patch_embed", "(1,3,4,4)", "(4,8)", "C*P*P = 12"});
  check_error(
      [&] {
        patch_embed(Var(Tensor::zeros({1, 2, 4, 4})), w, Var(Tensor::zeros({5})), 2);
      },
      {"patch_embed", "bias (5)"});
  ViTConfig c = small_vit();
  c.patch = 3;
  check_error([&] { ViT bad(c); }, {"ViT", "image 8", "patch 3"});
  ViT m(small_vit());
  check_error(
      [&] {
        m.forward(Tensor::zeros({1, 3, 8, 8}));
      },
      {"ViT::forward", "(1,3,8,8)", "(B, 2, 8, 8)"});
  Generator g = test_generator();
  std::vector<data::Pair> pairs = random_pairs(small_vit(), 2, g);
  pairs[1].src.pop_back();
  check_error([&] { m.forward_pairs(pairs); }, {"ViT", "image 1", "127 pixel values", "128"});
  pairs = random_pairs(small_vit(), 2, g);
  pairs[0].src[5] = 256;
  check_error([&] { m.forward_pairs(pairs); }, {"ViT", "image 0", "pixel 5 is 256", "0..255"});
  pairs[0].src[5] = -1;
  check_error([&] { m.forward_pairs(pairs); }, {"pixel 5 is -1"});
  pairs = random_pairs(small_vit(), 2, g);
  pairs[1].tgt = {3};
  check_error([&] { m.forward_pairs(pairs); }, {"ViT", "image 1", "label 3", "0..2"});
  pairs[1].tgt = {1, 2};
  check_error([&] { m.forward_pairs(pairs); }, {"ViT", "2 values", "one label"});
}

TEST_CASE("a ViT saved with save_model loads from the file alone and gives the same logits") {
  Generator g = test_generator();
  ViTConfig c = small_vit();
  c.norm = "rms";
  c.bias = false;
  c.seed = 5;
  ViT m(c);
  for (Var p : m.parameters()) p.data().copy_(Tensor::normal(p.shape(), 0, 0.3, g));
  m.eval();
  const Tensor x = Tensor::uniform({2, 2, 8, 8}, 0, 1, g);
  const Tensor want = m.forward(x).data();
  testing::TempDir dir;
  const std::string path = dir.file("vit.safetensors");
  save_model(m, path);
  CHECK(model_kind(path) == "vit");
  std::unique_ptr<Model> any = load_model(path);
  CHECK(std::string(any->kind()) == "vit");
  std::unique_ptr<ViT> v = load_vit(path);
  CHECK(v->cfg.image == 8);
  CHECK(v->cfg.channels == 2);
  CHECK(v->cfg.patch == 4);
  CHECK(v->cfg.classes == 3);
  CHECK(v->cfg.norm == "rms");
  CHECK_FALSE(v->cfg.bias);
  CHECK(v->cfg.seed == 5);
  v->eval();
  CHECK(max_abs_diff(v->forward(x).data(), want) == 0);
  // The file's keys are checked against its tensors before anything is built.
  nlohmann::json j = config_to_json(c);
  j["patch"] = 2;  // (8/2)^2 + 1 = 17 positions against a table of 5
  check_error(
      [&] {
        vit_config_from_json(j, "x");
        check_config_fits(read_safetensors(path), "", vit_config_from_json(j, "x"));
      },
      {"'channels' 2 and 'patch' 2", "patch.weight"});
  j = config_to_json(c);
  j.erase("classes");
  check_error([&] { vit_config_from_json(j, "f: metadata 'model_config'"); },
              {"f: metadata 'model_config'", "missing key 'classes'"});
}

TEST_CASE("ViT answers each image with its likeliest class; probabilities rows sum to 1") {
  Generator g = test_generator();
  ViTConfig c = small_vit();
  ViT m(c);
  for (Var p : m.parameters()) p.data().copy_(Tensor::normal(p.shape(), 0, 0.5, g));
  std::vector<data::Seq> images;
  for (const data::Pair& p : random_pairs(c, 5, g)) images.push_back(p.src);
  const Tensor p = m.probabilities(images);
  REQUIRE(p.shape() == Shape{5, 3});
  CHECK(m.is_training());  // left in the mode it was in
  const std::vector<data::Seq> out = answer(m, images);
  REQUIRE(out.size() == 5);
  for (int64_t b = 0; b < 5; ++b) {
    double sum = 0;
    int64_t best = 0;
    for (int64_t k = 0; k < 3; ++k) {
      sum += p.at({b, k});
      if (p.at({b, k}) > p.at({b, best})) best = k;
    }
    CHECK(std::fabs(sum - 1) < 1e-5);
    CHECK(out[b] == data::Seq{best});
  }
}

TEST_CASE("class_attention: per layer the class token's attention (H, N + 1), each row sums to 1") {
  Generator g = test_generator();
  ViTConfig c = small_vit();
  c.layers = 3;
  c.attention = AttentionKernel::MemoryEfficient;  // the maps run the standard kernel anyway
  ViT m(c);
  for (Var p : m.parameters()) p.data().copy_(Tensor::normal(p.shape(), 0, 0.5, g));
  const data::Seq image = random_pairs(c, 1, g)[0].src;
  const std::vector<Tensor> maps = m.class_attention(image);
  REQUIRE(maps.size() == 3);
  bool differ = false;
  for (const Tensor& a : maps) {
    REQUIRE(a.shape() == Shape{2, 5});
    for (int64_t h = 0; h < 2; ++h) {
      double sum = 0;
      for (int64_t j = 0; j < 5; ++j) {
        CHECK(a.at({h, j}) >= 0);
        sum += a.at({h, j});
      }
      CHECK(std::fabs(sum - 1) < 1e-5);
    }
    differ = differ || max_abs_diff(a, maps[0]) > 1e-6;
  }
  CHECK(differ);  // each layer's own map
  CHECK(m.is_training());
  check_error([&] { m.class_attention(data::Seq(3, 0)); }, {"ViT", "3 pixel values"});
}

TEST_CASE("the class token and row 0 of the position table always get the same gradient") {
  // Both are added into position 0 of every sequence: dE_pos[0] = dc
  // (docs/vit-backward.md); the other rows get their own.
  Generator g = test_generator();
  ViTConfig c = small_vit();
  c.dropout = real(0.2);  // in training: dropout acts after the sum, so it changes nothing here
  ViT m(c);
  for (Var p : m.parameters()) p.data().copy_(Tensor::normal(p.shape(), 0, 0.5, g));
  TeacherForced tf = m.forward_pairs(random_pairs(c, 4, g));
  cross_entropy(tf.logits, tf.targets, tf.ignore_index).backward();
  const Tensor& dc = m.cls_token.grad();  // (1, 1, D)
  const Tensor& dp = m.pos_embed.grad();  // (N+1, D)
  double row0 = 0, row1 = 0, size = 0;
  for (int64_t k = 0; k < c.d_model; ++k) {
    row0 = std::max(row0, double(std::fabs(dp.at({0, k}) - dc.data()[k])));
    row1 = std::max(row1, double(std::fabs(dp.at({1, k}) - dc.data()[k])));
    size = std::max(size, double(std::fabs(dc.data()[k])));
  }
  CHECK(size > 1e-4);
  CHECK(row0 <= 1e-6 * size);
  CHECK(row1 > 1e-3 * size);
}

TEST_CASE(
    "tools/qkv_checkpoint.py reads a ViT model file and refuses a patch that does not "
    "divide the image") {
  const std::string python = find_program("python3");
  if (python.empty()) {
    MESSAGE("skipped: no python3");
    return;
  }
  testing::TempDir dir;
  const std::string path = dir.file("vit.safetensors"), bad = dir.file("bad.safetensors");
  save_model(ViT(small_vit()), path);
  const std::string tool = repo_root() + "/tools/qkv_checkpoint.py";
  ProgramRun r = run_program({python, tool, path});
  INFO("output: " << r.out << r.err);
  CHECK(r.status == 0);
  CHECK(has(r.out, "model_kind: vit"));
  CHECK(has(r.out, "image: 2 x 8 x 8 in 4 x 4 patches (4 + the class token), 3 classes"));
  CHECK(has(r.out, "pos_embed"));
  // The same file with model_config's patch 3, written by the tool itself.
  const std::string rewrite =
      "import json, sys\n"
      "sys.path.insert(0, sys.argv[1])\n"
      "import qkv_checkpoint as qc\n"
      "t, md = qc.read(sys.argv[2])\n"
      "c = json.loads(md['model_config']); c['patch'] = 3; md['model_config'] = json.dumps(c)\n"
      "qc.write(sys.argv[3], t, md)\n";
  r = run_program({python, "-c", rewrite, repo_root() + "/tools", path, bad});
  REQUIRE(r.status == 0);
  r = run_program({python, tool, bad});
  CHECK(r.status == 1);
  CHECK(has(r.err, "key 'image' is 8, not a multiple of 'patch' 3"));
  check_error([&] { load_model(bad); }, {"bad.safetensors", "'image' is 8", "'patch' 3"});
}

TEST_CASE(
    "a ViT file whose model_config disagrees with its tensors is refused by key before "
    "anything is built") {
  testing::TempDir dir;
  const std::string path = dir.file("vit.safetensors"), bad = dir.file("bad.safetensors");
  save_model(ViT(small_vit()), path);
  const TensorFile f = read_safetensors(path);
  auto refused = [&](const char* key, nlohmann::json value,
                     std::initializer_list<const char*> parts) {
    CAPTURE(key);
    nlohmann::json c = nlohmann::json::parse(f.metadata.at("model_config"));
    c[key] = value;
    Metadata md = f.metadata;
    md["model_config"] = c.dump();
    write_safetensors(bad, NamedTensors(f.tensors.begin(), f.tensors.end()), md);
    check_error([&] { load_model(bad); }, parts);
  };
  // (8 / 1)^2 + 1 positions against a table of 5; a side of 2^40 pixels allocates nothing.
  refused("patch", 1, {"bad.safetensors", "'channels' 2 and 'patch' 1", "'patch.weight'"});
  refused("image", int64_t(1) << 40, {"'image' 1099511627776 and 'patch' 4", "'pos_embed'"});
  refused("channels", 3, {"'channels' 3 and 'patch' 4", "(8,32)"});
  refused("classes", 7, {"'classes' is 7", "'head.weight'"});
  refused("layers", 5, {"'layers' is 5", "tensors for 2"});
  refused("d_model", 16, {"'d_model' is 16", "'patch.weight'"});
  refused("image", 0, {"'image' is 0", "at least 1"});
}
