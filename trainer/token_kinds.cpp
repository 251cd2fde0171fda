#include "trainer/token_kinds.h"

#include "trainer/data_sources.h"

namespace qkv::train {

// Each built-in kind's row, filled in its own file.
TokenKind char_tokens();  // trainer/tokens_char.cpp
TokenKind word_tokens();  // trainer/tokens_word.cpp
TokenKind bpe_tokens();   // trainer/tokens_bpe.cpp

namespace {
Registry<TokenKind>& token_table() {
  static Registry<TokenKind> t{"register_token_kind", {char_tokens(), word_tokens(), bpe_tokens()}};
  return t;
}
}  // namespace

const Registry<TokenKind>& token_kinds() { return token_table(); }

const TokenKind* find_token_kind(const std::string& name) { return token_table().find(name); }

const TokenKind& token_kind(const std::string& name, const std::string& where) {
  return token_table().at(name, where);
}

bool learned_tokens(const std::string& name) {
  const TokenKind* k = find_token_kind(name);
  return k && k->learned;
}

const TokenKind& run_token_kind(const TrainConfig& c) {
  const char* own = data_source(c).tokens;
  return token_kind(own ? own : c.tokens, "--tokens");
}

std::string token_help() {
  std::string learned;
  for (const TokenKind& k : token_table())
    if (k.learned) learned += (learned.empty() ? "" : ", ") + std::string(k.name);
  return token_table().names() +
         (learned.empty() ? "" : " (" + learned + ": learned, --bpe-vocab)");
}

void register_token_kind(const TokenKind& k) { token_table().add(k); }

void unregister_token_kind(const std::string& name) { token_table().remove(name); }

}  // namespace qkv::train
