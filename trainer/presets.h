// Presets: named sets of run settings that go together, one row each in one
// table (trainer/presets.cpp), so that `--preset llama` is what a newcomer
// from nanoGPT or llama2.c would type for "the modern block":
//
//   preset  fits                          sets
//   llama   language models (--model gpt) --pre-ln --norm rms --activation swiglu --no-bias --tie
//                                         --positions rope --kv-heads H/2 (H even)
//   t5      the encoder-decoder (seq2seq) --pre-ln --norm rms --activation relu --no-bias --tie
//                                         --positions relative
//
// A preset fills only the settings the command line left unsaid: a flag given
// explicitly wins, before or after --preset (`--preset llama --norm layer` is
// the llama block with LayerNorm). A preset starts a new run: a checkpoint
// (--load, --init-from) holds its own settings. Adding a setting to a preset
// is one line of its row: {"key", value}, the key a TrainConfig field (the
// flag's name with '-' as '_').
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "trainer/config.h"
#include "trainer/family.h"

namespace qkv::train {

struct Preset {
  const char* name;  // --preset NAME
  const char* help;  // one line for --help
  // The families it fits (checked on their table entry, never their name),
  // and how the refusal says so: "a language model".
  bool (*fits)(const Family& f);
  const char* fits_what;
  // TrainConfig keys and the values the preset gives them.
  std::vector<std::pair<const char*, json>> settings;
  // Settings that depend on others (llama: kv_heads from heads), set when
  // `given` lacks them, after the fixed ones. May be null.
  void (*derive)(TrainConfig& c, const std::vector<std::string>& given) = nullptr;
};

// Every preset, in the order help lists them.
const Registry<Preset>& presets();
// The row named `name`, or nullptr.
const Preset* find_preset(const std::string& name);
// "llama".
std::string preset_names();
// --preset's help: "llama: Pre-LN, rms, swiglu, rope, K=H/2, no bias".
std::string preset_help();

// Applies preset `name` to a new run's settings `c`: each of its settings
// that `given` (the keys the command line set) lacks is set and added to
// `given`, so that the family's own defaults leave it alone. Throws, naming
// --preset, for an unknown name ("expected llama, got 'x'") or a family the
// preset does not fit (naming the families it fits).
void apply_preset(const std::string& name, TrainConfig& c, std::vector<std::string>& given);

}  // namespace qkv::train
