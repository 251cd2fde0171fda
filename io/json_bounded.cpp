#include "io/json_bounded.h"

#include "core/error.h"

namespace qkv {

using json = nlohmann::json;

json parse_json_bounded(std::string_view text, const std::string& where, int max_depth,
                        const JsonKeyHook& on_key) {
  // The callback sees each list or object open with the number of levels
  // already open around it (0 for the top-level value), before anything is
  // added to the tree: refusing there keeps the tree at most max_depth deep,
  // and the partial tree that is destroyed by the throw is that shallow too.
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw Error(where + " nests lists or objects deeper than " + std::to_string(max_depth) +
                  " levels");
    if (event == json::parse_event_t::key && on_key)
      on_key(depth, parsed.get_ref<const std::string&>());
    return true;
  };
  try {
    return json::parse(text.data(), text.data() + text.size(), cb);
  } catch (const json::exception& e) {
    // The parser's message quotes the token it stopped at, which may be a
    // whole string of the file: brief() keeps the line short.
    throw Error(where + " is not valid JSON (" + brief(e.what()) + ")");
  }
}

}  // namespace qkv
