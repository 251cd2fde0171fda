// Where a model learns each token's position: one row per --positions kind,
// found by name through one table (positions.cpp), each row filled by name
// in its own file, as families are (trainer/family.h):
//
//   kind        file                             adds to the embedding   hands attention
//   sinusoidal  trainer/position_sinusoidal.cpp  the paper's sin/cos     nothing
//   learned     trainer/position_learned.cpp     a learned row each      nothing
//   rope        trainer/position_rope.cpp        nothing                 Q, K rotated (rope_base)
//   relative    trainer/position_relative.cpp    nothing                 a bias per head and
//                                                                        distance bucket
//
// A family lists the kinds it takes, its default first (Family::model.positions:
// "learned rope relative"); validate() reads both tables, so no file asks for
// a kind by name but its own row and the family rows that list it. A program
// (or a test) adds a kind of its own with register_position_kind().
#pragma once
#include <string>
#include <vector>

#include "core/registry.h"
#include "trainer/config.h"

namespace qkv::train {

// What a kind adds to the token embedding.
enum class PositionTable {
  None,      // nothing: the positions enter attention (rope, relative)
  Computed,  // a table computed as sequences need it, unbounded (sinusoidal)
  Learned,   // a learned table: its rows are the run's context and bound every sequence
};

// A setting that belongs to one kind: --rope-base alone would be ignored.
struct PositionKey {
  const char* key = nullptr;   // TrainConfig's key: "rope_base" (the flag --rope-base)
  const char* sets = nullptr;  // "rope's base": "--rope-base: sets rope's base; give ..."
};

// A kind's row, filled by name; every member left out keeps its default.
struct PositionKind {
  const char* name = nullptr;  // --positions NAME, TrainConfig::positions
  const char* help = nullptr;  // --positions' help: "rope (gpt)"
  PositionTable table = PositionTable::None;
  // What it hands attention, set into a model's nn::AttentionSettings (rope:
  // rope_base). Null: nothing (the settings keep their defaults, no position).
  void (*to_attention)(const TrainConfig& c, nn::AttentionSettings& a) = nullptr;
  // Recognises the kind in a model file's attention settings, and reads its
  // keys back into `c` (rope: rope_base > 0). Null: never (the family's own
  // key says: learned_positions).
  bool (*from_attention)(TrainConfig& c, const nn::AttentionSettings& a) = nullptr;
  // Whether it lives in the softmax kernels (standard, memory-efficient,
  // auto): the sparse and linear kernels take it not.
  bool softmax_kernels = false;
  // The settings that belong to it (a flag of them is refused with another
  // kind). Their ranges are validate()'s, checked on every run: a checkpoint's
  // train_config holds them all, whichever kind it uses.
  std::vector<PositionKey> keys;
  // The model_config key whose presence makes a file's positions this kind
  // ("rope_base"): errors on the positions of a file name it. Null: the
  // family's own key (learned_positions).
  const char* file_key = nullptr;
  // Its own rules on a run that uses it (rope: d_k even). May be null.
  void (*check)(const TrainConfig& c, const Require& require) = nullptr;
};

// The built-in kinds and any registered since, in the order help lists them.
const Registry<PositionKind>& position_kinds();
// The kind named `name`, or nullptr.
const PositionKind* find_position_kind(const std::string& name);
// The kind named `name`; an Error "<where>: expected sinusoidal, learned,
// rope or relative, got '<name>'" for any other.
const PositionKind& position_kind(const std::string& name, const std::string& where);
// "sinusoidal, learned, rope (gpt) or relative (T5)": --positions' help.
std::string position_help();
// Adds a kind (a program's own); throws when the name is taken.
// unregister_position_kind removes it again (a test's kind, when the test ends).
void register_position_kind(const PositionKind& k);
void unregister_position_kind(const std::string& name);

}  // namespace qkv::train
