// A text read one line a sequence (the data source "lines", --line-by-line:
// bert's mlm by default), as BERT and RoBERTa read documents: a sequence
// never runs from one line into the next, and a short line is padded, not
// joined to its neighbour. For Debian's package descriptions a line is one
// description, so no window starts in one package and ends in another, and
// the line break is never a token to guess.
//
// The held-out part is the last lines holding --valid-fraction of the bytes
// (cut before the line the byte cut falls in), or --valid's lines. The
// tokenizer is learned from the training part's bytes (BPE) or its tokens
// (characters or words); each line is then encoded on its own (its line
// break left out), and a line longer than a sequence holds is cut into
// consecutive pieces of that length.
#include <chrono>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "trainer/data_sources.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

namespace {

// The lines of `text` (without their '\n'), each encoded by `encode`, into
// one stream and its sequences' starts (the stream's size last); blank lines
// (no tokens) are skipped, a longer line than `max_len` cut into pieces.
template <class Encode>
void encode_lines(std::string_view text, int64_t max_len, Encode&& encode, Seq& stream,
                  std::vector<int64_t>& starts) {
  for (size_t at = 0; at < text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    const Seq ids = encode(text.substr(at, nl - at));
    at = nl + 1;
    for (size_t k = 0; k < ids.size(); k += static_cast<size_t>(max_len)) {
      starts.push_back(static_cast<int64_t>(stream.size()));
      stream.insert(stream.end(), ids.begin() + static_cast<std::ptrdiff_t>(k),
                    ids.begin() + static_cast<std::ptrdiff_t>(
                                      std::min(ids.size(), k + static_cast<size_t>(max_len))));
    }
  }
  starts.push_back(static_cast<int64_t>(stream.size()));
}

}  // namespace

namespace {

DataNeed read_lines(Trainer& t, const Vocab* given) {
  const Split how = token_kind(t.cfg.tokens, "--tokens").split;
  const int64_t max_file_bytes = kMaxDataFileBytes;
  const bool bpe = how == Split::Bpe;
  TextFile f = detail::read_flag_file("--data", t.cfg.data, max_file_bytes, bpe);
  *t.data_info = {{"kind", "text"}, {"data", detail::file_info(f)}, {"line_by_line", true}};
  std::optional<TextFile> v;
  if (!t.cfg.valid.empty()) {
    v = detail::read_flag_file("--valid", t.cfg.valid, max_file_bytes, bpe);
    (*t.data_info)["valid"] = detail::file_info(*v);
  }
  if (t.cfg.context == 0) t.cfg.context = 64;
  // A sequence of n tokens takes sequence_tokens(n, 0) positions (bert: <s> n </s>).
  const int64_t max_len = t.cfg.context - sequence_tokens(t.family(), 0, 0);
  if (max_len < 1)
    throw Error("--context " + std::to_string(t.cfg.context) +
                ": too short to hold a token of a line");
  // The held-out part: whole lines, from the start of the line the byte cut falls in.
  size_t cut = f.text.size();
  if (!v) {
    cut = detail::heldout_byte_cut(f.text, t.cfg.valid_fraction);
    const size_t nl = cut == 0 ? std::string::npos : f.text.rfind('\n', cut - 1);
    cut = nl == std::string::npos ? 0 : nl + 1;
  }
  const std::string_view train_text(f.text.data(), cut);
  const std::string_view held_text =
      v ? std::string_view(v->text) : std::string_view(f.text.data() + cut, f.text.size() - cut);
  // At most one token a byte, 8 bytes an id, and a start per line.
  detail::check_data_memory(
      double(train_text.size() + held_text.size()) * 16,
      "--data " + brief(t.cfg.data) + (v ? " with --valid " + brief(t.cfg.valid) : ""),
      std::to_string(f.text.size()) + (v ? " + " + std::to_string(v->text.size()) : "") +
          " bytes as tokens, one line a sequence");
  t.tokenizer_info.train_hash = fnv1a64(std::string(train_text));
  const auto t0 = std::chrono::steady_clock::now();
  if (given) {
    if (bpe && !given->bpe())
      throw Error("--tokens bpe: the checkpoint's vocabulary is not a BPE tokenizer's");
    t.vocab = *given;
  } else if (bpe) {
    try {
      t.vocab = Vocab::from_bpe(data::BPE::train(std::string(train_text), t.cfg.bpe_vocab),
                                extra_tokens(t.family(), t.cfg));
    } catch (const Error& e) {
      throw Error("--bpe-vocab " + std::to_string(t.cfg.bpe_vocab) + ": " + brief(t.cfg.data) +
                  (v ? "" : " (its training part)") + ": " + e.what());
    }
    t.tokenizer_info.learned = true;
    *t.tokenizer_info.trained_on = {{"bytes", train_text.size()},
                                    {"fnv1a64", detail::hex64(t.tokenizer_info.train_hash)}};
  } else {
    std::set<std::string, std::less<>> distinct;
    data::for_each_token(train_text, how, [&](std::string_view tok) {
      // Stop collecting past --max-vocab: the set never outgrows what is allowed.
      if (tok != "\n" && distinct.size() <= static_cast<size_t>(t.cfg.max_vocab) &&
          distinct.find(tok) == distinct.end())
        distinct.emplace(tok);
    });
    t.vocab = vocab_of_tokens(std::move(distinct), t.family(), t.cfg);
  }
  int64_t unknown_train = 0;
  auto encoder = [&](int64_t* unknown) {
    return [&, unknown](std::string_view line) {
      if (bpe) return t.vocab.encode_bytes(line);
      Seq ids;
      data::for_each_token(
          line, how, [&](std::string_view tok) { ids.push_back(t.vocab.id_of(tok, unknown)); });
      return ids;
    };
  };
  Seq train_ids, valid_ids;
  std::vector<int64_t> train_starts, valid_starts;
  encode_lines(train_text, max_len, encoder(&unknown_train), train_ids, train_starts);
  encode_lines(held_text, max_len, encoder(&t.unknown_heldout_tokens), valid_ids, valid_starts);
  t.tokenizer_info.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.tokenizer_info.train_bytes = static_cast<int64_t>(train_text.size());
  t.tokenizer_info.heldout_bytes = static_cast<int64_t>(held_text.size());
  t.tokenizer_info.train_tokens = static_cast<int64_t>(train_ids.size());
  t.tokenizer_info.heldout_tokens = static_cast<int64_t>(valid_ids.size());
  if (train_starts.size() < 2)
    throw Error("--data " + brief(t.cfg.data) + ": no line of its training part has a token");
  if (valid_starts.size() < 2)
    throw Error((t.cfg.valid.empty() ? "--valid-fraction: the held-out part of " + brief(t.cfg.data)
                                     : "--valid " + brief(t.cfg.valid)) +
                " has no line with a token");
  t.text = std::make_unique<TextData>(
      TextData::of_lines(std::move(train_ids), std::move(train_starts), std::move(valid_ids),
                         std::move(valid_starts), t.cfg.context));
  return {t.cfg.context, "--context"};
}

}  // namespace

DataSource lines_source() {
  DataSource s;
  s.name = "lines";
  s.help = "a plain text, one line a sequence (--line-by-line)";
  s.format = "text";
  s.holds = DataSource::Holds::kCorpus;
  s.takes = [](const TrainConfig& c) { return c.line_by_line; };
  s.read = read_lines;
  return s;
}

}  // namespace qkv::train
