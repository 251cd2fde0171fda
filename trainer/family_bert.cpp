// BERT (models/bert.h) as the training program knows it: --model bert, an
// encoder that learns by masked language modelling on text (--objective
// mlm) and is then fine-tuned to classify texts (--objective classify) or
// to answer questions by a span of a context (--objective qa, SQuAD's
// format), from --init-from's file. Its entry in the family table
// (trainer/family.h).
//
// As RoBERTa (Liu et al. 2019) trains it: no next-sentence objective (RoBERTa
// found it did not help), masks drawn afresh for every batch, and <s> and
// </s> as [CLS] and [SEP]; [MASK] is a token of its own.
#include "checkpoint/bert_codec.h"
#include "data/mlm.h"
#include "models/bert.h"
#include "trainer/data_sources.h"
#include "trainer/family.h"

namespace qkv::train {

namespace {

// BERT's own defaults (Post-LN, GELU; learned positions, its row's) and the objective
// the data asks for: mlm on text, classify on labelled lines.
void defaults(TrainConfig& c, const std::function<bool(const char*)>& said) {
  if (!said("activation")) c.activation = "gelu";
  default_format(c, said);  // a .json file: squad
  if (said("objective") && c.objective == "mlm" && !said("format")) c.format = "text";
  if (said("objective") && c.objective == "qa" && !said("format")) c.format = "squad";
  if (!said("objective")) {  // what the data teaches: squad's rows say qa
    const std::string taught = format_objective(c.format);
    c.objective = !taught.empty()                                        ? taught
                  : format_holds(c.format) == DataSource::Holds::kCorpus ? "mlm"
                                                                         : "classify";
  }
  // Questions and contexts in BPE tokens, as every QA model reads them.
  if (c.objective == "qa" && !said("tokens")) c.tokens = "bpe";
  if (c.objective == "qa" && c.tokens == "bpe" && !said("bpe_vocab") && c.bpe_vocab == 0)
    c.bpe_vocab = 1024;
  // BERT's sequences never run from one document into the next: a line (a
  // package's description) is one sequence, padded (--no-line-by-line: windows).
  if (!said("line_by_line") && c.objective == "mlm") c.line_by_line = true;
}

void check(const TrainConfig& c, const Require& require) {
  const bool corpus = format_holds(c.format) == DataSource::Holds::kCorpus;  // --format text
  require(!c.data.empty(), "data",
          "the bert model reads text: --data FILE, a corpus (--objective mlm) or text<TAB>label "
          "lines (--objective classify)");
  require(!c.tie, "tie",
          "the bert model's mlm output is always tied to its token embedding (the flag is not "
          "needed); a classifier has nothing to tie");
  const bool squad = format_objective(c.format) == "qa";  // --format squad
  require(
      c.objective.empty() || ((c.objective == "mlm") == corpus && (c.objective == "qa") == squad),
      "objective",
      c.objective == "mlm"  ? "mlm learns from a text corpus: --format text"
      : c.objective == "qa" ? "qa learns from questions on contexts: --format squad (SQuAD's JSON)"
                            : "classify learns from text<TAB>label lines: --format tsv");
  require(c.objective != "qa" || c.label_smoothing == 0, "label_smoothing",
          "qa's span loss is a cross-entropy over the context's positions; smoothing it would "
          "give the question's and padding's masked positions a share");
}

std::unique_ptr<nn::Model> build(const TrainConfig& c, const DataShape& d) {
  nn::BertConfig b;
  b.vocab = d.vocab;
  b.head = c.objective == "classify" || c.objective == "qa" ? c.objective : "mlm";
  b.classes = d.classes;
  if (d.mask_id >= 0) b.mask_id = d.mask_id;
  if (d.segments > 0) b.segments = d.segments;  // a file's (Family::shape_from_model)
  if (d.sep_id >= 0) b.sep_id = d.sep_id;
  b.max_positions = c.context;
  shared_arch_fields(c, b, [](const auto& mine, auto& theirs) { theirs = mine; });
  b.layers = c.layers;
  b.activation = activation_of(c);
  b.seed = c.seed;
  attention_to_model(c, b);
  return std::make_unique<nn::Bert>(b);
}

void from_model(TrainConfig& c, const json& mc, const std::string& where) {
  const nn::BertConfig b = nn::bert_config_from_json(mc, where);
  c.model = "bert";
  shared_arch_fields(c, b, [](auto& mine, const auto& theirs) { mine = theirs; });
  c.layers = b.layers;
  c.tie = false;
  c.activation = nn::activation_name(b.activation);
  c.objective = b.head;  // a model file's head says what it learned
  attention_from_model(c, b);
}

// A file's classes, its mask token (model_config's mask_id, which the file's
// vocabulary need not call "[MASK]"), its segment rows and its [SEP].
void shape_from_model(DataShape& d, const json& mc) {
  const nn::BertConfig b = nn::bert_config_from_json(mc, "model_config");
  // An mlm head classifies nothing, whatever 'classes' says (the library
  // builds no classifier for it): such a file is a masked language model.
  d.classes = b.head == "classify" ? b.classes : 0;
  d.mask_id = b.mask_id;
  d.segments = b.segments;
  d.sep_id = b.sep_id;
}

// Windows of text (B, T) as masked sequences "<s> w1 .. w(T-2) </s>" and
// their targets: the original token at each chosen position (data/mlm.h).
// Lines (--line-by-line: b.ids.lengths set, each at most T - 2 tokens
// there) as "<s> line </s>", each as long as its line.
std::vector<data::Pair> text_pairs(const TrainConfig&, const DataShape& d, const data::LMBatch& b,
                                   const data::Vocab& v, Generator& g) {
  data::MlmOptions o;
  o.mask_id = d.mask_id;  // the model's [MASK] (Trainer::build_model)
  if (o.mask_id < 0) throw Error("bert: the vocabulary has no [MASK] token");
  o.first_random_id = v.bpe() ? v.first_bpe_id() : (v.has_unk() ? data::kUnk + 1 : 3);
  o.vocab = v.size();
  const int64_t B = b.ids.batch, T = b.ids.len;
  std::vector<data::Pair> out;
  out.reserve(static_cast<size_t>(B));
  data::Seq row;
  for (int64_t i = 0; i < B; ++i) {
    row.assign({data::kBos});
    const int64_t n = b.ids.lengths.empty() ? T - 2 : b.ids.lengths[static_cast<size_t>(i)];
    row.insert(row.end(), b.ids.ids.begin() + i * T, b.ids.ids.begin() + i * T + n);
    row.push_back(data::kEos);
    out.push_back(data::mask_for_mlm(row, o, g));
  }
  return out;
}

std::vector<double> label_probabilities(nn::Model& m, const data::Seq& ids) {
  const Tensor p = dynamic_cast<nn::Bert&>(m).class_probabilities({ids});  // (1, classes)
  return std::vector<double>(p.data(), p.data() + p.numel());
}

Tensor span_scores(nn::Model& m, const std::vector<data::Seq>& seqs) {
  return dynamic_cast<nn::Bert&>(m).span_scores(seqs);  // (B, 2, T)
}

Tensor token_probabilities(nn::Model& m, const data::Seq& ids) {
  return dynamic_cast<nn::Bert&>(m).mlm_probabilities(ids);  // (T, V)
}

}  // namespace

Family bert_family() {
  Family f;
  f.name = "bert";
  f.help = "bert";
  f.settings = {defaults, check};
  f.model.build = build;
  f.model.from_model = from_model;
  f.model.shape_from_model = shape_from_model;
  f.model.vocab_key = "vocab";
  f.model.positions = "learned";
  f.model.positions_refused = "the bert model has a learned position table";
  f.model.fixed_positions = [](const TrainConfig&) { return true; };  // a learned table
  f.reads.text = true;
  // "<s> text </s>" (a classifier's answer is no token of the sequence).
  f.reads.sequence_tokens = [](int64_t n, int64_t) { return n + 2; };
  f.answers.label_probabilities = label_probabilities;
  f.answers.token_probabilities = token_probabilities;
  f.answers.span_scores = span_scores;
  f.answers.no_beam =
      "the bert model (--model bert) gives its answer at once; there is no sequence to search";
  f.reports.explain_what = [](const std::string& src, const std::string& answer) {
    return "reads \"" + src + "\" and answers \"" + answer + "\", scored with cross-entropy";
  };
  f.reports.attention_lengths = [](int64_t src, int64_t) {
    return std::pair<int64_t, int64_t>{src + 2, src + 2};
  };
  f.objectives.names = "mlm classify qa";
  f.objectives.text_pairs = text_pairs;
  f.objectives.extra_special = "[MASK]";
  f.objectives.made_targets = "masked-token";
  return f;
}

}  // namespace qkv::train
