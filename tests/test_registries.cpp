// The tables a newcomer adds a row to (CONTRIBUTING.md, "Adding a family, a
// norm, an optimizer or a decoding method"): each row is what the programs
// read, and a name outside the table is refused naming the table's names.
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "generation/answer.h"
#include "generation/decoding_methods.h"
#include "models/transformer.h"

using namespace qkv;
using qkv::testing::error_of;

TEST_CASE("the decoding methods are one table: names, help and which need a model that searches") {
  CHECK(nn::decoding_method_names() == "greedy or beam");
  CHECK(nn::decoding_method_names("'") == "'greedy' or 'beam'");
  for (const nn::DecodingMethod& m : nn::decoding_methods()) {
    CAPTURE(m.name);
    CHECK(nn::find_decoding_method(m.name) == &m);
    CHECK(std::string(m.help).size() > 10);
    CHECK(&nn::decoding_method(m.name, "--decode") == &m);
  }
  CHECK(nn::find_decoding_method("sample") == nullptr);
  CHECK(error_of([] { nn::decoding_method("nucleus", "--decode"); }) ==
        "--decode: expected greedy or beam, got 'nucleus'");

  // nn::answer takes every row for a model that searches, and refuses a row
  // that needs search for one that does not.
  nn::TransformerConfig sc;
  sc.src_vocab = sc.tgt_vocab = 9;
  sc.d_model = 8;
  sc.heads = 2;
  sc.encoder_layers = sc.decoder_layers = 1;
  sc.d_ff = 16;
  nn::Seq2SeqTransformer s2s(sc);
  nn::GPTConfig gc;
  gc.vocab = 9;
  gc.d_model = 8;
  gc.heads = 2;
  gc.layers = 1;
  gc.d_ff = 16;
  gc.max_positions = 16;
  nn::GPT gpt(gc);
  for (const nn::DecodingMethod& m : nn::decoding_methods()) {
    CAPTURE(m.name);
    nn::AnswerOptions o;
    o.method = m.name;
    o.max_new_tokens = 3;
    CHECK(nn::answer(s2s, {{4, 5, 6}}, o).size() == 1);
    if (m.needs_search)
      CHECK(error_of([&] {
              nn::answer(gpt, {{4, 5, 6}}, o);
            }) == "answer: beam search here is for the encoder-decoder (seq2seq), not gpt");
    else
      CHECK(nn::answer(gpt, {{4, 5, 6}}, o).size() == 1);
  }
}
