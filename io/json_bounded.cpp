#include "io/json_bounded.h"

#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace qkv {

using json = nlohmann::json;

json parse_json_bounded(std::string_view text, const std::string& where, int max_depth,
                        const JsonKeyHook& on_key) {
  // The callback sees each list or object open with the number of levels
  // already open around it (0 for the top-level value), before anything is
  // added to the tree: refusing there keeps the tree at most max_depth deep,
  // and the partial tree that is destroyed by the throw is that shallow too.
  //
  // nlohmann keeps the last of two equal keys in one object; a file saying
  // "lr" twice is ambiguous, so it is refused. keys[d] holds the keys seen so
  // far in the object open at depth d (its keys come at depth d + 1).
  std::vector<std::unordered_set<std::string>> keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw Error(where + " nests lists or objects deeper than " + std::to_string(max_depth) +
                  " levels");
    if (event == json::parse_event_t::object_start) {
      if (keys.size() <= static_cast<size_t>(depth)) keys.resize(depth + 1);
      keys[depth].clear();
    }
    if (event == json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (on_key) on_key(depth, key);
      if (depth >= 1 && !keys[depth - 1].insert(key).second)
        throw Error(where + " has the key '" + brief(key) +
                    "' twice in one object (which one is meant?)");
    }
    return true;
  };
  try {
    return json::parse(text.data(), text.data() + text.size(), cb);
  } catch (const json::parse_error& e) {
    // The parser's message quotes the token it stopped at ("last read:
    // '...'"), which may be a whole string of the file: that part is quoted
    // briefly, the parser's own words are kept.
    std::string what = e.what();
    const size_t own = what.find("] ");  // drop "[json.exception.parse_error.101] "
    if (own != std::string::npos) what.erase(0, own + 2);
    const std::string read = "; last read: '";
    const size_t at = what.find(read);
    if (at != std::string::npos) {
      std::string token = what.substr(at + read.size());
      if (!token.empty() && token.back() == '\'') token.pop_back();
      what = what.substr(0, at) + read + brief(token) + "'";
    }
    throw Error(where + " is not valid JSON (" + what + ")");
  } catch (const json::exception& e) {
    throw Error(where + " is not valid JSON (" + brief(e.what()) + ")");
  }
}

}  // namespace qkv
