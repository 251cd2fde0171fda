// The parts of a model file or training checkpoint, each read and checked on
// its own (trainer/checkpoint_parts.cpp) before trainer/checkpoint.cpp puts
// them together into a Trainer: the model's kind and config, where its
// weights sit, its vocabulary's size, a classifier's labels and data shape,
// the tokenizer's record, and the position table's size.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "trainer/trainer.h"

namespace qkv::train::detail {

// metadata 'model_kind' and 'model_config' (as JSON), checked present.
std::pair<std::string, json> model_of(const TensorFile& f);
// metadata 'model_prefix' ("" when absent).
std::string model_prefix_of(const TensorFile& f);
// The vocabulary's size from model_config (the family's vocab_key).
int64_t model_vocab_size(const std::string& kind, const json& mc);
// A classifier's label names and its data's shape.
FileShape file_shape(const TensorFile& f, const std::string& kind, const json& mc);
// metadata 'bpe' key 'trained_on', or null.
json bpe_trained_on(const TensorFile& f);
// train_config's tokens and bpe_vocab against metadata 'tokenizer' and 'bpe'.
void check_tokenizer_agrees(const TensorFile& f, const TrainConfig& c, const Vocab& v);
// Whether the family's rules take a run without --data (a built-in task).
bool takes_tasks(const Family& fam, TrainConfig c);
// model_config's max_positions; 0 for a family with no table.
int64_t model_max_positions(const json& mc);

}  // namespace qkv::train::detail
