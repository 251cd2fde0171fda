// Words as tokens (--tokens word, and the built-in tasks' symbols): a text
// split at white space; the vocabulary is the training data's distinct
// words, and decoding puts a space between two. Its row of the token table
// (trainer/token_kinds.h).
#include "trainer/token_kinds.h"

namespace qkv::train {

TokenKind word_tokens() {
  TokenKind k;
  k.name = "word";
  k.help = "a word, split at white space";
  k.split = data::Split::Word;
  k.encode = [](const data::Vocab& v, const std::string& text, int64_t* unknown) {
    return v.encode(data::split_tokens(text, data::Split::Word), unknown);
  };
  k.decode = [](const data::Vocab& v, const data::Seq& ids) { return v.decode(ids, " "); };
  k.spans = [](const data::Vocab&, const std::string& text, const data::Seq&) {
    return data::token_spans(text, data::Split::Word);
  };
  return k;
}

}  // namespace qkv::train
