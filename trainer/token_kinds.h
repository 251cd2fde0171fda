// How a run cuts text into tokens: one row per --tokens kind, found through
// one table (token_kinds.cpp), each row filled by name in its own file, as
// position kinds and data sources are (trainer/positions.h,
// trainer/data_sources.h):
//
//   kind  file                     a token is               vocabulary          decoded
//   char  trainer/tokens_char.cpp  a UTF-8 character        counted             joined
//   word  trainer/tokens_word.cpp  a word (at white space)  counted             a space between
//   bpe   trainer/tokens_bpe.cpp   a byte-level BPE piece   learned (--bpe-vocab)  its bytes
//
// The kind's name is also a file's metadata 'tokenizer'. A data source may
// read one kind whatever --tokens says (the built-in tasks: words). A
// program (or a test) adds a kind of its own with register_token_kind().
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/registry.h"
#include "data/vocab.h"
#include "trainer/config.h"

namespace qkv::train {

struct Family;

// A kind's row, filled by name; every member left out keeps its default.
struct TokenKind {
  const char* name = nullptr;  // --tokens NAME, TrainConfig::tokens, metadata 'tokenizer'
  const char* help = nullptr;  // what a token is, in a few words
  // How data/ cuts a text into tokens (data::split_tokens, data::for_each_token).
  data::Split split = data::Split::Char;
  // A tokenizer learned from the training text, its size a flag and its
  // merges in the file (metadata 'bpe'); false: the vocabulary is the
  // distinct tokens of the training data, at most --max-vocab of them.
  bool learned = false;
  // A text as ids in `v` (*unknown counts tokens `v` lacks, as <unk>).
  data::Seq (*encode)(const data::Vocab& v, const std::string& text, int64_t* unknown) = nullptr;
  // Ids back to text.
  std::string (*decode)(const data::Vocab& v, const data::Seq& ids) = nullptr;
  // Where each token of encode(v, text) is in text, in bytes (question
  // answering reads its answer back out of the context by them).
  std::vector<data::ByteSpan> (*spans)(const data::Vocab& v, const std::string& text,
                                       const data::Seq& ids) = nullptr;
  // Said after "more distinct tokens than --max-vocab": " (try --tokens word?)".
  const char* too_many = "";
  // Its own rules on a run that uses it (bpe: --bpe-vocab, a text to learn
  // from). May be null.
  void (*check)(const TrainConfig& c, const Family& f, const Require& require) = nullptr;
};

// The built-in kinds and any registered since, in the order of the table above.
const Registry<TokenKind>& token_kinds();
const TokenKind* find_token_kind(const std::string& name);  // or nullptr
// The kind named `name`; an Error "<where>: expected char, word or bpe, got '<name>'".
const TokenKind& token_kind(const std::string& name, const std::string& where);
// Whether `name` is a learned kind, whose tokenizer a file holds (BPE:
// metadata 'bpe'); false for any other name, known or not.
bool learned_tokens(const std::string& name);
// The kind a run reads: its data source's own when it has one (the built-in
// tasks read words), else --tokens.
const TokenKind& run_token_kind(const TrainConfig& c);
// --tokens' help: "char, word or bpe (bpe: learned, --bpe-vocab)".
std::string token_help();
// Adds a kind (a program's own); throws when the name is taken.
// unregister_token_kind removes it again (a test's kind, when the test ends).
void register_token_kind(const TokenKind& k);
void unregister_token_kind(const std::string& name);

}  // namespace qkv::train
