// The training data's sources (data/loaders.h): files read and checked,
// pairs parsed, and examples drawn from a task, pairs or a token stream.
#include "data/loaders.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace qkv::data {

// ---- files --------------------------------------------------------------------

namespace {
// The first byte at or after `from` that is not part of well-formed UTF-8, or npos.
size_t first_invalid_utf8_from(const std::string& s, size_t from) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = from; i < n;) {
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
}  // namespace

size_t first_invalid_utf8(const std::string& s) { return first_invalid_utf8_from(s, 0); }

std::string utf8_or_replacement(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t at = 0; at < s.size();) {
    const size_t bad = first_invalid_utf8_from(s, at);
    if (bad == std::string::npos) {
      out.append(s, at, std::string::npos);
      break;
    }
    out.append(s, at, bad - at);
    out += "\xEF\xBF\xBD";  // U+FFFD for the one byte, then on from the next
    at = bad + 1;
  }
  return out;
}

TextFile read_text_file(const std::string& path, int64_t max_bytes, bool any_bytes) {
  struct stat st {};
  const std::string shown = brief(path);
  // ENOENT is "no such file"; any other reason (a symlink loop, a folder
  // without permission, a name too long) is the system's own words.
  if (::stat(path.c_str(), &st) != 0)
    throw Error(shown + ": " + (errno == ENOENT ? "no such file" : std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  if (st.st_size > max_bytes)
    throw Error(shown + ": " + std::to_string(st.st_size) + " bytes is more than the " +
                std::to_string(max_bytes) + " this program reads");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(shown + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  TextFile f{path, ss.str(), 0};
  f.hash = fnv1a64(f.text);
  // Tokens are UTF-8 text (a checkpoint stores the vocabulary as JSON): other
  // bytes are refused here, before training, never when the model is saved.
  if (const size_t bad = any_bytes ? std::string::npos : first_invalid_utf8(f.text);
      bad != std::string::npos) {
    const size_t line_start =
        f.text.rfind('\n', bad) == std::string::npos ? 0 : f.text.rfind('\n', bad) + 1;
    const int64_t line =
        1 + std::count(f.text.begin(), f.text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    char b[8];
    std::snprintf(b, sizeof b, "0x%02x", static_cast<unsigned char>(f.text[bad]));
    throw Error(shown + ":" + std::to_string(line) + ": byte " + b + " at column " +
                std::to_string(bad - line_start + 1) +
                " is not UTF-8 (qkv reads UTF-8 text; convert the file, e.g. with iconv)");
  }
  if (f.text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error(shown + ": the file is empty");
  return f;
}

std::vector<TokenPair> parse_pairs(const TextFile& f, Split how) {
  std::vector<TokenPair> out;
  std::istringstream in(f.text);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = brief(f.path) + ":" + std::to_string(n) + ": ";
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) throw Error(where + "expected 'source<TAB>target', found no tab");
    if (line.find('\t', tab + 1) != std::string::npos)
      throw Error(where + "expected one tab, found more");
    TokenPair p{split_tokens(line.substr(0, tab), how), split_tokens(line.substr(tab + 1), how), n};
    if (p.src.empty()) throw Error(where + "the source is empty");
    if (p.tgt.empty()) throw Error(where + "the target is empty");
    out.push_back(std::move(p));
  }
  if (out.empty()) throw Error(brief(f.path) + ": no pairs in the file");
  return out;
}

const TokenPair* first_length_mismatch(const std::vector<TokenPair>& pairs) {
  for (const TokenPair& p : pairs)
    if (p.src.size() != p.tgt.size()) return &p;
  return nullptr;
}

std::vector<std::string> distinct_tokens(
    const std::vector<const std::vector<std::string>*>& lists) {
  std::set<std::string> all;
  for (auto* l : lists) all.insert(l->begin(), l->end());
  return {all.begin(), all.end()};
}

// ---- sources ------------------------------------------------------------------

PairData::PairData(const TaskConfig& t, int64_t heldout, Generator& g) : task_(t) {
  gen_.emplace(t, heldout, g);
  std::vector<Pair> held;
  for (const Seq& s : gen_->heldout()) held.push_back({s, apply_task(t.task, s)});
  heldout_ = PairSet(std::move(held));
}

Pair PairData::sample(Generator& g) const {
  if (images_) return images_->draw(1, g).front();
  if (!gen_) return train_[static_cast<size_t>(g.randint(0, static_cast<int64_t>(train_.size())))];
  Seq s = gen_->sample_train(g);
  Seq y = apply_task(task_.task, s);
  return {std::move(s), std::move(y)};
}

std::vector<Pair> PairData::draw(int64_t B, Generator& g, const Augment& a) const {
  if (images_) return images_->draw(B, g, a);
  if (a.any()) throw Error("PairData::draw: only images are augmented; these are token pairs");
  std::vector<Pair> out;
  out.reserve(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) out.push_back(sample(g));
  return out;
}

std::vector<Pair> PairData::longer_set(int64_t n, int64_t extra, Generator& g) const {
  std::vector<Pair> out;
  if (!gen_) return out;
  for (const Seq& s : gen_->longer_set(n, extra, g)) out.push_back({s, apply_task(task_.task, s)});
  return out;
}

std::vector<Pair> PairData::length_set(int64_t n, int64_t lo, int64_t hi, Generator& g) const {
  std::vector<Pair> out;
  if (!gen_) return out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Seq s = gen_->random_sequence(g, lo, hi);
    Seq t = apply_task(task_.task, s);
    out.push_back({std::move(s), std::move(t)});
  }
  return out;
}

namespace {

void check_starts(const std::vector<int64_t>& starts, size_t n, const char* which) {
  bool ok = starts.size() >= 2 && starts.front() == 0 && starts.back() == static_cast<int64_t>(n);
  for (size_t i = 1; ok && i < starts.size(); ++i) ok = starts[i] > starts[i - 1];
  if (!ok)
    throw Error(std::string("TextData::of_lines: the ") + which + " starts (" +
                std::to_string(starts.size()) + ") must rise from 0 to the stream's " +
                std::to_string(n) + " tokens, each sequence at least one");
}

// Sequences `idx` of a line-mode stream as one right-padded batch (B, L).
LMBatch line_batch(const Seq& stream, const std::vector<int64_t>& starts,
                   const std::vector<int64_t>& idx) {
  const int64_t B = static_cast<int64_t>(idx.size());
  int64_t L = 0;
  for (int64_t i : idx) L = std::max(L, starts[i + 1] - starts[i]);
  LMBatch b{{std::vector<int64_t>(B * L, kPad), B, L, std::vector<int64_t>(B)},
            std::vector<int64_t>(B * L, kPad),
            0};
  for (int64_t r = 0; r < B; ++r) {
    const int64_t i = idx[static_cast<size_t>(r)], n = starts[i + 1] - starts[i];
    std::copy(stream.begin() + starts[i], stream.begin() + starts[i] + n,
              b.ids.ids.begin() + r * L);
    b.ids.lengths[static_cast<size_t>(r)] = n;
  }
  return b;
}

}  // namespace

TextData TextData::of_lines(Seq train, std::vector<int64_t> train_starts, Seq heldout,
                            std::vector<int64_t> heldout_starts, int64_t context) {
  check_starts(train_starts, train.size(), "training");
  check_starts(heldout_starts, heldout.size(), "held-out");
  TextData d(std::move(train), std::move(heldout), context);
  d.train_starts_ = std::move(train_starts);
  d.heldout_starts_ = std::move(heldout_starts);
  return d;
}

int64_t TextData::train_sequences() const {
  return by_lines() ? static_cast<int64_t>(train_starts_.size()) - 1 : 0;
}
int64_t TextData::heldout_sequences() const {
  return by_lines() ? static_cast<int64_t>(heldout_starts_.size()) - 1 : 0;
}

LMBatch TextData::draw(int64_t B, Generator& g, int64_t pool) const {
  if (by_lines()) {
    if (pool < 1 || B < 1 || pool > kMaxLengthPool)
      throw Error("TextData::draw: a batch of " + std::to_string(B) + " from a pool of " +
                  std::to_string(pool) + " batches (1 to " + std::to_string(kMaxLengthPool) + ")");
    std::vector<int64_t> idx(static_cast<size_t>(pool * B));
    for (int64_t& i : idx) i = g.randint(0, train_sequences());
    if (pool > 1) {
      const auto len = [&](int64_t i) { return train_starts_[i + 1] - train_starts_[i]; };
      std::stable_sort(idx.begin(), idx.end(),
                       [&](int64_t a, int64_t b) { return len(a) < len(b); });
      const int64_t k = g.randint(0, pool);
      idx.erase(idx.begin() + (k + 1) * B, idx.end());
      idx.erase(idx.begin(), idx.begin() + k * B);
    }
    return line_batch(train_, train_starts_, idx);
  }
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

int64_t TextData::scored_heldout_bytes() const {
  if (by_lines() || heldout_bytes_.size() != heldout_.size()) return 0;
  const int64_t T = context_, n = (static_cast<int64_t>(heldout_.size()) - 1) / T;
  int64_t bytes = 0;
  for (int64_t i = 1; i <= n * T; ++i) bytes += heldout_bytes_[static_cast<size_t>(i)];
  return bytes;
}

std::vector<LMBatch> TextData::heldout_batches(int64_t B) const {
  std::vector<LMBatch> out;
  if (by_lines()) {
    for (int64_t w0 = 0; w0 < heldout_sequences(); w0 += B) {
      std::vector<int64_t> idx;
      for (int64_t i = w0; i < std::min(w0 + B, heldout_sequences()); ++i) idx.push_back(i);
      out.push_back(line_batch(heldout_, heldout_starts_, idx));
    }
    return out;
  }
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

}  // namespace qkv::data
