// (source, target) pairs from a tab-separated file (--format tsv): one pair a
// line, "source<TAB>target", each side split into characters or words (a BPE
// run reads characters and cuts their joined bytes); the held-out pairs from
// --valid or a fixed split of the file (--valid-fraction). Its row of the
// data-source table (trainer/data_sources.h).
#include <nlohmann/json.hpp>

#include "trainer/data_sources.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

namespace {

DataNeed read_pairs(Trainer& t, const Vocab* given) {
  const TrainConfig& c = t.cfg;
  const Split how = token_kind(c.tokens, "--tokens").split;
  DataNeed need;
  TextFile f = detail::read_flag_file("--data", c.data, kMaxDataFileBytes);
  // Each pair's tokens are held as strings (~40 bytes a character) until encoded.
  detail::check_data_memory(48.0 * double(f.text.size()), "--data " + brief(c.data),
                            std::to_string(f.text.size()) + " bytes of pairs");
  // BPE pairs are read as characters and joined back into their text, whose
  // bytes the BPE cuts (Vocab::encode_bytes).
  const Split read_as = how == Split::Bpe ? Split::Char : how;
  std::vector<data::TokenPair> train_tok = data::parse_pairs(f, read_as), valid_tok;
  detail::check_one_label_per_token(c, train_tok, c.data);
  *t.data_info = {{"kind", "pairs"}, {"data", detail::file_info(f)}};
  if (!c.valid.empty()) {
    TextFile v = detail::read_flag_file("--valid", c.valid, kMaxDataFileBytes);
    detail::check_data_memory(48.0 * double(v.text.size()), "--valid " + brief(c.valid),
                              std::to_string(v.text.size()) + " bytes of pairs");
    valid_tok = data::parse_pairs(v, read_as);
    detail::check_one_label_per_token(c, valid_tok, c.valid);
    (*t.data_info)["valid"] = detail::file_info(v);
  } else {
    // A fixed split of the file, drawn from its own stream so that it does
    // not depend on anything else the run draws.
    if (train_tok.size() < 2)
      throw Error("--data " + brief(c.data) +
                  ": one pair cannot be split into training and held-out");
    const detail::HeldoutSplit split =
        detail::heldout_split(train_tok.size(), c.seed, c.valid_fraction);
    std::vector<data::TokenPair> kept;
    for (size_t i = 0; i < split.order.size(); ++i)
      (i < split.n_valid ? valid_tok : kept).push_back(train_tok[split.order[i]]);
    train_tok.swap(kept);
  }
  auto joined = [](const std::vector<std::string>& chars) {
    std::string s;
    for (const std::string& ch : chars) s += ch;
    return s;
  };
  if (given) {
    t.vocab = *given;
  } else if (how == Split::Bpe) {  // learned from the training pairs' texts
    std::string all;
    for (const data::TokenPair& p : train_tok) all += joined(p.src) + "\n" + joined(p.tgt) + "\n";
    t.vocab = vocab_of_bpe(all, t.family(), c, "its training pairs");
  } else {
    std::vector<const std::vector<std::string>*> lists;
    for (auto& p : train_tok) {
      lists.push_back(&p.src);
      lists.push_back(&p.tgt);
    }
    const auto toks = data::distinct_tokens(lists);
    if (static_cast<int64_t>(toks.size()) > c.max_vocab)
      throw Error("--data " + brief(c.data) + ": " + std::to_string(toks.size()) +
                  " distinct tokens is more than --max-vocab " + std::to_string(c.max_vocab) +
                  token_kind(c.tokens, "--tokens").too_many);
    t.vocab = Vocab::from_tokens(toks);
  }
  std::vector<Pair> train_p, valid_p;
  int64_t unknown_train = 0;
  auto add = [&](const std::vector<data::TokenPair>& in, std::vector<Pair>& out, int64_t* unk,
                 const std::string& file) {
    for (const data::TokenPair& p : in) {
      if (t.vocab.bpe())
        out.push_back({t.vocab.encode_bytes(joined(p.src)), t.vocab.encode_bytes(joined(p.tgt))});
      else
        out.push_back({t.vocab.encode(p.src, unk), t.vocab.encode(p.tgt, unk)});
      const int64_t len = sequence_tokens(t.family(), static_cast<int64_t>(out.back().src.size()),
                                          static_cast<int64_t>(out.back().tgt.size()));
      if (len > need.tokens) {
        need.tokens = len;
        need.where = brief(file) + ":" + std::to_string(p.line);
      }
    }
  };
  add(train_tok, train_p, &unknown_train, c.data);
  add(valid_tok, valid_p, &t.unknown_heldout_tokens, c.valid.empty() ? c.data : c.valid);
  t.pairs = std::make_unique<PairData>(std::move(train_p), std::move(valid_p));
  return need;
}

}  // namespace

DataSource pairs_source() {
  DataSource s;
  s.name = "pairs";
  s.help = "(source, target) pairs, one a line: source<TAB>target";
  s.format = "tsv";
  s.read = read_pairs;
  return s;
}

}  // namespace qkv::train
