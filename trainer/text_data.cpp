// A language model's data (the data source "windows"): the text file read,
// its held-out part set apart, the tokenizer fixed (characters or words
// counted from the training part, or a byte-level BPE learned from the
// training bytes) and both parts encoded into ids, with the bytes of text
// each held-out token covers (for bits per byte).
#include <chrono>
#include <cmath>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "trainer/data_sources.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

size_t detail::heldout_byte_cut(const std::string& text, double fraction) {
  size_t cut = text.size() - static_cast<size_t>(fraction * double(text.size()));
  // Not inside a UTF-8 character: back to its lead byte (10xxxxxx continues one).
  for (size_t k = 0; k < 3 && cut > 0 && cut < text.size() &&
                     (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80;
       ++k)
    --cut;
  return cut;
}

namespace {

DataNeed read_text(Trainer& t, const Vocab* given) {
  const Split how = token_kind(t.cfg.tokens, "--tokens").split;
  const int64_t max_file_bytes = kMaxDataFileBytes;
  const bool bpe = how == Split::Bpe;
  // Byte-level BPE reads any bytes; characters and words need UTF-8.
  TextFile f = detail::read_flag_file("--data", t.cfg.data, max_file_bytes, bpe);
  *t.data_info = {{"kind", "text"}, {"data", detail::file_info(f)}};
  std::optional<TextFile> v;
  if (!t.cfg.valid.empty()) {
    v = detail::read_flag_file("--valid", t.cfg.valid, max_file_bytes, bpe);
    (*t.data_info)["valid"] = detail::file_info(*v);
  }
  if (t.cfg.context == 0) t.cfg.context = 64;
  Seq train_ids, valid_ids;
  std::vector<int32_t> valid_bytes;  // the bytes of text each held-out token covers
  if (bpe) {
    // The held-out part is cut in bytes before any tokenizer sees the text:
    // the BPE learns its merges from the training bytes alone.
    const size_t cut = v ? f.text.size() : detail::heldout_byte_cut(f.text, t.cfg.valid_fraction);
    const std::string_view train_text(f.text.data(), cut);
    const std::string_view held_text =
        v ? std::string_view(v->text) : std::string_view(f.text.data() + cut, f.text.size() - cut);
    // At most one token a byte, 8 bytes an id (and 4 for a held-out token's byte count).
    detail::check_data_memory(
        double(train_text.size()) * 8 + double(held_text.size()) * 12,
        "--data " + brief(t.cfg.data) + (v ? " with --valid " + brief(t.cfg.valid) : ""),
        std::to_string(f.text.size()) + (v ? " + " + std::to_string(v->text.size()) : "") +
            " bytes as BPE tokens");
    t.tokenizer_info.train_hash = fnv1a64(std::string(train_text));
    const auto t0 = std::chrono::steady_clock::now();
    if (given) {
      if (!given->bpe())
        throw Error("--tokens bpe: the checkpoint's vocabulary is not a BPE tokenizer's");
      t.vocab = *given;
    } else {
      try {
        // bert's [MASK], span corruption's sentinels
        t.vocab = Vocab::from_bpe(data::BPE::train(std::string(train_text), t.cfg.bpe_vocab),
                                  extra_tokens(t.family(), t.cfg));
      } catch (const Error& e) {  // "BPE: vocab_size N is more than this text allows: ..."
        throw Error("--bpe-vocab " + std::to_string(t.cfg.bpe_vocab) + ": " + brief(t.cfg.data) +
                    (v ? "" : " (its training part)") + ": " + e.what());
      }
      t.tokenizer_info.learned = true;
      *t.tokenizer_info.trained_on = {{"bytes", train_text.size()},
                                      {"fnv1a64", detail::hex64(t.tokenizer_info.train_hash)}};
    }
    train_ids = t.vocab.encode_bytes(train_text);
    valid_ids = t.vocab.encode_bytes(held_text);
    t.tokenizer_info.seconds = detail::seconds_since(t0);
    valid_bytes.reserve(valid_ids.size());
    for (int64_t id : valid_ids)
      valid_bytes.push_back(static_cast<int32_t>(t.vocab.byte_count(id)));
    t.tokenizer_info.train_bytes = static_cast<int64_t>(train_text.size());
    t.tokenizer_info.heldout_bytes = static_cast<int64_t>(held_text.size());
  } else {
    // Count first: the ids take 8 bytes a token (twice while the split is made).
    int64_t n_train = 0, n_valid_file = 0;
    data::for_each_token(f.text, how, [&](std::string_view) { ++n_train; });
    if (v) data::for_each_token(v->text, how, [&](std::string_view) { ++n_valid_file; });
    detail::check_data_memory(
        double(n_train + n_valid_file) * 16,
        "--data " + brief(t.cfg.data) + (v ? " with --valid " + brief(t.cfg.valid) : ""),
        std::to_string(n_train) + (v ? " + " + std::to_string(n_valid_file) : "") + " tokens");
    // Without --valid, the last --valid-fraction of the stream's tokens is held out.
    const int64_t n_split = v ? 0 : static_cast<int64_t>(t.cfg.valid_fraction * double(n_train));
    if (given) {
      t.vocab = *given;
    } else {
      std::set<std::string, std::less<>> distinct;
      const int64_t n_fit = n_train - n_split;
      int64_t k = 0;
      data::for_each_token(f.text, how, [&](std::string_view tok) {
        // Stop collecting past --max-vocab: the set never outgrows what is allowed.
        if (k++ < n_fit && distinct.size() <= static_cast<size_t>(t.cfg.max_vocab) &&
            distinct.find(tok) == distinct.end())
          distinct.emplace(tok);
      });
      t.vocab = vocab_of_tokens(std::move(distinct), t.family(), t.cfg);  // + [MASK], sentinels
    }
    int64_t unknown_train = 0;
    train_ids.reserve(static_cast<size_t>(n_train));
    // A held-out token covers the bytes from the end of the token before it
    // to its own end (a word: its spaces before it too).
    const char* prev_end = nullptr;
    auto covered = [&](std::string_view tok) {
      const int32_t b =
          static_cast<int32_t>(prev_end ? tok.data() + tok.size() - prev_end : tok.size());
      prev_end = tok.data() + tok.size();
      return b;
    };
    const int64_t first_held = n_train - n_split;
    int64_t k = 0;
    data::for_each_token(f.text, how, [&](std::string_view tok) {
      train_ids.push_back(t.vocab.id_of(tok, &unknown_train));
      const int32_t b = covered(tok);
      if (!v && k++ >= first_held) valid_bytes.push_back(b);
    });
    if (v) {
      valid_ids.reserve(static_cast<size_t>(n_valid_file));
      prev_end = nullptr;
      data::for_each_token(v->text, how, [&](std::string_view tok) {
        valid_ids.push_back(t.vocab.id_of(tok, &t.unknown_heldout_tokens));
        valid_bytes.push_back(covered(tok));
      });
    } else {  // the last --valid-fraction of the stream
      const size_t n_valid = static_cast<size_t>(n_split);
      valid_ids.assign(train_ids.end() - static_cast<std::ptrdiff_t>(n_valid), train_ids.end());
      train_ids.resize(train_ids.size() - n_valid);
      train_ids.shrink_to_fit();
    }
  }
  if (static_cast<int64_t>(train_ids.size()) < t.cfg.context + 2)
    throw Error("--data " + brief(t.cfg.data) + ": " + std::to_string(train_ids.size()) +
                " training tokens is too few for --context " + std::to_string(t.cfg.context));
  if (static_cast<int64_t>(valid_ids.size()) < t.cfg.context + 1)
    throw Error((t.cfg.valid.empty() ? "--valid-fraction: the held-out part of " + brief(t.cfg.data)
                                     : "--valid " + brief(t.cfg.valid)) +
                " has " + std::to_string(valid_ids.size()) +
                " tokens, fewer than one window of --context " + std::to_string(t.cfg.context) +
                " + 1");
  t.tokenizer_info.train_tokens = static_cast<int64_t>(train_ids.size());
  t.tokenizer_info.heldout_tokens = static_cast<int64_t>(valid_ids.size());
  t.text = std::make_unique<TextData>(std::move(train_ids), std::move(valid_ids), t.cfg.context,
                                      std::move(valid_bytes));
  return {t.cfg.context, "--context"};
}

}  // namespace

DataSource text_source() {
  DataSource s;
  s.name = "windows";
  s.help = "a plain text, read in windows of --context tokens";
  s.format = "text";
  s.holds = DataSource::Holds::kCorpus;
  s.read = read_text;
  return s;
}

}  // namespace qkv::train
