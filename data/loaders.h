// The training program's data: where examples come from and how they are
// batched. Three sources, one shape of batch per model:
//
//   built-in task   copy / reverse / sort of random symbol sequences, drawn
//                   fresh every batch (data/tasks.h)
//   pairs file      one "source<TAB>target" pair per line (parse_pairs)
//   text file       one long token stream, for a language model
//
// The encoder-decoder reads (source, target) pairs; the decoder-only model
// reads a pair as one sequence "source <s> target </s>" and is trained only on
// the target part, or reads windows of a text stream as a language model.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hash.h"
#include "data/batch.h"
#include "data/image_store.h"
#include "data/pair_set.h"
#include "data/tasks.h"
#include "data/vocab.h"

namespace qkv::data {

// ---- files --------------------------------------------------------------------

// A whole text file, with its FNV-1a hash (a checkpoint records it, so a
// resumed or evaluated run can tell whether its data file is the same).
struct TextFile {
  std::string path, text;
  uint64_t hash = 0;
};

// The offset of the first byte of `s` that is not part of well-formed UTF-8
// (no overlong forms, no surrogates, nothing past U+10FFFF), or npos.
size_t first_invalid_utf8(const std::string& s);

// `s` with every byte that is not part of well-formed UTF-8 shown as U+FFFD
// (as Python's bytes.decode(errors="replace") shows it, byte by byte): bytes
// a BPE model wrote, printed safely.
std::string utf8_or_replacement(const std::string& s);

// The whole file, refused when it is missing, not a regular file, longer
// than max_bytes, not UTF-8 (naming the line, column and byte; unless
// `any_bytes`, for a byte-level tokenizer) or empty.
// Errors name the file (and line): "<path>: no such file"; a program adds
// the flag that named it.
TextFile read_text_file(const std::string& path, int64_t max_bytes, bool any_bytes = false);

// One "source<TAB>target" pair per line, each side cut into tokens. Blank
// lines are skipped; anything else malformed is an error naming file:line.
struct TokenPair {
  std::vector<std::string> src, tgt;
  int64_t line = 0;
};
std::vector<TokenPair> parse_pairs(const TextFile& f, Split how);

// The first pair (in file order) whose target has not as many tokens as its
// source, or nullptr: data for a model that labels each source token.
const TokenPair* first_length_mismatch(const std::vector<TokenPair>& pairs);

// The distinct tokens of `lists`, sorted (so the vocabulary does not depend on
// the order of the lines).
std::vector<std::string> distinct_tokens(const std::vector<const std::vector<std::string>*>& lists);

// ---- sources ------------------------------------------------------------------

// (source, target) pairs: from a built-in task (fresh every draw, never a
// held-out one) or from a file (drawn uniformly from the training lines).
class PairData {
 public:
  // A built-in task; its held-out set is drawn first from `g`.
  PairData(const TaskConfig& t, int64_t heldout, Generator& g);
  // Pairs from files, already turned into ids.
  PairData(std::vector<Pair> train, std::vector<Pair> heldout)
      : train_(std::move(train)), heldout_(std::move(heldout)) {}
  // A classifier's images, training and held-out both kept as bytes
  // (data/image_store.h), made pairs a batch at a time.
  PairData(ImageStore train, ImageStore heldout)
      : images_(std::move(train)), heldout_(std::move(heldout)) {}

  bool from_file() const { return !gen_; }
  // The held-out set, read a batch at a time (data/pair_set.h).
  const PairSet& heldout() const { return heldout_; }
  // Training pairs from a file (empty for a task or images).
  const std::vector<Pair>& train_pairs() const { return train_; }
  // The training images, or nullptr.
  const ImageStore* train_images() const { return images_ ? &*images_ : nullptr; }

  // One training pair, and B of them; images augmented by `a` (nothing else
  // may be: Error naming PairData::draw).
  Pair sample(Generator& g) const;
  std::vector<Pair> draw(int64_t B, Generator& g, const Augment& a = {}) const;
  // Task sequences longer than any trained on (length generalisation);
  // empty for pairs from a file.
  std::vector<Pair> longer_set(int64_t n, int64_t extra, Generator& g) const;
  // n task sequences of lo..hi symbols each (the trainer's --long-lengths,
  // one length at a time); empty for pairs from a file.
  std::vector<Pair> length_set(int64_t n, int64_t lo, int64_t hi, Generator& g) const;

 private:
  TaskConfig task_;
  std::optional<TaskData> gen_;  // empty for pairs from a file
  std::optional<ImageStore> images_;
  std::vector<Pair> train_;
  PairSet heldout_;
};

// Line mode's length grouping (TextData::draw's pool): the trainer's
// --group-by-length draws 16 batches' worth and keeps one block of like
// lengths (on Debian's package descriptions, 128 lines a batch: 42% fewer
// positions than ungrouped, 10% of them padding against 47%); a pool is at
// most kMaxLengthPool batches.
constexpr int64_t kLengthPool = 16;
constexpr int64_t kMaxLengthPool = 1024;

// A token stream for a language model: windows of context + 1 tokens.
// `heldout_bytes[i]`, when given, is the number of bytes of the held-out text
// that token i covers: from the end of the token before it to its own end
// (a character's or a BPE token's bytes; a word's with the spaces before it).
class TextData {
 public:
  TextData(Seq train, Seq heldout, int64_t context, std::vector<int32_t> heldout_bytes = {})
      : train_(std::move(train)),
        heldout_(std::move(heldout)),
        heldout_bytes_(std::move(heldout_bytes)),
        context_(context) {}

  // One line a sequence (a masked LM's --line-by-line): the streams hold the
  // sequences' tokens back to back, `*_starts` where each begins, the
  // stream's size last (so sequence i is [starts[i], starts[i + 1])). Error
  // naming TextData::of_lines unless the starts rise from 0 to the size.
  static TextData of_lines(Seq train, std::vector<int64_t> train_starts, Seq heldout,
                           std::vector<int64_t> heldout_starts, int64_t context);
  bool by_lines() const { return !train_starts_.empty(); }
  int64_t train_sequences() const;  // lines (or pieces) in line mode, else 0
  int64_t heldout_sequences() const;

  const Seq& train_tokens() const { return train_; }
  const Seq& heldout_tokens() const { return heldout_; }
  int64_t context() const { return context_; }
  // The bytes of held-out text covered by the tokens heldout_batches() scores
  // (every target: tokens 1 .. n * context of the stream); 0 when unknown.
  int64_t scored_heldout_bytes() const;

  // B windows at random offsets of the training stream. In line mode: B
  // sequences drawn uniformly (one randint each), ids (B, L) right-padded
  // with <pad> to the longest (L), their lengths set, and no targets (all
  // <pad>: the family makes its own, Family::text_pairs).
  //
  // `pool` > 1 (line mode; the trainer's --group-by-length) groups by
  // length: pool * B sequences are drawn as above, ordered by length (ties
  // in the order drawn), and one of the pool's B-long blocks, chosen
  // uniformly, is the batch. Each drawn sequence is in exactly one block, so
  // every sequence is as likely to be in the batch as with pool 1, but a
  // batch's lines are of like length and little of it is padding. Windows
  // (all of one length) ignore it.
  LMBatch draw(int64_t B, Generator& g, int64_t pool = 1) const;
  // The held-out stream cut into consecutive windows (every token scored
  // once); in line mode its sequences in order, B a batch, shaped as draw's.
  std::vector<LMBatch> heldout_batches(int64_t B) const;

 private:
  Seq train_, heldout_;
  std::vector<int32_t> heldout_bytes_;
  int64_t context_;
  std::vector<int64_t> train_starts_, heldout_starts_;  // line mode; empty: windows
};

}  // namespace qkv::data
