// Vocabularies and tokenisation (data/vocab.h).
#include "data/vocab.h"

namespace qkv::data {

Split parse_split(const std::string& s) {
  if (s == "char") return Split::Char;
  if (s == "word") return Split::Word;
  throw Error("tokens: unknown tokenisation '" + brief(s) + "' (expected char or word)");
}
const char* split_name(Split s) { return s == Split::Char ? "char" : "word"; }

std::vector<std::string> split_tokens(const std::string& text, Split how) {
  std::vector<std::string> out;
  for_each_token(text, how, [&](std::string_view t) { out.emplace_back(t); });
  return out;
}

// ---- Vocab ----------------------------------------------------------------------

Vocab::Vocab() : tokens_{"<pad>", "<s>", "</s>"} { reindex(); }

Vocab Vocab::symbols(int64_t n) {
  Vocab v;
  for (int64_t k = 0; k < n; ++k)
    v.tokens_.push_back(k < 26 ? std::string(1, static_cast<char>('a' + k)) : std::to_string(k));
  v.reindex();
  return v;
}

Vocab Vocab::from_tokens(const std::vector<std::string>& tokens) {
  Vocab v;
  v.tokens_.push_back("<unk>");
  v.tokens_.insert(v.tokens_.end(), tokens.begin(), tokens.end());
  v.reindex();
  return v;
}

const std::string& Vocab::text(int64_t id) const {
  if (id < 0 || id >= size())
    throw Error("vocab: id " + std::to_string(id) + " outside [0, " + std::to_string(size()) + ")");
  return tokens_[static_cast<size_t>(id)];
}

int64_t Vocab::find(std::string_view tok) const {
  auto it = index_.find(tok);
  return it == index_.end() ? -1 : it->second;
}

Seq Vocab::encode(const std::vector<std::string>& toks, int64_t* unknown) const {
  Seq ids;
  ids.reserve(toks.size());
  for (const auto& t : toks) ids.push_back(id_of(t, unknown));
  return ids;
}

int64_t Vocab::id_of(std::string_view t, int64_t* unknown) const {
  int64_t id = find(t);
  if (id < 0 || id < 3) {  // specials are never typed in
    if (!has_unk())
      throw Error("vocab: unknown token '" + brief(std::string(t)) + "' (the vocabulary has " +
                  describe() + ")");
    id = kUnk;
    if (unknown) ++*unknown;
  }
  return id;
}

std::string Vocab::decode(const Seq& ids, const std::string& sep) const {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + text(ids[i]);
  return s;
}

Vocab Vocab::from_json(const nlohmann::json& j) {
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

std::string Vocab::describe() const {
  std::string s = std::to_string(size() - 3) + " tokens:";
  for (int64_t i = 3; i < std::min<int64_t>(size(), 13); ++i)
    s += " " + tokens_[static_cast<size_t>(i)];
  return s + (size() > 13 ? " ..." : "");
}

void Vocab::reindex() {
  index_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) index_.emplace(tokens_[i], static_cast<int64_t>(i));
}

}  // namespace qkv::data
