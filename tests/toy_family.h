// A model family defined outside the library, as a user (or the next issue)
// adds one: a bag-of-embeddings token labeller, "bag", each token's label
// read from its own embedding through one linear map, logits (B, S, V) =
// head(embed(src)). Everything the library's layers need of it is here, in
// the family's own file, registered by one call per layer:
//
//   models/      BagModel derives from nn::Model (kind, forward_pairs, ...)
//   checkpoint/  its config codec: model_config {"vocab", "d_model", "seed"}
//   generation/  its answerer: the likeliest label of every source token
//   trainer/     its Family entry: building it from the run's settings, the
//                settings back from a file, its sequence length and report
//
// tests/test_toy_family.cpp trains it through the trainer, saves and loads it.
#pragma once
#include <algorithm>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/model_file.h"
#include "generation/answer.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "trainer/family.h"

namespace toy {

using namespace qkv;

struct BagConfig {
  int64_t vocab = 16, d_model = 16;
  uint64_t seed = 0;
};

class BagModel : public nn::Model {
 public:
  explicit BagModel(const BagConfig& c) : cfg(c), init_gen(c.seed), dropout_gen(c.seed + 1) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(c.vocab, c.d_model, init_gen));
    head =
        register_module("head", std::make_shared<nn::Linear>(c.d_model, c.vocab, true, init_gen));
  }
  // (B, S) -> (B, S, V)
  Var forward(const nn::Tokens& t) {
    return head->forward(embed->forward(t.ids, {t.batch, t.len}));
  }

  const char* kind() const override { return "bag"; }
  int64_t vocab_size() const override { return cfg.vocab; }
  int64_t max_positions() const override { return 0; }
  int64_t positions_to_answer(int64_t n, int64_t) const override { return n; }
  nn::TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) override {
    const int64_t B = static_cast<int64_t>(pairs.size());
    int64_t S = 0;
    for (const data::Pair& p : pairs) S = std::max<int64_t>(S, static_cast<int64_t>(p.src.size()));
    nn::Tokens src{std::vector<int64_t>(B * S, data::kPad), B, S, std::vector<int64_t>(B)};
    nn::TeacherForced out;
    out.targets.assign(B * S, data::kPad);
    for (int64_t i = 0; i < B; ++i) {
      const data::Pair& p = pairs[i];
      std::copy(p.src.begin(), p.src.end(), src.ids.begin() + i * S);
      std::copy(p.tgt.begin(), p.tgt.end(), out.targets.begin() + i * S);
      src.lengths[i] = static_cast<int64_t>(p.src.size());
      out.target_tokens += static_cast<int64_t>(p.tgt.size());
    }
    out.logits = forward(src);
    return out;
  }
  Generator& dropout_generator() override { return dropout_gen; }

  BagConfig cfg;
  Generator init_gen, dropout_gen;
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::Linear> head;
};

// checkpoint/: the config codec.
inline const nn::ModelCodec kBagCodec = {
    "bag",
    [](const nn::Model& m) {
      const BagConfig& c = dynamic_cast<const BagModel&>(m).cfg;
      return nlohmann::json{{"vocab", c.vocab}, {"d_model", c.d_model}, {"seed", c.seed}};
    },
    [](const TensorFile& f, const std::string& prefix, const nlohmann::json& j,
       const std::string& where, bool build) -> std::unique_ptr<nn::Model> {
      BagConfig c;
      nn::read_json_field(j, "vocab", c.vocab, where);
      nn::read_json_field(j, "d_model", c.d_model, where);
      nn::read_json_field(j, "seed", c.seed, where);
      if (c.vocab < 1 || c.vocab > 100000 || c.d_model < 1 || c.d_model > 4096)
        throw Error(where + ": vocab and d_model must be in [1, 100000] and [1, 4096]");
      if (!build) return nullptr;
      auto m = std::make_unique<BagModel>(c);
      nn::load_state_dict(*m, f, prefix);
      return m;
    }};

// generation/: the answerer.
inline const nn::Answerer kBagAnswerer = {
    "bag", false,
    [](nn::Model& model, const std::vector<data::Seq>& sources, const nn::AnswerOptions&) {
      auto& m = dynamic_cast<BagModel&>(model);
      const nn::Tokens src = data::right_padded(sources);
      const Tensor logits = m.forward(src).data();  // (B, S, V)
      std::vector<data::Seq> out(sources.size());
      for (int64_t b = 0; b < src.batch; ++b)
        for (int64_t i = 0; i < src.lengths[b]; ++i) {
          const real* row = logits.data() + (b * src.len + i) * m.cfg.vocab;
          out[b].push_back(std::max_element(row, row + m.cfg.vocab) - row);
        }
      return out;
    }};

// trainer/: the family's row, filled by name (members left out keep their
// defaults: no sampling, no classifier, no objective but its own).
inline train::Family bag_family() {
  train::Family f;
  f.name = "bag";
  f.help = "bag (a toy)";
  f.settings.check = [](const train::TrainConfig& c, const train::Require& require) {
    require(!c.tie, "tie", "the bag model has nothing to tie");
  };
  f.model.build = [](const train::TrainConfig& c,
                     const train::DataShape& d) -> std::unique_ptr<nn::Model> {
    return std::make_unique<BagModel>(BagConfig{d.vocab, c.d_model, c.seed});
  };
  f.model.from_model = [](train::TrainConfig& c, const nlohmann::json& mc,
                          const std::string& where) {
    c.model = "bag";
    nn::read_json_field(mc, "d_model", c.d_model, where);
  };
  f.model.vocab_key = "vocab";
  f.reads.labels_tokens = true;
  f.reads.sequence_tokens = [](int64_t n, int64_t) { return n; };
  f.answers.no_beam = "the bag model labels every token at once";
  f.reports.explain_what = [](const std::string& src, const std::string& answer) {
    return "labels \"" + src + "\" with \"" + answer + "\"";
  };
  f.reports.stacks = 0.1;
  return f;
}

// Registers the family with every layer while it lives (a test's scope), so
// that other tests see the built-in families only.
struct BagFamilyRegistered {
  BagFamilyRegistered() {
    nn::register_model_codec(kBagCodec);
    nn::register_answerer(kBagAnswerer);
    train::register_family(bag_family());
  }
  ~BagFamilyRegistered() {
    train::unregister_family("bag");
    nn::unregister_answerer("bag");
    nn::unregister_model_codec("bag");
  }
};

}  // namespace toy
