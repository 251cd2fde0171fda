// The docs/ pages point into the code by line: "`layernorm_backward` (lines
// 100-158)". Code moves; this test keeps the pointers true. In each page's
// "## In the code" section:
//
//   - A file is named at the start of a paragraph or a bullet
//     ("nn/attention.cpp reads ...", "- optim/adam.cpp: ..."); ranges after it
//     refer to that file, unless the parenthesis names another one:
//     "`softmax_backward` (core/reduce.cpp, lines 287-309)".
//   - No range cuts a comment block or starts or ends on a blank line.
//   - A named range, "`name` (lines A-B)", "`name`, what it does (lines
//     A-B)" or "`name` (line A)", covers one definition: the first code line
//     in it names `name` (its last part after ::), only the comment block
//     just above that line may come before it, and the range ends where the
//     definition does (its braces close on line B, or, with no braces, line
//     B ends in ';'). Two names share no range: "`a` and `b` (lines ...)"
//     is refused.
//   - "nn/file.h (lines A-B)" is a comment block of the file, whole.
//   - "Section N (lines A-B)" starts at the banner of the file's section N
//     and ends where section N+1's banner (or the namespace, or the file)
//     begins.
//   - Any other range, a step such as "the mask (lines 195-196)", must lie
//     inside a range named earlier in the same bullet when the bullet names
//     one, may not follow a parenthesis that names another file, and needs
//     its own "lines": "lines 110-112 and lines 156-157".
//
// What it cannot see: a step that still fits these rules after its lines
// moved inside a function whose own start and end did not move.
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

bool has_word(const std::string& line, const std::string& word) {
  for (size_t at = line.find(word); at != std::string::npos; at = line.find(word, at + 1)) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    const bool left = at == 0 || !ident(line[at - 1]);
    const bool right = at + word.size() >= line.size() || !ident(line[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// A source file's lines, 1-based, with the tests the rules above need.
struct Source {
  std::vector<std::string> lines;
  int size() const { return static_cast<int>(lines.size()); }
  const std::string& at(int i) const { return lines[i - 1]; }
  bool blank(int i) const { return at(i).find_first_not_of(' ') == std::string::npos; }
  bool comment(int i) const {
    if (i < 1 || i > size()) return false;
    const size_t k = at(i).find_first_not_of(' ');
    return k != std::string::npos && at(i).compare(k, 2, "//") == 0;
  }
  // A section rule, "// ====..." or "// ----...": it bounds comment blocks.
  bool banner(int i) const {
    return i >= 1 && i <= size() && (at(i).rfind("// ====", 0) == 0 || at(i).rfind("// ----", 0) == 0);
  }
  // A comment line that continues the one above it (not after a rule).
  bool continues_comment(int i) const { return comment(i) && comment(i - 1) && !banner(i - 1) && !banner(i); }
  // The code of line i without its // comment; braces and quotes respected.
  std::string code(int i) const {
    const std::string& s = at(i);
    std::string out;
    char quote = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      const char c = s[k];
      if (quote) {
        if (c == '\\' && k + 1 < s.size()) ++k;
        else if (c == quote) quote = 0;
        continue;  // a literal's text is not code
      }
      if (c == '/' && k + 1 < s.size() && s[k + 1] == '/') break;
      if (c == '"' || c == '\'') quote = c;
      out += c;
    }
    return out;
  }
  // Whether the definition starting on line d ends on line b: its braces
  // first close again on b, or, with no brace in [d, b], line b ends in ';'.
  bool definition_ends(int d, int b) const {
    int depth = 0;
    bool opened = false;
    for (int i = d; i <= b; ++i) {
      for (char c : code(i)) {
        if (c == '{') ++depth, opened = true;
        if (c == '}') --depth;
      }
      if (opened && depth == 0) return i == b;
    }
    if (opened) return false;
    const std::string c = code(b);
    const size_t last = c.find_last_not_of(' ');
    return last != std::string::npos && c[last] == ';';
  }
};

// The rules every range keeps, whatever it points at. Empty when it does.
std::string whole_lines(const Source& src, int a, int b) {
  if (a < 1 || b < a || b > src.size()) return "outside the file's " + std::to_string(src.size()) + " lines";
  if (src.blank(a) || src.blank(b)) return "starts or ends on a blank line";
  if (src.continues_comment(a)) return "starts inside a comment block (line " + std::to_string(a - 1) + " is one too)";
  if (src.continues_comment(b + 1)) return "ends inside a comment block (line " + std::to_string(b + 1) + " is one too)";
  return "";
}

std::string check_named(const Source& src, const std::string& name, int a, int b) {
  const std::string last = name.substr(name.rfind(':') == std::string::npos ? 0 : name.rfind(':') + 1);
  int d = a;
  while (d <= b && src.comment(d) && !src.banner(d)) ++d;  // the comment block above the definition
  if (d > b || !has_word(src.code(d), last))
    return "its first code line, " + std::to_string(std::min(d, b)) + ", does not name " + last;
  if (!src.definition_ends(d, b))
    return "the definition that starts on line " + std::to_string(d) + " does not end on line " + std::to_string(b);
  return "";
}

std::string check_file_comment(const Source& src, int a, int b) {
  for (int i = a; i <= b; ++i)
    if (!src.comment(i)) return "line " + std::to_string(i) + " is not part of a comment block";
  return "";
}

std::string check_section(const Source& src, int n, int a, int b) {
  const std::string title = "// " + std::to_string(n) + ".";
  bool titled = false;
  for (int i = a; i <= std::min(a + 2, b); ++i) titled |= src.at(i).rfind(title, 0) == 0;
  if (!titled) return "section " + std::to_string(n) + "'s title (\"" + title + "\") is not in its first three lines";
  int next = b + 1;
  while (next <= src.size() && src.blank(next)) ++next;
  if (next > src.size()) return "";
  const std::string& s = src.at(next);
  if (s.rfind("// ====", 0) == 0 || s.rfind("}  // namespace", 0) == 0) return "";
  return "line " + std::to_string(next) + " after it is not the next section's banner or the namespace's end";
}

struct Range {
  int a, b;
  size_t at = 0;  // where the page names it, in its block's text
};

// Checks one page; returns one message per broken pointer.
std::vector<std::string> check_page(const fs::path& root, const fs::path& page_path) {
  static const std::string path = R"((?:core|autograd|nn|optim|examples|tests|bench)/\w+\.(?:h|cpp|sh|py))";
  static const std::regex file_at_start("^(?:- )?(" + path + R"()(?: \(lines? (\d+)(?:-(\d+))?\))?)");
  static const std::regex named(R"(`([A-Za-z_~][\w:~]*)`(?:,[^`()]*)? \((?:()" + path +
                                R"(), )?lines? (\d+)(?:-(\d+))?\))");
  static const std::regex section(R"(\bSection (\d+)[^`()]* \(lines? (\d+)(?:-(\d+))?\))");
  static const std::regex any_range(R"(\b[Ll]ines? (\d+)(?:-(\d+))?\b)");
  static const std::regex shared_range(R"(`[A-Za-z_~][\w:~]*` and `[A-Za-z_~][\w:~]*`(?:,[^`()]*)? \((?:[^()]*, )?lines? \d)");
  static const std::regex bare_second(R"(\blines? \d+(?:-\d+)? and \d)");
  std::vector<std::string> errors;
  std::map<std::string, Source> sources;
  auto source = [&](const std::string& rel) -> const Source& {
    auto it = sources.find(rel);
    if (it == sources.end()) it = sources.emplace(rel, Source{read_lines(root / rel)}).first;
    return it->second;
  };
  const std::string page = page_path.filename().string();
  std::string file;  // the file the page is talking about
  for (const Block& blk : in_the_code_blocks(read_lines(page_path))) {
    const std::string where = page + ":" + std::to_string(blk.first_line) + ": ";
    const std::string& text = blk.text;
    auto fail = [&](const std::string& what, const std::string& why) {
      if (!why.empty()) errors.push_back(where + what + ": " + why);
    };
    std::vector<std::pair<size_t, size_t>> checked;  // spans of the text already checked
    std::vector<Range> named_here;                   // named ranges of this file, in text order
    size_t other_file_at = std::string::npos;        // where a parenthesis first names another file
    auto span_of = [](const std::smatch& m) {
      return std::make_pair(static_cast<size_t>(m.position(0)), static_cast<size_t>(m.position(0) + m.length(0)));
    };
    auto lines_of = [](const std::ssub_match& a, const std::ssub_match& b) {
      const int x = std::stoi(a);
      return std::make_pair(x, b.matched ? std::stoi(b) : x);
    };
    auto rng = [](int a, int b) { return "lines " + std::to_string(a) + "-" + std::to_string(b); };

    for (auto it = std::sregex_iterator(text.begin(), text.end(), shared_range); it != std::sregex_iterator(); ++it)
      fail("\"" + it->str() + "...\"", "two names share one range; give each its own");
    if (text.find("\xE2\x80\x93") != std::string::npos)  // an en dash, which the patterns would not read
      fail("an en dash", "write line ranges with '-'");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), bare_second); it != std::sregex_iterator(); ++it)
      fail("\"" + it->str() + "...\"", "write \"lines\" before the second range too");

    std::smatch m;
    if (std::regex_search(text, m, file_at_start)) {
      file = m[1];
      if (m[2].matched) {
        const auto [a, b] = lines_of(m[2], m[3]);
        const Source& src = source(file);
        std::string why = whole_lines(src, a, b);
        if (why.empty()) why = check_file_comment(src, a, b);
        fail(file + " (" + rng(a, b) + ")", why);
        named_here.push_back({a, b, 0});
        checked.push_back(span_of(m));
      }
    }
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it) {
      const std::smatch& n = *it;
      const std::string name = n[1], rel = n[2].matched ? std::string(n[2]) : file;
      const auto [a, b] = lines_of(n[3], n[4]);
      checked.push_back(span_of(n));
      if (n[2].matched && rel != file) other_file_at = std::min<size_t>(other_file_at, n.position(0));
      if (rel.empty()) {
        fail("`" + name + "`", "a line range but no file named before it");
        continue;
      }
      const Source& src = source(rel);
      std::string why = src.size() == 0 ? "cannot read " + rel : whole_lines(src, a, b);
      if (why.empty()) why = check_named(src, name, a, b);
      fail("`" + name + "` (" + rel + ", " + rng(a, b) + ")", why);
      if (rel == file) named_here.push_back({a, b, static_cast<size_t>(n.position(0))});
    }
    for (auto it = std::sregex_iterator(text.begin(), text.end(), section); it != std::sregex_iterator(); ++it) {
      const std::smatch& s = *it;
      const auto [a, b] = lines_of(s[2], s[3]);
      checked.push_back(span_of(s));
      if (file.empty()) continue;
      const Source& src = source(file);
      std::string why = whole_lines(src, a, b);
      if (why.empty()) why = check_section(src, std::stoi(s[1]), a, b);
      fail("Section " + std::string(s[1]) + " (" + file + ", " + rng(a, b) + ")", why);
    }
    for (auto it = std::sregex_iterator(text.begin(), text.end(), any_range); it != std::sregex_iterator(); ++it) {
      const size_t pos = it->position(0);
      bool done = false;
      for (auto [s, e] : checked) done |= pos >= s && pos < e;
      if (done) continue;
      const auto [a, b] = lines_of((*it)[1], (*it)[2]);
      const std::string what = rng(a, b) + " of " + (file.empty() ? "?" : file);
      if (file.empty()) {
        fail(what, "no file named before it");
        continue;
      }
      if (pos > other_file_at) {
        fail(what, "follows a parenthesis that names another file; name the file here too");
        continue;
      }
      std::string why = whole_lines(source(file), a, b);
      bool any = false, inside = false;
      for (const Range& r : named_here)
        if (r.at < pos) any = true, inside |= r.a <= a && b <= r.b;
      if (why.empty() && any && !inside) why = "not inside a range named earlier in the same bullet";
      fail(what, why);
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

TEST_CASE("the docs checker accepts true ranges and refuses each kind of drift") {
  // A page of its own, pointing into a file of its own.
  qkv::testing::TempDir tmp("qkv_docs_check");
  const fs::path dir = tmp.dir;
  fs::create_directories(dir / "nn");
  {
    std::ofstream src(dir / "nn" / "toy.cpp");
    src << "// toy: a file of two sections\n"     // 1
           "\n"                                    // 2
           "// ====\n"                             // 3
           "// 1. Doubling\n"                      // 4
           "// ====\n"                             // 5
           "// twice: 2 x\n"                       // 6
           "int twice(int x) {\n"                  // 7
           "  // doubles: \"}\" is not a brace\n"   // 8
           "  return 2 * x;\n"                     // 9
           "}\n"                                   // 10
           "\n"                                    // 11
           "// ====\n"                             // 12
           "// 2. Halving\n"                       // 13
           "// ====\n"                             // 14
           "struct Half {\n"                       // 15
           "  int operator()(int x) { return x / 2; }\n"  // 16
           "};\n"                                  // 17
           "const int kOne = 1;\n";                // 18
  }
  auto errors_for = [&](const std::string& bullet) {
    std::ofstream(dir / "page.md") << "# toy\n\n## In the code\n\n" << bullet << "\n";
    return check_page(dir, dir / "page.md");
  };
  // true ones
  CHECK(errors_for("- nn/toy.cpp (line 1): `twice` (lines 6-10), its return (line 9); `Half` (lines 15-17).").empty());
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7-10); `kOne` (line 18).").empty());
  CHECK(errors_for("- nn/toy.cpp: Section 1 (lines 3-10), Section 2 (lines 12-18).").empty());
  // each kind of drift: one error each
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 8-10).").size() == 1);    // starts inside the definition
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 5-10).").size() == 1);    // starts inside a comment block
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7-9).").size() == 1);     // stops before the closing brace
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7-11).").size() == 1);    // ends on a blank line
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7-17).").size() == 1);    // runs on into another definition
  CHECK(errors_for("- nn/toy.cpp: `Half` (lines 15-16).").size() == 1);    // the struct's brace is still open
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7-10), x (line 16).").size() == 1);  // not inside `twice`
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7-40).").size() == 1);    // past the end of the file
  CHECK(errors_for("- `twice` (lines 7-10).").size() == 1);                // no file named
  CHECK(errors_for("- nn/toy.cpp (lines 1-3): toy.").size() == 1);        // past the comment block
  CHECK(errors_for("- nn/toy.cpp: Section 1 (lines 3-9).").size() == 1);   // stops inside the section
  CHECK(errors_for("- nn/toy.cpp: Section 2 (lines 3-10).").size() == 1);  // another section's title
  CHECK(errors_for("- nn/toy.cpp: `twice` and `Half` (lines 7-17).").size() >= 1);  // one range, two names
  CHECK(errors_for("- nn/toy.cpp: the two (lines 7-9 and 15-17).").size() == 1);    // second "lines" missing
  CHECK(errors_for("- nn/toy.cpp: `twice` (lines 7\xE2\x80\x93" "10).").size() >= 1);  // an en dash
  CHECK(errors_for("- nn/toy.cpp: `f` (nn/other.cpp, lines 1-2), then x (line 9).").size() >= 1);  // which file?
}
