// The encoder-decoder of the paper (models/encoder_decoder.h) as the training
// program knows it: --model seq2seq. Its entry in the family table (trainer/family.h).
//
// It learns from source -> target pairs (--objective pairs, the default), or
// pre-trains on a text corpus by T5's span corruption (--objective span,
// Raffel et al. 2020): each window of --context tokens becomes a source with
// one sentinel per hidden span and a target listing the sentinels with their
// spans (data/span.h). Fine-tuning on pairs then starts from that file with
// --init-from.
#include <algorithm>

#include "data/span.h"
#include "models/encoder_decoder.h"
#include "trainer/data_sources.h"
#include "trainer/family.h"
#include "trainer/positions.h"

namespace qkv::train {

namespace {

// T5's vocabulary holds 100 sentinels, <extra_id_0> .. <extra_id_99>; a
// window of n tokens needs data::sentinels_needed(n) of them (about n / 20 + 1).
constexpr int64_t kSentinels = 100;

void defaults(TrainConfig& c, const std::function<bool(const char*)>& said) {
  // --objective span reads a corpus: --format text unless the flags say
  // otherwise, in windows of 64 tokens (the gpt's and bert's default).
  if (c.objective == "span" && !said("format")) c.format = "text";
  if (c.objective == "span" && !said("context") && c.context == 0) c.context = 64;
}

std::vector<std::string> objective_tokens(const TrainConfig& c) {
  std::vector<std::string> out;
  if (c.objective == "span")
    for (int64_t i = 0; i < kSentinels; ++i) out.push_back(data::sentinel_name(i));
  return out;
}

// Windows of text (B, T) as span-corrupted pairs: source "w1 <X> w5 .. wT",
// target "<X> w2 w3 w4 <Y>" (data/span.h). A held-out window shorter than T
// (the text's last) is corrupted as it is.
std::vector<data::Pair> text_pairs(const TrainConfig&, const DataShape&, const data::LMBatch& b,
                                   const data::Vocab& v, Generator& g) {
  const int64_t B = b.ids.batch, T = b.ids.len;
  const std::vector<int64_t> lengths = b.ids.full_lengths();
  data::SpanOptions o;
  const int64_t need = std::min(data::sentinels_needed(std::max<int64_t>(T, 2), o), kSentinels);
  for (int64_t i = 0; i < need; ++i) {
    const int64_t id = v.find(data::sentinel_name(i));
    if (id < 0)
      throw Error("--objective span: the vocabulary has no " + data::sentinel_name(i) +
                  " token (a tokenizer taken from a file of another objective?): let this run "
                  "learn its own");
    o.sentinels.push_back(id);
  }
  std::vector<data::Pair> out;
  out.reserve(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    const auto row = b.ids.ids.begin() + i * T;
    out.push_back(data::corrupt_spans(data::Seq(row, row + lengths[static_cast<size_t>(i)]), o, g));
  }
  return out;
}

std::unique_ptr<nn::Model> build(const TrainConfig& c, const DataShape& d) {
  const int64_t V = d.vocab;
  nn::TransformerConfig m;
  m.src_vocab = m.tgt_vocab = V;
  shared_arch_fields(c, m, [](const auto& mine, auto& theirs) { theirs = mine; });
  m.encoder_layers = m.decoder_layers = c.layers;
  m.activation = activation_of(c);
  m.learned_positions = position_kind(c.positions, "--positions").table == PositionTable::Learned;
  m.max_positions = m.learned_positions ? c.context : 512;  // sinusoidal tables grow on demand
  m.seed = c.seed;
  attention_to_model(c, m);
  return std::make_unique<nn::Seq2SeqTransformer>(m);
}

void from_model(TrainConfig& c, const json& mc, const std::string& where) {
  const nn::TransformerConfig m = nn::transformer_config_from_json(mc, where);
  if (m.encoder_layers != m.decoder_layers)
    throw Error(where + ": encoder_layers " + std::to_string(m.encoder_layers) +
                " != decoder_layers " + std::to_string(m.decoder_layers) +
                " (the trainer's --layers sets both)");
  if (m.src_vocab != m.tgt_vocab)
    throw Error(where + ": src_vocab " + std::to_string(m.src_vocab) + " != tgt_vocab " +
                std::to_string(m.tgt_vocab) + " (the trainer's models share one vocabulary)");
  c.model = "seq2seq";
  shared_arch_fields(c, m, [](auto& mine, const auto& theirs) { mine = theirs; });
  c.layers = m.encoder_layers;
  c.positions = m.learned_positions ? "learned" : "sinusoidal";
  c.activation = nn::activation_name(m.activation);
  attention_from_model(c, m);
}

void check(const TrainConfig& c, const Require& require) {
  const bool corpus = format_holds(c.format) == DataSource::Holds::kCorpus;  // --format text
  require(!c.line_by_line || !corpus, "line_by_line",
          "span corruption reads windows of the text (a line of one token has no span to hide)");
  if (c.data.empty()) {
    require(c.objective != "span", "objective",
            "span corrupts a text corpus: give it with --data FILE (the built-in tasks are pairs)");
    return;
  }
  require((c.objective == "span") == corpus, c.objective == "span" ? "format" : "objective",
          c.objective == "span" ? "span corruption reads a text corpus: --format text"
                                : "a text corpus (--format text) trains the seq2seq model by span "
                                  "corruption: add --objective span (or give pairs, --format tsv)");
  if (c.objective == "span") {
    // A window of --context tokens is one source; it must hold a hidden span
    // and a kept token, and its target (sentinels, the span, </s>) must fit
    // the positions a window has (4 tokens: "<X> w <Y> </s>" after <s>); and
    // it may need no more sentinels than the vocabulary has.
    require(c.context >= 4, "context",
            "span corruption hides at least one token of a window, keeps the rest, and writes "
            "the target in as many positions: --context must be >= 4, got " +
                std::to_string(c.context));
    if (c.context >= 4) {
      const int64_t need = data::sentinels_needed(c.context, data::SpanOptions{});
      require(need <= kSentinels, "context",
              "a window of " + std::to_string(c.context) + " tokens needs " + std::to_string(need) +
                  " sentinels; the vocabulary has T5's " + std::to_string(kSentinels) +
                  " (--context at most about 2000)");
    }
  }
}

}  // namespace

Family seq2seq_family() {
  Family f;
  f.name = "seq2seq";
  f.help = "seq2seq";
  // The paper's defaults are TrainConfig's; span reads --format text.
  // Sinusoidal or learned positions, tied or not; span on text.
  f.settings = {defaults, check};
  f.model.build = build;
  f.model.from_model = from_model;
  f.model.vocab_key = "src_vocab";
  f.model.fixed_positions = [](const TrainConfig& c) {
    return position_kind(c.positions, "--positions").table == PositionTable::Learned;
  };
  f.model.positions = "sinusoidal learned relative";
  f.model.positions_refused =
      "the seq2seq model takes sinusoidal or learned positions (added to its embeddings) or T5's "
      "relative bias (relative; rotary positions are the gpt model's)";
  // The encoder reads the source (n); the decoder <s> and the target (m + 1).
  f.reads.sequence_tokens = [](int64_t n, int64_t m) { return std::max(n, m + 1); };
  f.reports.layers_text = [](const TrainConfig& c) {
    return std::to_string(c.layers) + "+" + std::to_string(c.layers);
  };
  f.reports.explain_what = [](const std::string& src, const std::string& answer) {
    return "answers \"" + src + "\" with \"" + answer +
           "\" (greedy), scored with cross-entropy on its own answer and </s>";
  };
  f.reports.stacks = 2.5;  // an encoder and a decoder (with cross-attention)
  // The decoder reads <s> target (T = tgt + 1) over the source (S = src);
  // per layer: encoder self- (S, S), decoder self- (T, T) and cross (T, S).
  f.reports.attention_lengths = [](int64_t src, int64_t tgt) {
    return std::pair<int64_t, int64_t>{tgt + 1, src};
  };
  f.reports.attention_maps = [](double T, double S) { return S * S + T * T + T * S; };
  f.objectives.names = "pairs span";
  f.objectives.text_pairs = text_pairs;    // --objective span
  f.objectives.tokens = objective_tokens;  // span: the 100 sentinels
  f.objectives.made_targets = "span-target";
  return f;
}

}  // namespace qkv::train
