// Byte-level BPE pieces as tokens (--tokens bpe --bpe-vocab N): merges
// learned from the training text's bytes (data/bpe.h), kept in the file
// (metadata 'bpe'); any bytes encode, none is unknown, and decoding gives the
// bytes back exactly. Its row of the token table (trainer/token_kinds.h).
#include "trainer/family.h"
#include "trainer/token_kinds.h"

namespace qkv::train {

TokenKind bpe_tokens() {
  TokenKind k;
  k.name = "bpe";
  k.help = "a byte-level BPE piece, learned (--bpe-vocab)";
  k.split = data::Split::Bpe;
  k.learned = true;
  k.encode = [](const data::Vocab& v, const std::string& text, int64_t*) {
    return v.encode_bytes(text);  // any bytes: no <unk>
  };
  k.decode = [](const data::Vocab& v, const data::Seq& ids) { return v.decode_bytes(ids); };
  k.spans = [](const data::Vocab& v, const std::string&, const data::Seq& ids) {
    return v.byte_spans(ids);
  };
  k.check = [](const TrainConfig& c, const Family& f, const Require& require) {
    // Learned from a text of --data (a corpus, labelled texts or pairs).
    require(!c.data.empty() && !f.reads.images, "tokens",
            "bpe is learned from the text of --data FILE (a corpus, labelled texts or pairs); "
            "the built-in tasks read their symbols as words and images have no text");
    require(!f.reads.labels_tokens, "tokens",
            "the " + c.model +
                " model labels each source token, and BPE would cut the source into other "
                "tokens than its labels: use char or word");
    require(c.bpe_vocab != 0, "bpe_vocab",
            "--tokens bpe needs the tokenizer's size, e.g. --bpe-vocab 512 (256 bytes + merges; "
            "the 3 special tokens come on top)");
    require(c.bpe_vocab >= 256 && c.bpe_vocab <= (1 << 20), "bpe_vocab",
            "must be in [256, 1048576] (256 bytes + merges: every byte is a token before any "
            "merge), got " +
                std::to_string(c.bpe_vocab));
  };
  return k;
}

}  // namespace qkv::train
