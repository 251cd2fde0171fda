#include "trainer/positions.h"

namespace qkv::train {

// Each built-in kind's row, filled in its own file.
PositionKind sinusoidal_positions();  // trainer/position_sinusoidal.cpp
PositionKind learned_positions();     // trainer/position_learned.cpp
PositionKind rope_positions();        // trainer/position_rope.cpp
PositionKind relative_positions();    // trainer/position_relative.cpp

namespace {
Registry<PositionKind>& position_table() {
  static Registry<PositionKind> t{
      "register_position_kind",
      {sinusoidal_positions(), learned_positions(), rope_positions(), relative_positions()}};
  return t;
}
}  // namespace

const Registry<PositionKind>& position_kinds() { return position_table(); }

const PositionKind* find_position_kind(const std::string& name) {
  return position_table().find(name);
}

const PositionKind& position_kind(const std::string& name, const std::string& where) {
  return position_table().at(name, where);
}

std::string position_help() {
  return one_of(position_table(), [](const PositionKind& k) { return k.help ? k.help : k.name; });
}

void register_position_kind(const PositionKind& k) { position_table().add(k); }

void unregister_position_kind(const std::string& name) { position_table().remove(name); }

}  // namespace qkv::train
