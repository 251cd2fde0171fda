// A vocabulary: token text <-> id, with the special tokens every model here
// uses. Ids 0..2 are <pad>, <s> (begin) and </s> (end); a vocabulary built from
// data also has <unk> at id 3, which stands for any token the data never had.
// The built-in tasks have no <unk>: their symbols start at id 3.
//
// Text is cut into tokens one of two ways: Char (each UTF-8 character is a
// token, spaces included) or Word (tokens are the whitespace-separated words).
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/batch.h"

namespace qkv::data {

enum class Split { Char, Word };

inline Split parse_split(const std::string& s) {
  if (s == "char") return Split::Char;
  if (s == "word") return Split::Word;
  throw Error("tokens: unknown tokenisation '" + brief(s, 40) + "' (expected char or word)");
}
inline const char* split_name(Split s) { return s == Split::Char ? "char" : "word"; }

// Calls f(token) for each token of `text`, UTF-8 characters or whitespace-
// separated words, as views into `text`: nothing is copied, so a large file
// can be counted, then encoded straight into ids.
template <class F>
void for_each_token(std::string_view text, Split how, F&& f) {
  if (how == Split::Word) {
    size_t start = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      const bool space = i == text.size() || text[i] == ' ' || text[i] == '\t' || text[i] == '\n' ||
                         text[i] == '\r';
      if (!space) continue;
      if (i > start) f(text.substr(start, i - start));
      start = i + 1;
    }
    return;
  }
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    // The length of this UTF-8 sequence from its lead byte; a stray byte is one token.
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, text.size() - i);
    f(text.substr(i, n));
    i += n;
  }
}

// The tokens of `text` as strings.
inline std::vector<std::string> split_tokens(const std::string& text, Split how) {
  std::vector<std::string> out;
  for_each_token(text, how, [&](std::string_view t) { out.emplace_back(t); });
  return out;
}

class Vocab {
 public:
  static constexpr int64_t kPad = data::kPad, kBos = data::kBos, kEos = data::kEos,
                           kUnk = data::kUnk;

  Vocab() : tokens_{"<pad>", "<s>", "</s>"} { reindex(); }

  // The built-in tasks' vocabulary: symbols a, b, c, ... (then 26, 27, ...).
  static Vocab symbols(int64_t n) {
    Vocab v;
    for (int64_t k = 0; k < n; ++k)
      v.tokens_.push_back(k < 26 ? std::string(1, static_cast<char>('a' + k)) : std::to_string(k));
    v.reindex();
    return v;
  }
  // A data vocabulary: the specials, <unk>, then `tokens` in the order given.
  static Vocab from_tokens(const std::vector<std::string>& tokens) {
    Vocab v;
    v.tokens_.push_back("<unk>");
    v.tokens_.insert(v.tokens_.end(), tokens.begin(), tokens.end());
    v.reindex();
    return v;
  }

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  bool has_unk() const { return tokens_.size() > 3 && tokens_[3] == "<unk>"; }
  const std::string& text(int64_t id) const {
    if (id < 0 || id >= size())
      throw Error("vocab: id " + std::to_string(id) + " outside [0, " + std::to_string(size()) +
                  ")");
    return tokens_[static_cast<size_t>(id)];
  }
  // The id of a token; -1 when it is not in the vocabulary.
  int64_t find(std::string_view tok) const {
    auto it = index_.find(tok);
    return it == index_.end() ? -1 : it->second;
  }

  // Token texts -> ids. Unknown tokens become <unk> (counted in *unknown) when
  // the vocabulary has one, and are an error naming the token otherwise.
  Seq encode(const std::vector<std::string>& toks, int64_t* unknown = nullptr) const {
    Seq ids;
    ids.reserve(toks.size());
    for (const auto& t : toks) ids.push_back(id_of(t, unknown));
    return ids;
  }
  // One token's id, as encode() gives it.
  int64_t id_of(std::string_view t, int64_t* unknown = nullptr) const {
    int64_t id = find(t);
    if (id < 0 || id < 3) {  // specials are never typed in
      if (!has_unk())
        throw Error("vocab: unknown token '" + brief(std::string(t), 40) +
                    "' (the vocabulary has " + describe() + ")");
      id = kUnk;
      if (unknown) ++*unknown;
    }
    return id;
  }
  // Ids -> text, tokens joined by `sep` (no separator for characters).
  std::string decode(const Seq& ids, const std::string& sep) const {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + text(ids[i]);
    return s;
  }

  nlohmann::json to_json() const { return tokens_; }
  static Vocab from_json(const nlohmann::json& j) {
    Vocab v;
    v.tokens_ = j.get<std::vector<std::string>>();
    if (v.tokens_.size() < 3 || v.tokens_[0] != "<pad>" || v.tokens_[1] != "<s>" ||
        v.tokens_[2] != "</s>")
      throw Error("vocab: the list must start with <pad>, <s>, </s>");
    v.reindex();
    if (static_cast<int64_t>(v.index_.size()) != v.size())
      throw Error("vocab: a token appears twice");
    return v;
  }

 private:
  std::string describe() const {
    std::string s = std::to_string(size() - 3) + " tokens:";
    for (int64_t i = 3; i < std::min<int64_t>(size(), 13); ++i)
      s += " " + tokens_[static_cast<size_t>(i)];
    return s + (size() > 13 ? " ..." : "");
  }
  void reindex() {
    index_.clear();
    for (size_t i = 0; i < tokens_.size(); ++i) index_.emplace(tokens_[i], static_cast<int64_t>(i));
  }
  std::vector<std::string> tokens_;
  std::map<std::string, int64_t, std::less<>> index_;  // std::less<>: found by string_view
};

}  // namespace qkv::data
