// The training program's data: where examples come from and how they are
// batched. Three sources, one shape of batch per model:
//
//   built-in task   copy / reverse / sort of random symbol sequences, drawn
//                   fresh every batch (data/tasks.h)
//   pairs file      --data train.tsv: one "source<TAB>target" pair per line
//   text file       --model gpt --data corpus.txt: one long token stream
//
// The encoder-decoder reads (source, target) pairs; the decoder-only model
// reads a pair as one sequence "source <s> target </s>" and is trained only on
// the target part, or reads windows of a text stream as a language model.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "core/hash.h"
#include "data/batch.h"
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
inline size_t first_invalid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else
      return i;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string::npos;
}

// Errors name the file (and line): "<path>: no such file"; a program adds
// the flag that named it.
inline TextFile read_text_file(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": no such file");
  if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
  if (st.st_size > max_bytes)
    throw Error(path + ": " + std::to_string(st.st_size) + " bytes is more than the " +
                std::to_string(max_bytes) + " this program reads");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  TextFile f{path, ss.str(), 0};
  f.hash = fnv1a64(f.text);
  // Tokens are UTF-8 text (a checkpoint stores the vocabulary as JSON): other
  // bytes are refused here, before training, never when the model is saved.
  if (const size_t bad = first_invalid_utf8(f.text); bad != std::string::npos) {
    const size_t line_start =
        f.text.rfind('\n', bad) == std::string::npos ? 0 : f.text.rfind('\n', bad) + 1;
    const int64_t line =
        1 + std::count(f.text.begin(), f.text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    char b[8];
    std::snprintf(b, sizeof b, "0x%02x", static_cast<unsigned char>(f.text[bad]));
    throw Error(path + ":" + std::to_string(line) + ": byte " + b + " at column " +
                std::to_string(bad - line_start + 1) +
                " is not UTF-8 (qkv reads UTF-8 text; convert the file, e.g. with iconv)");
  }
  if (f.text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error(path + ": the file is empty");
  return f;
}

// One "source<TAB>target" pair per line, each side cut into tokens. Blank
// lines are skipped; anything else malformed is an error naming file:line.
struct TokenPair {
  std::vector<std::string> src, tgt;
  int64_t line = 0;
};
inline std::vector<TokenPair> parse_pairs(const TextFile& f, Split how) {
  std::vector<TokenPair> out;
  std::istringstream in(f.text);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = f.path + ":" + std::to_string(n) + ": ";
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) throw Error(where + "expected 'source<TAB>target', found no tab");
    if (line.find('\t', tab + 1) != std::string::npos)
      throw Error(where + "expected one tab, found more");
    TokenPair p{split_tokens(line.substr(0, tab), how), split_tokens(line.substr(tab + 1), how), n};
    if (p.src.empty()) throw Error(where + "the source is empty");
    if (p.tgt.empty()) throw Error(where + "the target is empty");
    out.push_back(std::move(p));
  }
  if (out.empty()) throw Error(f.path + ": no pairs in the file");
  return out;
}

// The distinct tokens of `lists`, sorted (so the vocabulary does not depend on
// the order of the lines).
inline std::vector<std::string> distinct_tokens(
    const std::vector<const std::vector<std::string>*>& lists) {
  std::set<std::string> all;
  for (auto* l : lists) all.insert(l->begin(), l->end());
  return {all.begin(), all.end()};
}

// ---- batches ------------------------------------------------------------------

// ---- sources ------------------------------------------------------------------

// (source, target) pairs: from a built-in task (fresh every draw, never a
// held-out one) or from a file (drawn uniformly from the training lines).
class PairData {
 public:
  // A built-in task; its held-out set is drawn first from `g`.
  PairData(const TaskConfig& t, int64_t heldout, Generator& g) : task_(t) {
    gen_.emplace(t, heldout, g);
    for (const Seq& s : gen_->heldout()) heldout_.push_back({s, apply_task(t.task, s)});
  }
  // Pairs from files, already turned into ids.
  PairData(std::vector<Pair> train, std::vector<Pair> heldout)
      : train_(std::move(train)), heldout_(std::move(heldout)) {}

  bool from_file() const { return !gen_; }
  const std::vector<Pair>& heldout() const { return heldout_; }
  const std::vector<Pair>& train_pairs() const { return train_; }

  Pair sample(Generator& g) const {
    if (!gen_)
      return train_[static_cast<size_t>(g.randint(0, static_cast<int64_t>(train_.size())))];
    Seq s = gen_->sample_train(g);
    Seq y = apply_task(task_.task, s);
    return {std::move(s), std::move(y)};
  }
  std::vector<Pair> draw(int64_t B, Generator& g) const {
    std::vector<Pair> out;
    out.reserve(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) out.push_back(sample(g));
    return out;
  }
  // Task sequences longer than any trained on (length generalisation).
  std::vector<Pair> longer_set(int64_t n, int64_t extra, Generator& g) const {
    std::vector<Pair> out;
    if (!gen_) return out;
    for (const Seq& s : gen_->longer_set(n, extra, g))
      out.push_back({s, apply_task(task_.task, s)});
    return out;
  }

 private:
  TaskConfig task_;
  std::optional<TaskData> gen_;  // empty for pairs from a file
  std::vector<Pair> train_, heldout_;
};

// A token stream for a language model: windows of context + 1 tokens.
class TextData {
 public:
  TextData(Seq train, Seq heldout, int64_t context)
      : train_(std::move(train)), heldout_(std::move(heldout)), context_(context) {}

  const Seq& train_tokens() const { return train_; }
  const Seq& heldout_tokens() const { return heldout_; }
  int64_t context() const { return context_; }

  // B windows at random offsets of the training stream.
  LMBatch draw(int64_t B, Generator& g) const {
    const int64_t T = context_;
    LMBatch b{{std::vector<int64_t>(B * T), B, T, {}}, std::vector<int64_t>(B * T), B * T};
    const int64_t last = static_cast<int64_t>(train_.size()) - T - 1;
    for (int64_t i = 0; i < B; ++i) {
      const int64_t at = g.randint(0, last + 1);
      std::copy(train_.begin() + at, train_.begin() + at + T, b.ids.ids.begin() + i * T);
      std::copy(train_.begin() + at + 1, train_.begin() + at + T + 1, b.targets.begin() + i * T);
    }
    return b;
  }
  // The held-out stream cut into consecutive windows (every token scored once).
  std::vector<LMBatch> heldout_batches(int64_t B) const {
    std::vector<LMBatch> out;
    const int64_t T = context_, n = (static_cast<int64_t>(heldout_.size()) - 1) / T;
    for (int64_t w0 = 0; w0 < n; w0 += B) {
      const int64_t nb = std::min(B, n - w0);
      LMBatch b{{std::vector<int64_t>(nb * T), nb, T, {}}, std::vector<int64_t>(nb * T), nb * T};
      for (int64_t i = 0; i < nb; ++i) {
        const auto at = heldout_.begin() + (w0 + i) * T;
        std::copy(at, at + T, b.ids.ids.begin() + i * T);
        std::copy(at + 1, at + T + 1, b.targets.begin() + i * T);
      }
      out.push_back(std::move(b));
    }
    return out;
  }

 private:
  Seq train_, heldout_;
  int64_t context_;
};

}  // namespace qkv::data
