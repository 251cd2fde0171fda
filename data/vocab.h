// A vocabulary: token text <-> id, with the special tokens every model here
// uses. Ids 0..2 are <pad>, <s> (begin) and </s> (end); a vocabulary built from
// data also has <unk> at id 3, which stands for any token the data never had.
// The built-in tasks have no <unk>: their symbols start at id 3.
//
// Text is cut into tokens one of three ways: Char (each UTF-8 character is a
// token, spaces included), Word (tokens are the whitespace-separated words) or
// Bpe (a byte-level BPE learned from the training text, data/bpe.h: its tokens
// follow the special tokens, BPE token t at id first_bpe_id() + t, and any
// bytes encode, so a BPE vocabulary has no <unk>).
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "data/batch.h"
#include "data/bpe.h"

namespace qkv::data {

enum class Split { Char, Word, Bpe };  // the trainer names them: trainer/token_kinds.h

// Calls f(token) for each token of `text`, UTF-8 characters or whitespace-
// separated words, as views into `text`: nothing is copied, so a large file
// can be counted, then encoded straight into ids.
// (Bpe tokens come from the vocabulary's BPE: Vocab::encode_bytes.)
template <class F>
void for_each_token(std::string_view text, Split how, F&& f) {
  if (how == Split::Bpe) throw Error("for_each_token: BPE tokens come from Vocab::encode_bytes");
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
std::vector<std::string> split_tokens(const std::string& text, Split how);

// One token's bytes in the text it was cut from: [begin, end) (question
// answering maps a span of tokens back to the context's characters).
struct ByteSpan {
  int64_t begin = 0, end = 0;
};
// Where each token of `text` (for_each_token's, characters or words) is.
std::vector<ByteSpan> token_spans(std::string_view text, Split how);

class Vocab {
 public:
  static constexpr int64_t kPad = data::kPad, kBos = data::kBos, kEos = data::kEos,
                           kUnk = data::kUnk;

  Vocab();  // the special tokens only: <pad>, <s>, </s>

  // The built-in tasks' vocabulary: symbols a, b, c, ... (then 26, 27, ...).
  static Vocab symbols(int64_t n);
  // A data vocabulary: the specials, <unk>, then `tokens` in the order given.
  static Vocab from_tokens(const std::vector<std::string>& tokens);
  // A BPE vocabulary: the special tokens <pad>, <s>, </s>, then `more_specials`
  // (names a later objective needs, such as "[MASK]"), ids 0 .. n-1; then the
  // BPE's 256 + merges tokens, BPE token t at id n + t.
  static Vocab from_bpe(BPE bpe, const std::vector<std::string>& more_specials = {});

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  bool has_unk() const { return !bpe_ && tokens_.size() > 3 && tokens_[3] == "<unk>"; }
  // The BPE of a BPE vocabulary; nullptr for characters, words and task symbols.
  const BPE* bpe() const { return bpe_.get(); }
  // The id of BPE token 0 (byte 0x00): the number of special tokens.
  int64_t first_bpe_id() const { return size() - (bpe_ ? bpe_->vocab_size() : 0); }
  // BPE vocabularies: any bytes -> ids (exact), and ids -> bytes (a special
  // token reads as its name). Error on a vocabulary without a BPE.
  Seq encode_bytes(std::string_view bytes) const;
  std::string decode_bytes(const Seq& ids) const;
  // The bytes of the text a token stands for (a special token's: none).
  int64_t byte_count(int64_t id) const;
  // Where each token of encode_bytes(text) is in text: its bytes follow the
  // previous token's (BPE's encoding is exact). Error without a BPE.
  std::vector<ByteSpan> byte_spans(const Seq& ids) const;
  // A token's text; Error for an id outside the vocabulary.
  const std::string& text(int64_t id) const;
  // The id of a token; -1 when it is not in the vocabulary.
  int64_t find(std::string_view tok) const;

  // Token texts -> ids. Unknown tokens become <unk> (counted in *unknown) when
  // the vocabulary has one, and are an error naming the token otherwise.
  Seq encode(const std::vector<std::string>& toks, int64_t* unknown = nullptr) const;
  // One token's id, as encode() gives it.
  int64_t id_of(std::string_view t, int64_t* unknown = nullptr) const;
  // Ids -> text, tokens joined by `sep` (no separator for characters).
  std::string decode(const Seq& ids, const std::string& sep) const;

  // The token list as JSON (as checkpoints store it), and back: the list must
  // start with <pad>, <s>, </s> and name no token twice (Error otherwise).
  // A BPE vocabulary's tokens after the specials are their bytes in GPT-2's
  // byte-to-character mapping (BPE::visible), the merges and the pattern are
  // bpe_json() ({"pattern": ..., "merges": [[a, b], ...]}), and from_json
  // takes both: the list must be the specials then exactly the BPE's tokens.
  nlohmann::json to_json() const;
  nlohmann::json bpe_json() const;
  static Vocab from_json(const nlohmann::json& j, const nlohmann::json* bpe = nullptr);

 private:
  std::string describe() const;  // "12 tokens: a b c ..." for errors
  void reindex();
  std::vector<std::string> tokens_;
  std::map<std::string, int64_t, std::less<>> index_;  // std::less<>: found by string_view
                                                       // (a BPE vocabulary: its specials only)
  std::shared_ptr<const BPE> bpe_;                     // shared by copies; never changed
};

}  // namespace qkv::data
