// The Vision Transformer (models/vit.h) as the training program knows it:
// --model vit, a classifier of images. Its entry in the family table
// (trainer/family.h). It reads --format idx (trainer/image_data.cpp): a pair
// is (the image's pixels, {its label}).
#include "checkpoint/vit_codec.h"
#include "models/vit.h"
#include "trainer/family.h"

namespace qkv::train {

namespace {

// ViT's own defaults (Dosovitskiy et al. 2021: Pre-LN, GELU, 7x7 patches for
// 28x28 images; learned positions, its row's) for what the command line left unsaid.
void defaults(TrainConfig& c, const std::function<bool(const char*)>& said) {
  if (!said("pre_ln")) c.pre_ln = true;
  if (!said("activation")) c.activation = "gelu";
  if (!said("patch")) c.patch = 7;
  if (!said("format")) c.format = "idx";
}

void check(const TrainConfig& c, const Require& require) {
  require(!c.tie, "tie", "the vit model's head gives labels: it has no embedding to tie to");
  require(!c.data.empty(), "data",
          "the vit model reads images: --data DIR, a folder of IDX files (--format idx)");
  require(c.patch >= 1, "patch",
          "the vit model cuts its images into P x P patches: must be >= 1, got " +
              std::to_string(c.patch));
}

std::unique_ptr<nn::Model> build(const TrainConfig& c, const DataShape& d) {
  if (d.rows % c.patch || d.cols % c.patch)
    throw Error("--patch " + std::to_string(c.patch) + ": the images are " +
                std::to_string(d.rows) + "x" + std::to_string(d.cols) + ", which " +
                std::to_string(c.patch) + "x" + std::to_string(c.patch) + " patches do not tile");
  if (d.rows != d.cols)
    throw Error("--data: the vit model reads square images; these are " + std::to_string(d.rows) +
                "x" + std::to_string(d.cols));
  nn::ViTConfig v;
  v.image = d.rows;
  v.channels = d.channels;
  v.patch = c.patch;
  v.classes = d.classes;
  shared_arch_fields(c, v, [](const auto& mine, auto& theirs) { theirs = mine; });
  v.layers = c.layers;
  v.activation = activation_of(c);
  v.seed = c.seed;
  attention_to_model(c, v);
  return std::make_unique<nn::ViT>(v);
}

void from_model(TrainConfig& c, const json& mc, const std::string& where) {
  const nn::ViTConfig v = nn::vit_config_from_json(mc, where);
  c.model = "vit";
  shared_arch_fields(c, v, [](auto& mine, const auto& theirs) { mine = theirs; });
  c.layers = v.layers;
  c.tie = false;
  c.patch = v.patch;
  c.activation = nn::activation_name(v.activation);
  attention_from_model(c, v);
}

void shape_from_model(DataShape& d, const json& mc) {
  const nn::ViTConfig v = nn::vit_config_from_json(mc, "model_config");
  d.rows = d.cols = v.image;
  d.channels = v.channels;
  d.classes = v.classes;
}

std::vector<double> label_probabilities(nn::Model& m, const data::Seq& image) {
  const Tensor p = dynamic_cast<nn::ViT&>(m).probabilities({image});  // (1, classes)
  return std::vector<double>(p.data(), p.data() + p.numel());
}

std::vector<Tensor> class_attention(nn::Model& m, const data::Seq& image) {
  return dynamic_cast<nn::ViT&>(m).class_attention(image);
}

}  // namespace

Family vit_family() {
  Family f;
  f.name = "vit";
  f.help = "vit";
  f.settings = {defaults, check};
  f.model.build = build;
  f.model.from_model = from_model;
  f.model.shape_from_model = shape_from_model;
  f.model.positions = "learned";
  f.model.positions_refused =
      "the vit model has a learned position table (one row per patch and the class token)";
  // No tokens (vocab_key null): its files' vocabulary is the special tokens
  // alone. The learned table holds the class token and one row per patch,
  // sized by the images, not the context (fixed_positions null).
  f.reads.images = true;
  // P x P patches and the class token (--patch; 0 is validate()'s error).
  f.reads.image_tokens = [](const TrainConfig& c, int64_t rows, int64_t cols) {
    const int64_t P = std::max<int64_t>(1, c.patch);
    return (rows / P) * (cols / P) + 1;
  };
  f.reads.sequence_tokens = [](int64_t n, int64_t) { return n; };
  f.answers.label_probabilities = label_probabilities;
  f.answers.class_attention = class_attention;
  f.answers.no_beam =
      "the vit model (--model vit) gives an image its label at once; there is no sequence to "
      "search";
  f.reports.explain_what = [](const std::string&, const std::string& answer) {
    return "labels the image \"" + answer + "\", scored with cross-entropy on its label";
  };
  // One sequence of N patches and the class token (the trainer passes the
  // model's positions for a model reading images).
  f.reports.attention_lengths = [](int64_t src, int64_t) {
    return std::pair<int64_t, int64_t>{src, src};
  };
  f.objectives.names = "classify";
  return f;
}

}  // namespace qkv::train
