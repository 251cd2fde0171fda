// Vocabularies and tokenisation (data/vocab.h).
#include "data/vocab.h"

#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace qkv::data {

std::vector<std::string> split_tokens(const std::string& text, Split how) {
  std::vector<std::string> out;
  for_each_token(text, how, [&](std::string_view t) { out.emplace_back(t); });
  return out;
}

std::vector<ByteSpan> token_spans(std::string_view text, Split how) {
  std::vector<ByteSpan> out;
  for_each_token(text, how, [&](std::string_view t) {
    const int64_t at = static_cast<int64_t>(t.data() - text.data());
    out.push_back({at, at + static_cast<int64_t>(t.size())});
  });
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

Vocab Vocab::from_bpe(BPE bpe, const std::vector<std::string>& more_specials) {
  Vocab v;
  v.tokens_.insert(v.tokens_.end(), more_specials.begin(), more_specials.end());
  v.reindex();  // the specials alone are found by name
  if (static_cast<int64_t>(v.index_.size()) != v.size())
    throw Error("vocab: a special token appears twice");
  for (int32_t t = 0; t < bpe.vocab_size(); ++t)
    v.tokens_.push_back(BPE::visible(bpe.token_bytes(t)));
  v.bpe_ = std::make_shared<const BPE>(std::move(bpe));
  return v;
}

Seq Vocab::encode_bytes(std::string_view bytes) const {
  if (!bpe_) throw Error("vocab: encode_bytes needs a BPE vocabulary");
  const std::vector<int32_t> t = bpe_->encode(std::string(bytes));
  const int64_t first = first_bpe_id();
  Seq ids(t.size());
  for (size_t i = 0; i < t.size(); ++i) ids[i] = first + t[i];
  return ids;
}

std::string Vocab::decode_bytes(const Seq& ids) const {
  if (!bpe_) throw Error("vocab: decode_bytes needs a BPE vocabulary");
  const int64_t first = first_bpe_id();
  std::string out;
  for (int64_t id : ids) {
    if (id >= first && id < size())
      out += bpe_->token_bytes(static_cast<int32_t>(id - first));
    else
      out += text(id);  // a special token by name; Error outside the vocabulary
  }
  return out;
}

std::vector<ByteSpan> Vocab::byte_spans(const Seq& ids) const {
  if (!bpe_) throw Error("Vocab::byte_spans: the vocabulary has no BPE (" + describe() + ")");
  std::vector<ByteSpan> out;
  out.reserve(ids.size());
  int64_t at = 0;
  for (const int64_t id : ids) {
    const int64_t n = byte_count(id);
    out.push_back({at, at + n});
    at += n;
  }
  return out;
}

int64_t Vocab::byte_count(int64_t id) const {
  const std::string& t = text(id);  // Error outside the vocabulary
  if (bpe_) {
    const int64_t first = first_bpe_id();
    return id < first
               ? 0
               : static_cast<int64_t>(bpe_->token_bytes(static_cast<int32_t>(id - first)).size());
  }
  return id < 3 || (id == kUnk && has_unk()) ? 0 : static_cast<int64_t>(t.size());
}

nlohmann::json Vocab::to_json() const { return tokens_; }

nlohmann::json Vocab::bpe_json() const {
  if (!bpe_) throw Error("vocab: bpe_json needs a BPE vocabulary");
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : bpe_->merges()) merges.push_back({a, b});
  return {{"pattern", bpe_->pattern()}, {"merges", std::move(merges)}};
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

Vocab Vocab::from_json(const nlohmann::json& j, const nlohmann::json* bpe) {
  Vocab v;
  v.tokens_ = j.get<std::vector<std::string>>();
  if (v.tokens_.size() < 3 || v.tokens_[0] != "<pad>" || v.tokens_[1] != "<s>" ||
      v.tokens_[2] != "</s>")
    throw Error("vocab: the list must start with <pad>, <s>, </s>");
  if (bpe) {  // the specials, then exactly the tokens the merges make
    if (!bpe->is_object() || !bpe->contains("pattern") || !bpe->contains("merges") ||
        !(*bpe)["pattern"].is_string() || !(*bpe)["merges"].is_array())
      throw Error("bpe: expected {\"pattern\": a string, \"merges\": a list of [a, b] pairs}");
    std::vector<std::pair<int32_t, int32_t>> merges;
    for (const nlohmann::json& m : (*bpe)["merges"]) {
      if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() ||
          !m[1].is_number_integer() || m[0].get<int64_t>() < 0 || m[1].get<int64_t>() < 0 ||
          m[0].get<int64_t>() > INT32_MAX || m[1].get<int64_t>() > INT32_MAX)
        throw Error("bpe: merge " + std::to_string(merges.size()) + " is " + brief(m.dump()) +
                    ", not a pair [a, b] of token ids");
      merges.emplace_back(m[0].get<int32_t>(), m[1].get<int32_t>());
    }
    BPE b = BPE::from_merges(std::move(merges), (*bpe)["pattern"].get<std::string>());
    // The 256 byte tokens start the BPE part of the list: where they are
    // found, the entries after them are counted against the merges, so a
    // file a merge short (or long) is told as a count, not as a wrong entry.
    const std::string byte0 = BPE::visible(std::string(1, '\0')),
                      byte1 = BPE::visible(std::string(1, '\1'));
    for (int64_t p = 3; p + 1 < v.size(); ++p)
      if (v.tokens_[size_t(p)] == byte0 && v.tokens_[size_t(p + 1)] == byte1) {
        const int64_t listed = v.size() - p - 256;  // merged tokens in the list
        const int64_t made = b.vocab_size() - 256;
        if (listed != made)
          throw Error("vocab: lists " + std::to_string(std::max<int64_t>(listed, 0)) +
                      " merged tokens after the 256 byte tokens (entries " + std::to_string(p) +
                      "..) but 'bpe' has " + std::to_string(made) + " merges (" +
                      std::to_string(std::abs(listed - made)) +
                      (listed > made ? " more" : " fewer") + " in the list)");
        break;
      }
    const int64_t n = v.size() - b.vocab_size();  // the special tokens
    if (n < 3)
      throw Error("vocab: " + std::to_string(v.size()) +
                  " tokens cannot hold the 3 special tokens and the " +
                  std::to_string(b.vocab_size()) + " BPE tokens of 'bpe'");
    Vocab w = from_bpe(std::move(b), {v.tokens_.begin() + 3, v.tokens_.begin() + n});
    for (int64_t i = n; i < v.size(); ++i)
      if (w.tokens_[static_cast<size_t>(i)] != v.tokens_[static_cast<size_t>(i)])
        throw Error("vocab: entry " + std::to_string(i) + " is '" +
                    brief(v.tokens_[static_cast<size_t>(i)]) + "' but BPE token " +
                    std::to_string(i - n) + " of 'bpe' is '" +
                    brief(w.tokens_[static_cast<size_t>(i)]) + "' (its bytes in GPT-2's mapping)");
    return w;
  }
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
