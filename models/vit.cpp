#include "models/vit.h"

#include <string>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/class_token.h"
#include "nn/init.h"
#include "nn/positional.h"

namespace qkv::nn {

namespace {

std::string geometry(const ViTConfig& c) {
  return "(" + std::to_string(c.channels) + ", " + std::to_string(c.image) + ", " +
         std::to_string(c.image) + ")";
}

}  // namespace

ViT::ViT(const ViTConfig& c) : cfg(c), init_gen(c.seed), dropout_gen(dropout_seed(c.seed)) {
  if (c.image < 1 || c.channels < 1 || c.patch < 1 || c.classes < 1)
    throw Error("ViT: image, channels, patch and classes must be positive, got " +
                std::to_string(c.image) + ", " + std::to_string(c.channels) + ", " +
                std::to_string(c.patch) + ", " + std::to_string(c.classes));
  if (c.image % c.patch != 0)
    throw Error("ViT: image " + std::to_string(c.image) + " is not a multiple of patch " +
                std::to_string(c.patch));
  if (c.relative())
    throw Error("ViT: rel_buckets " + std::to_string(c.rel_buckets) +
                ": relative positions are 1-D distances and a ViT's patches a 2-D grid with a "
                "class token (leave rel_buckets 0)");
  if (c.rope_base != 0)
    throw Error(
        "ViT: rope_base is set, but rotary positions are a GPT's: a ViT's patches "
        "read a learned position table (leave rope_base 0)");
  const LayerOptions o = c.layer();
  const int64_t D = c.d_model, N = c.patches();
  // x_n E + b: one Linear (C*P*P -> D) on the patches
  patch = register_module("patch",
                          std::make_shared<PatchEmbedding>(c.channels, c.patch, D, true, init_gen));
  cls_token = register_parameter("cls_token", Tensor::zeros({1, 1, D}));
  pos_embed = register_parameter("pos_embed", normal_init({N + 1, D}, real(0.02), init_gen));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  encoder =
      register_module("encoder", std::make_shared<Encoder>(c.layers, o, init_gen, dropout_gen));
  head = register_module("head", std::make_shared<Linear>(D, c.classes, true, init_gen));
}

Var ViT::forward(const Var& x) {
  ModuleScope scope(this);
  if (x.dim() != 4 || x.size(1) != cfg.channels || x.size(2) != cfg.image || x.size(3) != cfg.image)
    throw Error("ViT::forward: images " + to_string(x.shape()) + ": expected (B, " +
                std::to_string(cfg.channels) + ", " + std::to_string(cfg.image) + ", " +
                std::to_string(cfg.image) + ")");
  Var z = patch->forward(x);                           // (B, C, H, W) -> (B, N, D)
  z = prepend_class_token(z, cls_token);               // (B, N+1, D), z[:, 0] = c
  z = drop->forward(add_positions(z, pos_embed));      // + E_pos (N+1, D)
  Var h = encoder->forward(z, AttentionMask::none());  // (B, N+1, D), every position sees all
  return head->forward(class_token_output(h));         // (B, D) -> (B, classes)
}

Tensor ViT::images(const std::vector<data::Seq>& pixels) const {
  const int64_t B = static_cast<int64_t>(pixels.size()), n = cfg.pixels();
  Tensor out = Tensor::empty({B, cfg.channels, cfg.image, cfg.image});
  real* p = out.data();
  for (int64_t b = 0; b < B; ++b) {
    const data::Seq& s = pixels[b];
    if (static_cast<int64_t>(s.size()) != n)
      throw Error("ViT: image " + std::to_string(b) + " holds " + std::to_string(s.size()) +
                  " pixel values, expected C*H*W = " + std::to_string(n) + " for images " +
                  geometry(cfg));
    for (int64_t i = 0; i < n; ++i) {
      if (s[i] < 0 || s[i] > 255)
        throw Error("ViT: image " + std::to_string(b) + ", pixel " + std::to_string(i) + " is " +
                    std::to_string(s[i]) + ": expected a value in 0..255");
      p[b * n + i] = static_cast<real>(s[i]) / real(255);
    }
  }
  return out;
}

// Source: the pixels as an image; target: its label.
TeacherForced ViT::forward_pairs(const std::vector<data::Pair>& pairs) {
  const int64_t B = static_cast<int64_t>(pairs.size());
  std::vector<data::Seq> pixels(B);
  TeacherForced out;
  out.targets.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const data::Seq& t = pairs[b].tgt;
    if (t.size() != 1 || t[0] < 0 || t[0] >= cfg.classes)
      throw Error(
          "ViT: image " + std::to_string(b) + " has target " +
          (t.size() == 1 ? "label " + std::to_string(t[0]) : std::to_string(t.size()) + " values") +
          ": expected one label in 0.." + std::to_string(cfg.classes - 1));
    out.targets[b] = t[0];
    pixels[b] = pairs[b].src;
  }
  out.logits = reshape(forward(images(pixels)), {B, 1, cfg.classes});  // (B, 1, classes)
  out.target_tokens = B;
  out.ignore_index = -1;  // every label is a class, 0 included
  return out;
}

Tensor ViT::probabilities(const std::vector<data::Seq>& pixels) {
  NoGradGuard no_grad;
  EvalModeGuard eval_mode(*this);
  return softmax(forward(images(pixels))).data();  // (B, classes)
}

std::vector<Tensor> ViT::class_attention(const data::Seq& pixels) {
  NoGradGuard no_grad;
  EvalModeGuard eval_mode(*this);     // the maps the model answers with: no dropout
  const Tensor x = images({pixels});  // checked before any layer keeps anything
  // Keeping the probabilities runs the standard kernel (nn/attention.h).
  struct Keep {
    Encoder& e;
    explicit Keep(Encoder& e) : e(e) { set(true); }
    ~Keep() { set(false); }
    void set(bool on) {
      for (auto& layer : e.layers) layer->self_attn->keep_attention(on);
    }
  } keep(*encoder);
  forward(x);
  const int64_t H = cfg.heads, T = cfg.patches() + 1;
  std::vector<Tensor> maps;
  for (auto& layer : encoder->layers) {
    const Tensor& P = layer->self_attn->last_attention();  // (1, H, T, T)
    Tensor row = Tensor::empty({H, T});                    // P[0, h, 0, :]
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < T; ++j) row.data()[h * T + j] = P.data()[h * T * T + j];
    maps.push_back(row);
  }
  return maps;
}

}  // namespace qkv::nn
