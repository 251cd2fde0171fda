// The byte-level BPE tokenizer (data/bpe.h), read top to bottom:
//   1. the pre-split: PCRE2 cuts the text into chunks
//   2. training: count pairs, merge the most frequent, update only the chunks
//      that held it
//   3. encoding a chunk: merges applied lowest id first, from a heap
//   4. decoding, and the tokenizer from saved merges
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe.h"

#include <pcre2.h>

#include <algorithm>
#include <map>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace qkv::data {

const char* const BPE::kGPT4Pattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

// ============================================================================
// 1. The pre-split
// ============================================================================
// The pattern runs in UTF mode with Unicode properties (\p{L} letters, \p{N}
// numbers), and PCRE2_MATCH_INVALID_UTF lets it run on any bytes: invalid
// UTF-8 is never part of a match, and split() makes each gap between matches
// a chunk of its own, so the chunks always add up to the text.
//
// Without PCRE2's JIT (a pattern holding (*NO_JIT), or a machine that
// forbids executable memory), the interpreter checks the subject's UTF-8 from
// the start offset to the end at every call: one call a chunk made the split
// quadratic (161 s for one evaluation). So there the text is first cut into
// its valid UTF-8 runs, checked once, and each run is matched as a subject of
// its own with the check off (a second compile of the pattern, without
// MATCH_INVALID_UTF): linear, and the same chunks, since no match crosses an
// invalid byte (for an unanchored pattern such as GPT-4's: ^, \A or $ would
// also match at a run's ends). \C (one code unit, which can stop inside a character) is
// refused at compile time: it would make a match end inside a run's character.

struct BPE::Impl {
  pcre2_code* code = nullptr;   // any bytes (MATCH_INVALID_UTF); JIT-compiled where possible
  pcre2_code* valid = nullptr;  // without the JIT: for runs of valid UTF-8, unchecked
  std::unordered_map<uint64_t, int32_t> merged;  // (a, b) -> the token they make
  ~Impl() {
    if (code) pcre2_code_free(code);
    if (valid) pcre2_code_free(valid);
  }
};

namespace {
// The length of the valid UTF-8 character at s[i] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when it is not one.
size_t utf8_char(const unsigned char* s, size_t i, size_t n) {
  const unsigned char c = s[i];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && s[i + 1] < 0xA0) return 0;   // overlong
    if (c == 0xED && s[i + 1] >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && s[i + 1] < 0x90) return 0;   // overlong
    if (c == 0xF4 && s[i + 1] >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

[[noreturn]] void match_failed(int rc, size_t at) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(rc, msg, sizeof msg);
  throw Error(std::string(BPE::kPatternFailed) + " at byte " + std::to_string(at) + ": " +
              reinterpret_cast<const char*>(msg));
}

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code)
      : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) throw Error("BPE: out of memory for the pattern's match data");
  }
  ~MatchData() { pcre2_match_data_free(md); }
};
}  // namespace

std::vector<std::string> BPE::split(const std::string& text) const {
  std::vector<std::string> chunks;
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  // `at`: the end of the last chunk; bytes from there to the next match
  // (invalid UTF-8, or bytes no alternative matched) make a chunk of their own.
  size_t at = 0;
  auto emit_match = [&](size_t start, size_t end) {
    if (start > at) chunks.emplace_back(text, at, start - at);
    if (end == start) end = start + 1;  // an empty match: step over one byte, keeping it
    chunks.emplace_back(text, start, end - start);
    at = end;
  };
  if (!impl_->valid) {  // the JIT handles invalid UTF-8 itself
    MatchData m(impl_->code);
    while (at < n) {
      const int rc = pcre2_match(impl_->code, s, n, at, 0, m.md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) match_failed(rc, at);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
      emit_match(ov[0], ov[1]);
    }
  } else {  // run by run of valid UTF-8, each checked once, here
    MatchData m(impl_->valid);
    size_t i = 0;
    while (i < n) {
      size_t len = 0;
      while (i < n && (len = utf8_char(s, i, n)) == 0) ++i;  // invalid bytes: a gap
      size_t end = i;
      while (end < n && (len = utf8_char(s, end, n)) > 0) end += len;
      // [i, end) is valid UTF-8: a subject of its own
      size_t pos = i;
      while (pos < end) {
        const int rc =
            pcre2_match(impl_->valid, s + i, end - i, pos - i, PCRE2_NO_UTF_CHECK, m.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) match_failed(rc, pos);
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
        emit_match(i + ov[0], i + ov[1]);
        pos = at;
        // after an empty match's single byte, the rest of its character is a gap
        while (pos < end && (s[pos] & 0xC0) == 0x80) ++pos;
      }
      i = end;
    }
  }
  if (at < n) chunks.emplace_back(text, at, n - at);
  return chunks;
}

// ============================================================================
// 2. Training
// ============================================================================
// The text's chunks are counted once (a word that appears 500 times is one
// chunk with count 500). Pair counts are kept in a map and offered to a
// max-heap; when a pair's count changes, its new count is pushed and stale
// entries are skipped as they surface. A merge rewrites only the chunks that
// hold the pair (where[pair]): their pairs are taken out of the counts, the
// pair is replaced, and their pairs are counted back in.

BPE BPE::train(const std::string& text, int64_t vocab_size, const std::string& pattern) {
  if (vocab_size < 256)
    throw Error("BPE: vocab_size " + std::to_string(vocab_size) +
                " is below 256 (every byte is a token before any merge)");
  BPE base({}, pattern);
  // Unique chunks (cut to kTrainChunkBytes pieces) and their counts.
  std::unordered_map<std::string, int64_t> counted;
  for (const std::string& c : base.split(text))
    for (size_t p = 0; p < c.size(); p += kTrainChunkBytes)
      ++counted[c.substr(p, kTrainChunkBytes)];
  // Sorted, so training does not depend on the hash map's order.
  std::vector<std::pair<std::string, int64_t>> uniq(counted.begin(), counted.end());
  std::sort(uniq.begin(), uniq.end());
  std::vector<std::vector<int32_t>> words(uniq.size());
  std::vector<int64_t> freq(uniq.size());
  for (size_t w = 0; w < uniq.size(); ++w) {
    for (unsigned char ch : uniq[w].first) words[w].push_back(ch);
    freq[w] = uniq[w].second;
  }

  std::unordered_map<uint64_t, int64_t> count;                // pair -> occurrences
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // pair -> chunks (may be stale)
  // The heap: the largest count first, then the smallest pair.
  using Entry = std::pair<int64_t, uint64_t>;
  auto worse = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  std::unordered_set<uint64_t> touched;
  auto add_pairs = [&](uint32_t w, int64_t sign) {
    const std::vector<int32_t>& ids = words[w];
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const uint64_t k = pair_key(ids[i], ids[i + 1]);
      count[k] += sign * freq[w];
      touched.insert(k);
      if (sign > 0) where[k].push_back(w);
    }
  };
  for (uint32_t w = 0; w < words.size(); ++w) add_pairs(w, +1);
  for (const auto& [k, c] : count) heap.push({c, k});
  touched.clear();

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int64_t want = vocab_size - 256;
  while (static_cast<int64_t>(merges.size()) < want) {
    // The most frequent pair whose heap entry is current.
    while (!heap.empty()) {
      const auto [c, k] = heap.top();
      auto it = count.find(k);
      if (it != count.end() && it->second == c) break;
      heap.pop();
    }
    if (heap.empty() || heap.top().first < 2)
      throw Error("BPE: vocab_size " + std::to_string(vocab_size) +
                  " is more than this text allows: " + "after " + std::to_string(merges.size()) +
                  " merges no pair of tokens occurs twice (the largest vocabulary is " +
                  std::to_string(256 + merges.size()) + ")");
    const uint64_t k = heap.top().second;
    heap.pop();
    const int32_t a = static_cast<int32_t>(k >> 32), b = static_cast<int32_t>(k & 0xffffffffu);
    const int32_t id = static_cast<int32_t>(256 + merges.size());
    merges.emplace_back(a, b);
    std::vector<uint32_t> holders;
    holders.swap(where[k]);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    for (uint32_t w : holders) {
      std::vector<int32_t>& ids = words[w];
      bool has = false;
      for (size_t i = 0; i + 1 < ids.size() && !has; ++i) has = ids[i] == a && ids[i + 1] == b;
      if (!has) continue;  // a stale entry: merged away earlier
      add_pairs(w, -1);
      std::vector<int32_t> out;
      out.reserve(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids.swap(out);
      add_pairs(w, +1);
    }
    count.erase(k);
    for (uint64_t t : touched) {
      auto it = count.find(t);
      if (it == count.end()) continue;
      if (it->second <= 0) {
        count.erase(it);
        where.erase(t);
      } else {
        heap.push({it->second, t});
      }
    }
    touched.clear();
  }
  return BPE(std::move(merges), pattern);
}

// ============================================================================
// 3. Encoding a chunk
// ============================================================================
// The merges are applied in the order they were learned: of all adjacent
// pairs that have a merge, the one with the lowest merged id goes first.
// The chunk's tokens are a linked list and the candidate pairs a min-heap of
// (merged id, position), so a chunk of n bytes costs O(n log n), not O(n^2).

std::vector<int32_t> BPE::encode_chunk(const std::string& chunk) const {
  const size_t n = chunk.size();
  std::vector<int32_t> id(n);
  std::vector<int64_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = static_cast<unsigned char>(chunk[i]);
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  }
  using Cand = std::tuple<int32_t, int64_t, int32_t, int32_t>;  // merged id, left pos, a, b
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto offer = [&](int64_t i) {
    if (i < 0 || next[i] < 0) return;
    auto it = impl_->merged.find(pair_key(id[i], id[next[i]]));
    if (it != impl_->merged.end()) heap.push({it->second, i, id[i], id[next[i]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) offer(static_cast<int64_t>(i));
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const auto [m, i, a, b] = heap.top();
    heap.pop();
    // Stale if either side changed since the candidate was offered.
    if (gone[i] || next[i] < 0 || id[i] != a || id[next[i]] != b) continue;
    const int64_t j = next[i];
    id[i] = m;  // i becomes the merged token; j leaves the list
    gone[j] = true;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    offer(prev[i]);
    offer(i);
  }
  std::vector<int32_t> out;
  for (int64_t i = n ? 0 : -1; i >= 0; i = next[i]) out.push_back(id[i]);
  return out;
}

std::vector<int32_t> BPE::encode(const std::string& bytes) const {
  std::vector<int32_t> out;
  // A cache for chunks seen before (most words repeat), bounded: it is
  // emptied when full rather than allowed to grow with the text.
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  for (const std::string& c : split(bytes)) {
    auto it = cache.find(c);
    if (it == cache.end()) {
      if (cache.size() >= (1u << 16)) cache.clear();
      it = cache.emplace(c, encode_chunk(c)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

// ============================================================================
// 4. Decoding, and the tokenizer from merges
// ============================================================================

std::string BPE::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab_size())
      throw Error("BPE::decode: token " + std::to_string(t) + " is out of range [0, " +
                  std::to_string(vocab_size()) + ")");
    out += bytes_[static_cast<size_t>(t)];
  }
  return out;
}

BPE BPE::from_merges(std::vector<std::pair<int32_t, int32_t>> merges, const std::string& pattern) {
  return BPE(std::move(merges), pattern);
}

BPE::BPE(std::vector<std::pair<int32_t, int32_t>> merges, const std::string& pattern)
    : merges_(std::move(merges)), pattern_(pattern), impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE at = 0;
  const uint32_t options =
      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &err, &at, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error("BPE: the pre-split pattern does not compile at offset " + std::to_string(at) +
                ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // faster where JIT is there; optional
  size_t jit_size = 0;
  pcre2_pattern_info(impl_->code, PCRE2_INFO_JITSIZE, &jit_size);
  if (jit_size == 0) {  // no JIT: split() matches runs of valid UTF-8 (section 1)
    impl_->valid = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 options & ~PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (!impl_->valid) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error("BPE: the pre-split pattern cannot run without PCRE2's JIT (offset " +
                  std::to_string(at) + ": " + reinterpret_cast<const char*>(msg) + ")");
    }
  }
  // First the merges' structure and the bytes their tokens would hold, from
  // the lengths alone: merges that double a token each time would ask for
  // 2^k bytes, so nothing is expanded until the total is known to be sane.
  std::vector<int64_t> length(256 + merges_.size(), 1);
  int64_t total = 256;
  for (size_t k = 0; k < merges_.size(); ++k) {
    const auto [a, b] = merges_[k];
    const int32_t id = static_cast<int32_t>(256 + k);
    if (a < 0 || b < 0 || a >= id || b >= id)
      throw Error("BPE: merge " + std::to_string(k) + " (" + std::to_string(a) + ", " +
                  std::to_string(b) + ") names a token not made before token " +
                  std::to_string(id));
    if (!impl_->merged.emplace(pair_key(a, b), id).second)
      throw Error("BPE: merge " + std::to_string(k) + " (" + std::to_string(a) + ", " +
                  std::to_string(b) + ") repeats an earlier merge");
    // Capped, so that doubling 60 times does not overflow.
    length[256 + k] = std::min(length[size_t(a)] + length[size_t(b)], kMaxTokenBytes + 1);
    if (length[256 + k] > kMaxTokenBytes)
      throw Error("BPE: merge " + std::to_string(k) + " (" + std::to_string(a) + ", " +
                  std::to_string(b) + ") makes a token of more than " +
                  std::to_string(kMaxTokenBytes) + " bytes");
    total += length[256 + k];
    if (total > kMaxTotalBytes)
      throw Error("BPE: the first " + std::to_string(k + 1) + " merges make tokens of " +
                  std::to_string(total) + " bytes in all, more than " +
                  std::to_string(kMaxTotalBytes) + "; no tokenizer learned from text has them");
  }
  bytes_.reserve(256 + merges_.size());
  for (int c = 0; c < 256; ++c) bytes_.emplace_back(1, static_cast<char>(c));
  for (const auto& [a, b] : merges_)
    bytes_.push_back(bytes_[static_cast<size_t>(a)] + bytes_[static_cast<size_t>(b)]);
}

std::string BPE::visible(const std::string& bytes) {
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char b : bytes) {
    const bool same = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned cp = b;
    if (!same) {  // the n-th byte outside the three ranges (in byte order) is U+0100 + n
      cp = 0x100 + (b <= 0x20 ? b : b <= 0xA0 ? 0x21 + (b - 0x7F) : 0x43);
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {  // two UTF-8 bytes: every code point here is below U+0800
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

BPE::BPE(BPE&&) noexcept = default;
BPE& BPE::operator=(BPE&&) noexcept = default;
BPE::~BPE() = default;

}  // namespace qkv::data
