// Characters as tokens (--tokens char, the default): each UTF-8 character of
// a text is a token; the vocabulary is the training data's distinct
// characters. Its row of the token table (trainer/token_kinds.h).
#include "trainer/token_kinds.h"

namespace qkv::train {

TokenKind char_tokens() {
  TokenKind k;
  k.name = "char";
  k.help = "a UTF-8 character";
  k.split = data::Split::Char;
  k.encode = [](const data::Vocab& v, const std::string& text, int64_t* unknown) {
    return v.encode(data::split_tokens(text, data::Split::Char), unknown);
  };
  k.decode = [](const data::Vocab& v, const data::Seq& ids) { return v.decode(ids, ""); };
  k.spans = [](const data::Vocab&, const std::string& text, const data::Seq&) {
    return data::token_spans(text, data::Split::Char);
  };
  k.too_many = " (try --tokens word?)";
  return k;
}

}  // namespace qkv::train
