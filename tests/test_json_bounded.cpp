// parse_json_bounded (io/json_bounded.h): JSON from files with its nesting
// bounded while parsing.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "io/json_bounded.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::has;

namespace {
std::string nested_lists(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }
std::string nested_objects(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(levels, '}');
  return s;
}
}  // namespace

TEST_CASE(
    "parse_json_bounded: 100,000 nested lists or objects are refused while parsing, naming where") {
  // Before the bound, a value this deep parsed and then overflowed the stack
  // when it was printed or compared (and would have in a message quoting it).
  for (const std::string& text : {nested_lists(100000), nested_objects(100000)}) {
    const std::string msg =
        error_of([&] { parse_json_bounded(text, "m.safetensors: metadata 'vocab'"); });
    CHECK(msg == "m.safetensors: metadata 'vocab' nests lists or objects deeper than " +
                     std::to_string(kMaxJsonDepth) + " levels");
  }
}

TEST_CASE("parse_json_bounded: max_depth levels parse, one more is refused") {
  for (int depth : {1, 3, 8, kMaxJsonDepth}) {
    CAPTURE(depth);
    CHECK(parse_json_bounded(nested_lists(depth), "x", depth).is_array());
    CHECK(parse_json_bounded(nested_objects(depth), "x", depth).is_object());
    CHECK(has(error_of([&] { parse_json_bounded(nested_lists(depth + 1), "x", depth); }),
              "deeper than " + std::to_string(depth) + " levels"));
    CHECK(has(error_of([&] { parse_json_bounded(nested_objects(depth + 1), "x", depth); }),
              "deeper than " + std::to_string(depth) + " levels"));
  }
  // Scalars nest 0 levels: any bound takes them.
  CHECK(parse_json_bounded("42", "x", 1) == 42);
  CHECK(parse_json_bounded(R"({"d_model": 64, "heads": [1, 2]})", "x", 2)["heads"][1] == 2);
}

TEST_CASE("parse_json_bounded: invalid JSON is an Error naming where, quoting the parser briefly") {
  CHECK(has(error_of([&] { parse_json_bounded("{\"a\": ", "f: metadata 'data'"); }),
            "f: metadata 'data' is not valid JSON ("));
  // The parser's message quotes the token it stopped in: here a 1 MB string
  // with a raw control character at its end.
  const std::string text = "\"" + std::string(1 << 20, 'x') + "\x01\"";
  const std::string msg = error_of([&] { parse_json_bounded(text, "f: metadata 'vocab'"); });
  INFO(msg.substr(0, 500));
  CHECK(has(msg, "f: metadata 'vocab' is not valid JSON ("));
  CHECK(msg.size() < 400);
  CHECK(msg.find('\x01') == std::string::npos);
}

TEST_CASE("parse_json_bounded: the key hook sees every key with its depth, in order") {
  std::vector<std::pair<int, std::string>> keys;
  parse_json_bounded(R"({"a": {"b": 1, "c": [{"d": 2}]}, "e": 3})", "x", kMaxJsonDepth,
                     [&](int depth, const std::string& key) { keys.emplace_back(depth, key); });
  const std::vector<std::pair<int, std::string>> want = {
      {1, "a"}, {2, "b"}, {2, "c"}, {4, "d"}, {1, "e"}};
  CHECK(keys == want);
}

TEST_CASE(
    "parse_json_bounded: a key given twice in one object is refused at any depth, naming it "
    "briefly") {
  // nlohmann keeps the last of two equal keys: a checkpoint saying "lr" twice
  // would silently train with the second.
  CHECK(error_of(
            [&] { parse_json_bounded(R"({"lr": 1, "lr": 2})", "f: metadata 'train_config'"); }) ==
        "f: metadata 'train_config' has the key 'lr' twice in one object (which one is meant?)");
  CHECK(has(
      error_of([&] { parse_json_bounded(R"({"a": [{"b": 1}, {"c": {"d": 1, "d": 1}}]})", "x"); }),
      "x has the key 'd' twice"));
  const std::string long_key = std::string(100000, 'k') + "\\u001b";  // ESC, as JSON writes it
  const std::string msg = error_of(
      [&] { parse_json_bounded("{\"" + long_key + "\": 1, \"" + long_key + "\": 2}", "x"); });
  CHECK(msg.size() < 200);
  CHECK(msg.find('\x1b') == std::string::npos);
  // The same key in sibling objects, or in an object and the one inside it, is no duplicate.
  CHECK(parse_json_bounded(R"([{"a": 1}, {"a": 2}])", "x")[1]["a"] == 2);
  CHECK(parse_json_bounded(R"({"a": {"a": {"a": 1}}, "b": {"a": 2}})", "x")["b"]["a"] == 2);
}
