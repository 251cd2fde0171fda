// A byte-level BPE tokenizer, trained as minbpe trains one (Karpathy's
// minbpe, after GPT-2 and GPT-4's tokenizers):
//   1. the text, any bytes, is cut into chunks by a regular expression (GPT-4's
//      pattern by default, run by PCRE2), so merges never cross from a word into
//      the space or punctuation after it; bytes the pattern does not match
//      (invalid UTF-8, say) are chunks of their own, so nothing is dropped;
//   2. every chunk starts as its bytes, tokens 0..255;
//   3. training repeats: find the most frequent adjacent pair of tokens over all
//      chunks, give it the next token id (256, 257, ...), replace it everywhere;
//   4. encoding applies the learned merges to each chunk, lowest id first;
//      decoding concatenates each token's bytes.
// Encoding then decoding gives back the input exactly, for any bytes. Token ids
// here are the tokenizer's own (0 .. vocab_size - 1); data::Vocab places them
// after its special tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace qkv::data {

class BPE {
 public:
  // GPT-4's pre-split pattern (cl100k), as minbpe gives it.
  static const char* const kGPT4Pattern;
  // Merges learned from chunks longer than this are learned from its pieces
  // (a megabyte of spaces is one chunk to the pattern); encoding is unaffected.
  static constexpr size_t kTrainChunkBytes = 1024;
  // Bounds on saved merges, checked before any token is spelled out: a token
  // of at most 1 MiB, and 256 MiB for all tokens' bytes together (merges
  // learned here make tokens of at most kTrainChunkBytes).
  static constexpr int64_t kMaxTokenBytes = int64_t(1) << 20;
  static constexpr int64_t kMaxTotalBytes = int64_t(1) << 28;

  // Learns vocab_size - 256 merges from `text`. Ties between equally frequent
  // pairs go to the smaller pair (first token, then second). Throws Error when
  // vocab_size < 256, or when the text runs out of pairs that occur at least
  // twice first (the message names the largest vocabulary it allows).
  static BPE train(const std::string& text, int64_t vocab_size,
                   const std::string& pattern = kGPT4Pattern);
  // A tokenizer from merges saved before (merges()[k] made token 256 + k).
  // Throws Error on a merge that names a token not yet made, repeats one, or
  // makes tokens past the bounds above.
  static BPE from_merges(std::vector<std::pair<int32_t, int32_t>> merges,
                         const std::string& pattern = kGPT4Pattern);

  std::vector<int32_t> encode(const std::string& bytes) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // throws on an id out of range

  int64_t vocab_size() const { return 256 + static_cast<int64_t>(merges_.size()); }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  const std::string& pattern() const { return pattern_; }
  const std::string& token_bytes(int32_t id) const { return bytes_.at(static_cast<size_t>(id)); }

  // The chunks the pattern cuts `text` into (their concatenation is `text`).
  // A pattern PCRE2 gives up on (its match limit) is an Error beginning
  // kPatternFailed, which a caller that knows the text and the pattern's
  // file names.
  std::vector<std::string> split(const std::string& text) const;
  static constexpr const char* kPatternFailed = "BPE: the pre-split pattern failed";

  // Bytes as printable UTF-8, one character per byte, by GPT-2's
  // bytes_to_unicode table (Hugging Face's GPT-2 vocab.json writes tokens so):
  // bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF are the character of the same
  // number; the other 68 (0x00..0x20, 0x7F..0xA0, 0xAD) are U+0100, U+0101, ...
  // in increasing byte order (a space is 'Ġ' U+0120, a newline 'Ċ' U+010A).
  // Exact and one-to-one, for any bytes.
  static std::string visible(const std::string& bytes);

  BPE(BPE&&) noexcept;
  BPE& operator=(BPE&&) noexcept;
  ~BPE();

 private:
  BPE(std::vector<std::pair<int32_t, int32_t>> merges, const std::string& pattern);
  std::vector<int32_t> encode_chunk(const std::string& chunk) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::string> bytes_;  // each token's bytes, by id
  std::string pattern_;
  struct Impl;  // the compiled pattern and the pair -> merged id table
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv::data
