// The docs/ pages point into the code by line: "`layernorm_backward` (lines
// 105-163)". Code moves; this test keeps the pointers true. In each page's
// "## In the code" section:
//
//   - A file is named at the start of a paragraph or a bullet
//     ("nn/attention.cpp reads ...", "- optim/adam.cpp: ..."); ranges after it
//     refer to that file, unless the parenthesis names another one:
//     "`softmax_backward` (core/reduce.cpp, lines 291-313)".
//   - A named range, "`name` (lines A-B)", "`name`, what it does (lines A-B)"
//     or "`name` (line A)", must start on a line that contains the name (its
//     last part after ::) or on the comment just above such a line, and a
//     range of more than one line must end where a definition ends: line B
//     closes a brace and the brace depth counted from line A is zero there
//     (or, with no braces, line B ends in ';'). "nn/file.h (lines A-B): ..."
//     names a range of the file itself.
//   - An unnamed range, "the mask (lines 143-144)", must lie inside a named
//     range given earlier in the same bullet, when the bullet has one, and
//     inside the file always.
#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fixture.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string s; std::getline(in, s);) lines.push_back(s);
  return lines;
}

// A paragraph or a bullet of the "In the code" section, joined into one line.
struct Block {
  std::string text;
  int first_line;  // in the .md page, for messages
};

std::vector<Block> in_the_code_blocks(const std::vector<std::string>& page) {
  std::vector<Block> blocks;
  bool inside = false, after_blank = true;
  for (int i = 0; i < static_cast<int>(page.size()); ++i) {
    const std::string& s = page[i];
    if (s.rfind("## ", 0) == 0) {
      inside = s.rfind("## In the code", 0) == 0;
      after_blank = true;
      continue;
    }
    const size_t indent = s.find_first_not_of(' ');
    if (!inside || indent == std::string::npos) {
      after_blank = true;
      continue;
    }
    if (after_blank || s.rfind("- ", 0) == 0) blocks.push_back({s, i + 1});
    else blocks.back().text += " " + s.substr(indent);
    after_blank = false;
  }
  return blocks;
}

// Whether the range [a, b] (1-based) ends where a definition ends: line b
// closes a brace and leaves the depth counted from line a at zero, never
// below, or, when no brace opens in the range, line b ends a declaration
// with ';'. Braces in // comments and in string or character literals do not
// count.
bool ends_on(const std::vector<std::string>& src, int a, int b) {
  int depth = 0;
  bool opened = false, closed_on_b = false;
  for (int i = a; i <= b; ++i) {
    const std::string& s = src[i - 1];
    char quote = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      const char c = s[k];
      if (quote) {
        if (c == '\\') ++k;
        else if (c == quote) quote = 0;
        continue;
      }
      if (c == '"' || c == '\'') quote = c;
      else if (c == '/' && k + 1 < s.size() && s[k + 1] == '/') break;
      else if (c == '{') ++depth, opened = true;
      else if (c == '}') --depth, closed_on_b = i == b;
      if (depth < 0) return false;
    }
  }
  if (opened) return depth == 0 && closed_on_b;
  const std::string& s = src[b - 1];
  const size_t last = s.substr(0, s.find("//")).find_last_not_of(' ');
  return last != std::string::npos && s[last] == ';';
}

bool has_word(const std::string& line, const std::string& word) {
  for (size_t at = line.find(word); at != std::string::npos; at = line.find(word, at + 1)) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    const bool left = at == 0 || !ident(line[at - 1]);
    const bool right = at + word.size() >= line.size() || !ident(line[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// Whether line a names `name`, or starts the comment (and blank lines) just
// above a line that does, within [a, b].
bool names_at(const std::vector<std::string>& src, int a, int b, const std::string& name) {
  int i = a;
  auto comment_or_blank = [](const std::string& s) {
    const size_t k = s.find_first_not_of(' ');
    return k == std::string::npos || s.compare(k, 2, "//") == 0;
  };
  while (i < b && comment_or_blank(src[i - 1]) && !has_word(src[i - 1], name)) ++i;
  return has_word(src[i - 1], name);
}

struct Range {
  int a, b;
  size_t at = 0;  // where the page names it, in its block's text
};

// Checks one page; returns one message per broken pointer.
std::vector<std::string> check_page(const fs::path& root, const fs::path& page_path) {
  static const std::regex file_at_start(R"(^(?:- )?((?:core|autograd|nn|optim|examples)/\w+\.(?:h|cpp))\b)");
  static const std::regex range(R"(\blines? (\d+)(?:-(\d+))?\b)");
  static const std::regex named(R"(`([A-Za-z_~][\w:~]*)`(?:,[^`()]*)? \((?:((?:core|autograd|nn|optim|examples)/\w+\.(?:h|cpp)), )?lines? (\d+)(?:-(\d+))?\))");
  std::vector<std::string> errors;
  std::map<std::string, std::vector<std::string>> sources;
  auto source = [&](const std::string& rel) -> const std::vector<std::string>& {
    auto it = sources.find(rel);
    if (it == sources.end()) it = sources.emplace(rel, read_lines(root / rel)).first;
    return it->second;
  };
  const std::string page = page_path.filename().string();
  std::string file;  // the file the page is talking about
  for (const Block& blk : in_the_code_blocks(read_lines(page_path))) {
    const std::string where = page + ":" + std::to_string(blk.first_line);
    std::vector<Range> named_ranges;
    std::vector<std::pair<size_t, size_t>> named_spans;  // where the named ranges sit in the text
    std::smatch m;
    if (std::regex_search(blk.text, m, file_at_start)) {
      file = m[1];
      std::smatch r;  // "nn/file.h (lines A-B)": a range of the file itself
      const std::string rest = m.suffix();
      if (std::regex_search(rest, r, range) && r.position(0) == 2 && rest.compare(0, 2, " (") == 0) {
        named_ranges.push_back({std::stoi(r[1]), r[2].matched ? std::stoi(r[2]) : std::stoi(r[1])});
        named_spans.emplace_back(m.length(0), m.length(0) + 2 + r.length(0));
      }
    }
    for (auto it = std::sregex_iterator(blk.text.begin(), blk.text.end(), named); it != std::sregex_iterator(); ++it) {
      const std::smatch& n = *it;
      const std::string name = n[1], rel = n[2].matched ? std::string(n[2]) : file;
      const int a = std::stoi(n[3]), b = n[4].matched ? std::stoi(n[4]) : a;
      named_spans.emplace_back(n.position(0), n.position(0) + n.length(0));
      if (rel.empty()) {
        errors.push_back(where + ": `" + name + "` has a line range but no file before it");
        continue;
      }
      const auto& src = source(rel);
      const std::string at = where + ": `" + name + "` (" + rel + ", lines " + std::to_string(a) + "-" +
                             std::to_string(b) + ")";
      if (src.empty()) {
        errors.push_back(at + ": cannot read " + rel);
        continue;
      }
      if (a < 1 || b < a || b > static_cast<int>(src.size())) {
        errors.push_back(at + ": outside the file's " + std::to_string(src.size()) + " lines");
        continue;
      }
      const std::string last = name.substr(name.rfind(':') == std::string::npos ? 0 : name.rfind(':') + 1);
      if (!names_at(src, a, b, last))
        errors.push_back(at + ": line " + std::to_string(a) + " does not name " + last + ", nor starts the comment above it: \"" +
                         src[a - 1] + "\"");
      else if (b > a && !ends_on(src, a, b))
        errors.push_back(at + ": line " + std::to_string(b) + " does not end a definition begun in the range");
      if (!n[2].matched) named_ranges.push_back({a, b, static_cast<size_t>(n.position(0))});
    }
    if (file.empty()) continue;
    const int size = static_cast<int>(source(file).size());
    for (auto it = std::sregex_iterator(blk.text.begin(), blk.text.end(), range); it != std::sregex_iterator(); ++it) {
      const size_t pos = it->position(0);
      bool is_named = false;
      for (auto [s, e] : named_spans) is_named |= pos >= s && pos < e;
      if (is_named) continue;
      const int a = std::stoi((*it)[1]), b = (*it)[2].matched ? std::stoi((*it)[2]) : a;
      const std::string at = where + ": lines " + std::to_string(a) + "-" + std::to_string(b) + " of " + file;
      if (a < 1 || b < a || b > size) {
        errors.push_back(at + ": outside the file's " + std::to_string(size) + " lines");
        continue;
      }
      bool any = false, inside = false;
      for (const Range& r : named_ranges)
        if (r.at < pos) any = true, inside |= r.a <= a && b <= r.b;
      if (!any) continue;
      if (!inside) errors.push_back(at + ": not inside a range named earlier in the same bullet");
    }
  }
  return errors;
}

}  // namespace

TEST_CASE("docs/*.md: each named line range starts at its name and ends at its closing brace") {
  const fs::path root = qkv::repo_root();
  int pages = 0;
  for (const auto& entry : fs::directory_iterator(root / "docs")) {
    if (entry.path().extension() != ".md") continue;
    ++pages;
    for (const std::string& e : check_page(root, entry.path())) FAIL_CHECK(e);
  }
  CHECK(pages >= 5);
}

TEST_CASE("the docs checker catches a range that has drifted by one line") {
  // A page of its own, pointing into a file of its own: the checker must
  // accept the true ranges and refuse each kind of drift.
  qkv::testing::TempDir tmp("qkv_docs_check");
  const fs::path dir = tmp.dir;
  fs::create_directories(dir / "nn");
  {
    std::ofstream src(dir / "nn" / "toy.cpp");
    src << "// toy\n"                          // 1
           "int twice(int x) {\n"              // 2
           "  // doubles: \"}\" is not a brace\n"  // 3
           "  return 2 * x;\n"                 // 4
           "}\n"                               // 5
           "\n"                                // 6
           "struct Half {\n"                   // 7
           "  int operator()(int x) { return x / 2; }\n"  // 8
           "};\n";                             // 9
  }
  auto errors_for = [&](const std::string& bullet) {
    std::ofstream(dir / "page.md") << "# toy\n\n## In the code\n\n" << bullet << "\n";
    return check_page(dir, dir / "page.md");
  };
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 2-5), its return (line 4); `Half` (lines 7-9).").empty());
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 3-5).").size() == 1);      // does not start at the name
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 2-4).").size() == 1);      // stops before the closing brace
  CHECK(errors_for("- nn/toy.cpp: `Half` (lines 7-8).").size() == 1);       // the struct's brace is still open
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 2-6).").size() == 1);      // one line past the brace
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 1-9).").empty());          // comment above, two definitions
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 2-5), x (line 7).").size() == 1);  // not inside `twice`
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 2-12).").size() == 1);     // past the end of the file
  CHECK(errors_for("- `twice` (lines 2-5).").size() == 1);                  // no file named
}
