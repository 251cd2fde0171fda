// A text classifier's data (the data source "labels", --objective
// classify): one "text<TAB>label" line per example, or "text<TAB>text<TAB>label"
// for two texts (bert reads them as "<s> A </s> B </s>", the second one
// segment 1). The labels are the training lines' own, sorted; a held-out
// line whose label no training line has is refused. Texts are cut by the
// run's tokens: words or characters, or a byte-level BPE (from --init-from's
// file, else learned here from the training texts).
#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "trainer/data_sources.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

namespace {

struct LabelLine {
  std::vector<std::string> texts;  // one or two
  std::string label;
  int64_t line = 0;
};

std::vector<LabelLine> parse_label_lines(const TextFile& f, const std::string& flag) {
  std::vector<LabelLine> out;
  size_t at = 0;
  int64_t line = 0;
  while (at < f.text.size()) {
    size_t end = f.text.find('\n', at);
    if (end == std::string::npos) end = f.text.size();
    std::string s = f.text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    std::vector<std::string> fields;
    for (size_t p = 0;;) {
      const size_t tab = s.find('\t', p);
      fields.push_back(s.substr(p, tab == std::string::npos ? std::string::npos : tab - p));
      if (tab == std::string::npos) break;
      p = tab + 1;
    }
    if (fields.size() < 2 || fields.size() > 3 || fields.back().empty() || fields[0].empty())
      throw Error(flag + " " + brief(f.path) + ":" + std::to_string(line) +
                  ": expected text<TAB>label (or text<TAB>text<TAB>label), got " +
                  std::to_string(fields.size()) + " field" + (fields.size() == 1 ? "" : "s") +
                  (fields.size() >= 2 && fields.back().empty() ? " and an empty label" : ""));
    LabelLine l;
    l.label = fields.back();
    l.texts.assign(fields.begin(), fields.end() - 1);
    l.line = line;
    out.push_back(std::move(l));
  }
  if (out.empty()) throw Error(flag + " " + brief(f.path) + ": no text<TAB>label lines");
  return out;
}

// Cuts one or two texts so that "<s> A </s>" or "<s> A </s> B </s>" holds
// at most `window` tokens: A's first tokens kept, or, of two, a token taken
// from the end of the longer one at a time (the second on a tie), as Hugging
// Face's "longest_first" does. Returns whether anything was cut. A window too
// small to keep a token of each text is refused.
bool truncate_texts(std::vector<Seq>& texts, int64_t window) {
  const int64_t specials = 1 + static_cast<int64_t>(texts.size());  // <s> and a </s> each
  int64_t total = specials;
  for (const Seq& t : texts) total += static_cast<int64_t>(t.size());
  if (total <= window) return false;
  if (window < specials + static_cast<int64_t>(texts.size()))
    throw Error("--context " + std::to_string(window) + ": too short to keep a token of each of " +
                std::to_string(texts.size()) + " text(s) and their " + std::to_string(specials) +
                " special tokens");
  for (int64_t excess = total - window; excess > 0; --excess) {
    Seq& longer = texts.size() == 2 && texts[1].size() >= texts[0].size() ? texts[1] : texts[0];
    longer.pop_back();
  }
  return true;
}

}  // namespace

namespace {

DataNeed read_labels(Trainer& t, const Vocab* given) {
  const Split how = token_kind(t.cfg.tokens, "--tokens").split;
  const int64_t max_file_bytes = kMaxDataFileBytes;
  TextFile f = detail::read_flag_file("--data", t.cfg.data, max_file_bytes);
  detail::check_data_memory(48.0 * double(f.text.size()), "--data " + brief(t.cfg.data),
                            std::to_string(f.text.size()) + " bytes of labelled text");
  std::vector<LabelLine> train_l = parse_label_lines(f, "--data"), valid_l;
  // The labels: every --data line's (a held-out part split from the file
  // keeps a rare label's lines known), sorted; a checkpoint's, when given,
  // must agree.
  std::set<std::string> names;
  for (const LabelLine& l : train_l) names.insert(l.label);
  *t.data_info = {{"kind", "labels"}, {"data", detail::file_info(f)}};
  if (!t.cfg.valid.empty()) {
    TextFile v = detail::read_flag_file("--valid", t.cfg.valid, max_file_bytes);
    valid_l = parse_label_lines(v, "--valid");
    (*t.data_info)["valid"] = detail::file_info(v);
  } else {  // a fixed split of the file, as for pairs
    if (train_l.size() < 2)
      throw Error("--data " + brief(t.cfg.data) +
                  ": one line cannot be split into training and held-out");
    const detail::HeldoutSplit split =
        detail::heldout_split(train_l.size(), t.cfg.seed, t.cfg.valid_fraction);
    std::vector<LabelLine> kept;
    for (size_t i = 0; i < split.order.size(); ++i)
      (i < split.n_valid ? valid_l : kept).push_back(train_l[split.order[i]]);
    train_l.swap(kept);
  }

  const std::vector<std::string> found(names.begin(), names.end());
  if (!t.labels.empty() && t.labels != found)
    throw Error("--data " + brief(t.cfg.data) + ": its labels are " + brief(json(found).dump()) +
                " but the model file's are " + brief(json(t.labels).dump()));
  t.labels = found;

  // The tokens: the given vocabulary, a BPE learned from the training texts,
  // or the training texts' words or characters.
  if (given) {
    t.vocab = *given;
  } else if (how == Split::Bpe) {
    std::string all;
    for (const LabelLine& l : train_l)
      for (const std::string& s : l.texts) all += s + "\n";
    t.vocab = vocab_of_bpe(all, t.family(), t.cfg, "its training texts");
  } else {
    std::set<std::string, std::less<>> distinct;
    for (const LabelLine& l : train_l)
      for (const std::string& s : l.texts)
        data::for_each_token(s, how, [&](std::string_view tok) {
          if (distinct.size() <= static_cast<size_t>(t.cfg.max_vocab)) distinct.emplace(tok);
        });
    t.vocab = vocab_of_tokens(std::move(distinct), t.family(), t.cfg);
  }
  auto encode = [&](const std::string& s, int64_t* unknown) {
    return t.vocab.bpe()
               ? t.vocab.encode_bytes(s)
               : t.vocab.encode(data::split_tokens(s, how == Split::Bpe ? Split::Word : how),
                                unknown);
  };
  // With a --context and --truncate (the default), a text longer than the
  // window is cut to it, as Hugging Face's truncation=True: its first tokens
  // kept, and of two texts the longer one shortened first
  // ("longest_first"). Cut texts are counted per split, for the header.
  const int64_t window = t.cfg.truncate ? t.cfg.context : 0;
  int64_t need = 0;
  std::string longest_where;
  auto add = [&](const std::vector<LabelLine>& in, std::vector<Pair>& out, int64_t* unknown,
                 const std::string& flag, const std::string& file, std::vector<int64_t>& uncut) {
    int64_t cut = 0;
    for (const LabelLine& l : in) {
      const auto at = std::lower_bound(found.begin(), found.end(), l.label);
      if (at == found.end() || *at != l.label)
        throw Error(flag + " " + brief(file) + ":" + std::to_string(l.line) + ": the label '" +
                    brief(l.label) + "' is on no training line (the labels are " +
                    brief(json(found).dump()) + ")");
      std::vector<Seq> texts;
      int64_t n = 1;  // <s>, then each text and its </s>
      for (const std::string& s : l.texts) {
        texts.push_back(encode(s, unknown));
        n += static_cast<int64_t>(texts.back().size()) + 1;
      }
      uncut.push_back(n);
      if (window > 0) cut += truncate_texts(texts, window) ? 1 : 0;
      Pair p;  // "<s> A </s>" or "<s> A </s> B </s>"
      p.src.push_back(Vocab::kBos);
      for (const Seq& ids : texts) {
        p.src.insert(p.src.end(), ids.begin(), ids.end());
        p.src.push_back(Vocab::kEos);
      }
      p.tgt = {static_cast<int64_t>(at - found.begin())};
      if (static_cast<int64_t>(p.src.size()) > need) {
        need = static_cast<int64_t>(p.src.size());
        longest_where = brief(file) + ":" + std::to_string(l.line);
      }
      out.push_back(std::move(p));
    }
    return cut;
  };
  std::vector<Pair> train_p, valid_p;
  int64_t unknown_train = 0;
  const int64_t cut_train =
      add(train_l, train_p, &unknown_train, "--data", t.cfg.data, t.uncut_train_tokens);
  const int64_t cut_valid =
      add(valid_l, valid_p, &t.unknown_heldout_tokens, t.cfg.valid.empty() ? "--data" : "--valid",
          t.cfg.valid.empty() ? t.cfg.data : t.cfg.valid, t.uncut_heldout_tokens);
  if (cut_train + cut_valid > 0)
    t.data_notes.push_back(
        "texts longer than --context " + std::to_string(t.cfg.context) + " tokens cut to it: " +
        std::to_string(cut_train) + " of " + std::to_string(train_l.size()) + " training, " +
        std::to_string(cut_valid) + " of " + std::to_string(valid_l.size()) +
        " held-out (--no-truncate refuses them; --count-tokens counts a file's tokens)");
  t.pairs = std::make_unique<PairData>(std::move(train_p), std::move(valid_p));
  if (t.cfg.context == 0) t.cfg.context = need;
  if (need > t.cfg.context)
    throw Error("--context " + std::to_string(t.cfg.context) +
                ": the position table is shorter than a text of " + std::to_string(need) +
                " tokens (" + longest_where + ", with <s> and </s>; without --no-truncate such " +
                "a text is cut to the window)");
  return {t.cfg.context, "--context"};
}

}  // namespace

DataSource labels_source() {
  DataSource s;
  s.name = "labels";
  s.help = "texts and their labels, one a line: text<TAB>label";
  s.format = "tsv";
  s.takes = [](const TrainConfig& c) { return c.objective == "classify"; };
  s.read = read_labels;
  return s;
}

}  // namespace qkv::train
