// The Vision Transformer of "An Image is Worth 16x16 Words" (Dosovitskiy et
// al. 2021), read in the order of its section 3.1:
//
//   z0 = [c; x_1 E; ...; x_N E] + E_pos     patches x_n (C*P*P), E (C*P*P -> D),
//                                             class token c, positions E_pos (N+1, D)
//   z_l = encoder layer l (z_{l-1})           Pre-LN, as ViT (eq. 2-3)
//   y  = head(norm(z_L[0]))                   the final norm's class token (eq. 4)
//
// made of the patch projection (nn/patch_embed.h), the class token
// (nn/class_token.h), the learned position table (nn::add_positions) and the
// encoder stack of models/encoder_decoder.h. docs/vit-backward.md derives
// the gradients of the new parts.
#pragma once
#include <memory>
#include <vector>

#include "models/encoder_decoder.h"
#include "models/model.h"
#include "nn/patch_embed.h"

namespace qkv::nn {

// The norm's kind and the biases are AttentionSettings' norm and bias.
struct ViTConfig : AttentionSettings {
  int64_t image = 28, channels = 1, patch = 7;  // square images (C, image, image), P x P patches
  int64_t classes = 10;
  int64_t d_model = 64, heads = 4, layers = 6, d_ff = 256;
  real dropout = 0;  // on the embeddings and in every layer
  Activation activation = Activation::GELU;
  bool pre_norm = true;  // ViT's; false: Post-LN layers and no final norm
  uint64_t seed = 0;     // initialisation and dropout streams
  LayerOptions layer() const { return layer_options(*this); }
  // N = (image / patch)^2 patches; pixels = C * image * image per image.
  int64_t patches() const { return (image / patch) * (image / patch); }
  int64_t pixels() const { return channels * image * image; }
};

// Parameters: patch.weight (D, C*P*P), patch.bias (D), cls_token (1, 1, D),
// pos_embed (N+1, D), encoder.layers.<i>.*, encoder.norm.* (Pre-LN),
// head.weight (classes, D), head.bias (classes).
class ViT : public Model {
 public:
  explicit ViT(const ViTConfig& cfg);
  // images (B, C, H, W) with H = W = cfg.image, values in [0, 1] -> logits (B, classes)
  Var forward(const Var& images);
  Var forward(const Tensor& images) { return forward(Var(images)); }

  // Pixel sequences (C*H*W values 0..255 each, channel, row, column order)
  // as images (B, C, H, W) scaled by 1/255. Errors name the image and what
  // was expected.
  Tensor images(const std::vector<data::Seq>& pixels) const;
  // Softmax over the classes of each image, (B, classes); no graph, eval mode.
  Tensor probabilities(const std::vector<data::Seq>& pixels);
  // Per layer, the class token's attention over the N+1 positions (class
  // token first, then the patches row-major), (H, N+1); no graph, eval mode.
  std::vector<Tensor> class_attention(const data::Seq& pixels);

  // The Model interface (models/model.h): a pair is an image's pixels
  // (source) and its label (target, one value in [0, classes)).
  const char* kind() const override { return "vit"; }
  int64_t vocab_size() const override { return cfg.classes; }
  int64_t max_positions() const override { return cfg.patches() + 1; }
  int64_t positions_to_answer(int64_t, int64_t) const override { return cfg.patches() + 1; }
  // logits (B, 1, classes), targets the labels (B), nothing ignored
  // (TeacherForced::ignore_index -1: label 0 is a class, not padding).
  TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) override;
  Generator& dropout_generator() override { return dropout_gen; }

  ViTConfig cfg;
  Generator init_gen, dropout_gen;
  std::shared_ptr<PatchEmbedding> patch;
  Parameter cls_token;  // (1, 1, D), zeros as in the paper's code
  Parameter pos_embed;  // (N+1, D), N(0, 0.02^2)
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Encoder> encoder;  // Pre-LN: its final norm is encoder.norm
  std::shared_ptr<Linear> head;
};

}  // namespace qkv::nn
