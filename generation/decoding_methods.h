// The decoding methods answer() (generation/answer.h) knows, one row each:
// the one place their names live, so that the trainer's --decode flag, its
// help line and answer() all read this table. Adding a method: its row here
// and its branch in the family's answer (models/<family>.cpp through
// nn::Model, or generation/answer.cpp).
//
//   if (!nn::find_decoding_method(name))
//     throw Error("--decode: expected " + nn::decoding_method_names() + ", got '" + name + "'");
#pragma once
#include <string>
#include <vector>

#include "core/registry.h"

namespace qkv::nn {

struct DecodingMethod {
  const char* name;   // AnswerOptions::method and --decode's value
  const char* help;   // one line: what it does
  bool needs_search;  // true: only for a model that can search (can_beam_search)
};

// Every method, in the order help lists them.
const Registry<DecodingMethod>& decoding_methods();

// The row named `name`, or nullptr.
const DecodingMethod* find_decoding_method(const std::string& name);

// The names as prose, each wrapped in `quote`: "greedy or beam" or, with
// quote "'", "'greedy' or 'beam'".
std::string decoding_method_names(const std::string& quote = "");

// Throws "<flag>: expected greedy or beam, got '<name>'" unless `name` is a row.
const DecodingMethod& decoding_method(const std::string& name, const std::string& flag);

}  // namespace qkv::nn
