// The docs point into the code by name; this test checks what a reader would
// notice breaking, and nothing else. In every docs/*.md page:
//
//   1. A file the page names exists: a path such as nn/attention.cpp whose
//      first folder is a folder of the repository (not build* or runs) and
//      that ends in .h, .cpp, .py, .sh, .md or .svg; and the target of every
//      relative link or image.
//   2. A name in backticks next to a file is defined in that file:
//      "`name` (nn/file.cpp", "(`name`, nn/file.cpp", "nn/file.cpp (`name`";
//      and, in an "## In the code" section, every `name` of a paragraph or
//      bullet that starts with a file ("- nn/layernorm.cpp: `layer_norm`").
//      Defined: a line of the file (comments aside) declares or defines it
//      (`struct name`, `class name`, `using name`, `#define name`, a type then
//      `name(`, `name =`, `name;` ..., or `name(` at the start of a line), by
//      its full name or by its last part after ::. "Section N" in such a
//      paragraph is the file's banner line "// N. ...".
//   3. A "quoted name" in a paragraph that starts with tests/test_x.cpp, or in
//      the bullets under it, is the name of a TEST_CASE in that file.
//
// Line numbers in the code are not pointed at, so moving code never fails
// this test; renaming or removing what a page names does, with a message that
// names the page, its line, the name and the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "fixture.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string s; std::getline(in, s);) lines.push_back(s);
  return lines;
}

// A paragraph or bullet joined into one line, remembering where each page
// line starts in it (for messages that give the page's line).
struct Block {
  std::string text, section;  // section: the "## ..." heading it is under
  bool bullet = false;
  std::vector<std::pair<size_t, int>> starts;  // (offset in text, page line)
  int line_at(size_t pos) const {
    int line = starts.front().second;
    for (const auto& [off, l] : starts)
      if (off <= pos) line = l;
    return line;
  }
};

std::vector<Block> blocks_of(const std::vector<std::string>& page) {
  std::vector<Block> blocks;
  std::string section;
  bool open = false;
  for (int i = 0; i < static_cast<int>(page.size()); ++i) {
    const std::string& s = page[i];
    const size_t indent = s.find_first_not_of(' ');
    if (indent == std::string::npos || s[0] == '#') {
      if (s.rfind("## ", 0) == 0) section = s.substr(3);
      open = false;
      continue;
    }
    const bool bullet = s.compare(indent, 2, "- ") == 0;
    if (!open || bullet) {
      blocks.push_back({"", section, bullet, {}});
      open = true;
    } else {
      blocks.back().text += ' ';
    }
    Block& b = blocks.back();
    b.starts.push_back({b.text.size(), i + 1});
    b.text += s.substr(bullet ? indent + 2 : indent);
  }
  return blocks;
}

// The TEST_CASE names of a test file, adjacent literals joined, whitespace
// runs made one space (as a page wraps them).
std::set<std::string> test_names(const std::string& source) {
  static const std::regex test_case(R"re(TEST_CASE\s*\(((?:\s*"(?:[^"\\]|\\.)*")+))re");
  static const std::regex literal(R"re("((?:[^"\\]|\\.)*)")re");
  std::set<std::string> names;
  for (std::sregex_iterator it(source.begin(), source.end(), test_case), end; it != end; ++it) {
    const std::string parts = (*it)[1];
    std::string name;
    for (std::sregex_iterator l(parts.begin(), parts.end(), literal); l != end; ++l)
      name += (*l)[1];
    std::istringstream words(name);
    std::string word, joined;
    while (words >> word) joined += (joined.empty() ? "" : " ") + word;
    names.insert(joined);
  }
  return names;
}

// Whether a line of `source` (its // comments dropped) declares or defines
// `name`, or, with n a number as "Section n", is the banner "// n. ...".
bool defines(const std::string& source, const std::string& name) {
  static const std::regex section(R"(Section (\d+))");
  std::smatch m;
  if (std::regex_match(name, m, section))
    return std::regex_search(source, std::regex("(^|\n)//\\s*" + std::string(m[1]) + "\\. "));
  const size_t colons = name.rfind("::");
  std::vector<std::string> forms{name};
  if (colons != std::string::npos) forms.push_back(name.substr(colons + 2));
  for (const std::string& n : forms) {
    const std::string id = "(?:\\w+::)*" + n + "\\b";  // ~ and : are plain in a regex
    const std::vector<std::regex> rules{
        std::regex("\\b(?:struct|class|enum|union|using|namespace|#define)\\s+" + id),
        // a type, then the name: a function, a member, a constant, a parameter
        std::regex("^\\s*(?!(?:return|else|throw|case|delete|new|goto)\\b)[\\w:<>,*&~]+"
                   "(?:\\s+[\\w:<>,*&~]+)*[\\s*&]+" +
                   id + "\\s*[({=;\\[,)]"),
        std::regex("^" + id + "\\s*\\("),  // at the start of a line: Var::~Var() {
    };
    std::istringstream lines(source);
    for (std::string line; std::getline(lines, line);) {
      const size_t comment = line.find("//");
      if (comment != std::string::npos) line.resize(comment);
      for (const std::regex& r : rules)
        if (std::regex_search(line, r)) return true;
    }
  }
  return false;
}

// Checks one page; returns one message per broken pointer.
std::vector<std::string> check_page(const fs::path& root, const fs::path& page_path) {
  static const std::regex path_re(R"((^|[^\w./-])((\w+)/[\w./-]*\.(?:h|cpp|py|sh|md|svg))(?!\w))");
  static const std::regex link_re(R"(\]\(([^)\s]+)\))");
  static const std::regex ident = std::regex(R"(`([A-Za-z_~][\w:~]*)(?:\(\))?`)");
  static const std::regex section_re(R"(\bSection \d+)");
  static const std::regex quoted(R"re("([^"]+)")re");
  const std::string page = fs::relative(page_path, root).generic_string();
  std::vector<std::string> errors;
  std::map<std::string, std::string> sources;
  auto source = [&](const std::string& rel) -> const std::string& {
    auto it = sources.find(rel);
    if (it == sources.end()) it = sources.emplace(rel, read_file(root / rel)).first;
    return it->second;
  };
  auto is_file = [&](const std::string& rel) { return fs::is_regular_file(root / rel); };
  auto at = [&](const Block& b, size_t pos) { return page + ":" + std::to_string(b.line_at(pos)); };

  std::string tests, section;  // the test file of the paragraph, for its bullets
  for (const Block& b : blocks_of(split_lines(read_file(page_path)))) {
    const std::string& text = b.text;
    if (b.section != section) tests.clear(), section = b.section;
    // 1. files and links
    std::vector<std::pair<size_t, std::string>> paths;  // (where, path), existing or not
    for (std::sregex_iterator it(text.begin(), text.end(), path_re), end; it != end; ++it) {
      const std::string rel = (*it)[2], top = (*it)[3];
      // Not a path into the tree: build output, runs, or no such folder.
      if (top.rfind("build", 0) == 0 || top == "runs" || !fs::is_directory(root / top)) continue;
      const size_t pos = it->position(2);
      paths.push_back({pos, rel});
      if (!fs::exists(root / rel))
        errors.push_back(at(b, pos) + " names " + rel + ", which does not exist");
    }
    for (std::sregex_iterator it(text.begin(), text.end(), link_re), end; it != end; ++it) {
      std::string target = (*it)[1];
      if (target.find(':') != std::string::npos || target[0] == '#') continue;  // a URL, an anchor
      target = target.substr(0, target.find('#'));
      if (!fs::exists(page_path.parent_path() / target))
        errors.push_back(at(b, it->position(1)) + " links to " + target + ", which does not exist");
    }
    // 2. names next to a file
    const bool leads = !paths.empty() && paths.front().first == 0 && is_file(paths.front().second);
    const bool in_code = leads && b.section.rfind("In the code", 0) == 0;
    auto check_name = [&](size_t pos, const std::string& name, const std::string& rel) {
      if (!is_file(rel) || defines(source(rel), name)) return;
      if (name.rfind("Section ", 0) == 0)
        errors.push_back(at(b, pos) + " names " + name + " of " + rel +
                         ", which has no banner \"// " + name.substr(8) + ". ...\"");
      else
        errors.push_back(at(b, pos) + " names `" + name + "` in " + rel +
                         ", which does not define it");
    };
    for (std::sregex_iterator it(text.begin(), text.end(), ident), end; it != end; ++it) {
      const size_t pos = it->position(0), after = pos + it->length(0);
      const std::string name = (*it)[1];
      std::string rel;
      for (const auto& [p, path] : paths) {
        const bool name_then_file = p == after + 2 && text.compare(after, 2, " (") == 0;
        const bool in_parens_then_file =
            pos > 0 && text[pos - 1] == '(' && p == after + 2 && text.compare(after, 2, ", ") == 0;
        const bool file_then_name =
            p + path.size() + 2 == pos && text.compare(pos - 2, 2, " (") == 0;
        if (name_then_file || in_parens_then_file || file_then_name) rel = path;
      }
      if (rel.empty() && in_code) rel = paths.front().second;
      if (!rel.empty()) check_name(pos, name, rel);
    }
    if (in_code)
      for (std::sregex_iterator it(text.begin(), text.end(), section_re), end; it != end; ++it)
        check_name(it->position(0), it->str(), paths.front().second);
    // 3. test names
    if (!b.bullet) {
      tests.clear();
      if (leads && paths.front().second.rfind("tests/", 0) == 0) tests = paths.front().second;
    }
    if (!tests.empty()) {
      const std::set<std::string> names = test_names(source(tests));
      for (std::sregex_iterator it(text.begin(), text.end(), quoted), end; it != end; ++it)
        if (!names.count((*it)[1]))
          errors.push_back(at(b, it->position(0)) + " names the test \"" + std::string((*it)[1]) +
                           "\" in " + tests + ", which has no TEST_CASE of that name");
    }
  }
  return errors;
}

}  // namespace

TEST_CASE("docs/*.md: every file, link, name and test a page points to exists") {
  const fs::path root = qkv::repo_root();
  int pages = 0;
  for (const auto& entry : fs::directory_iterator(root / "docs")) {
    if (entry.path().extension() != ".md") continue;
    ++pages;
    for (const std::string& e : check_page(root, entry.path())) FAIL_CHECK(e);
  }
  CHECK(pages >= 8);
}

TEST_CASE("the docs checker accepts true pointers and refuses each kind of break") {
  qkv::testing::TempDir tmp("qkv_docs_check");
  const fs::path dir = tmp.dir;
  fs::create_directories(dir / "nn");
  fs::create_directories(dir / "tests");
  fs::create_directories(dir / "docs");
  std::ofstream(dir / "nn" / "toy.cpp") << "// ====\n// 1. Doubling\n// ====\n"
                                           "struct Half { int operator()(int x) const; };\n"
                                           "int twice(int x) {\n"
                                           "  return helper(x);  // not helper's definition\n"
                                           "}\n"
                                           "Half::Half() {}\n";
  std::ofstream(dir / "tests" / "test_toy.cpp") << "TEST_CASE(\"twice doubles, \"\n"
                                                   "          \"even zero\") {}\n";
  std::ofstream(dir / "docs" / "other.md") << "# other\n";
  auto errors_for = [&](const std::string& text) {
    std::ofstream(dir / "docs" / "page.md") << "# toy\n\n## In the code\n\n" << text << "\n";
    return check_page(dir, dir / "docs" / "page.md");
  };
  CHECK(errors_for("- nn/toy.cpp, Section 1: `twice`, `Half`, `Half::Half`.\n- [it](other.md)")
            .empty());
  CHECK(errors_for("See `twice` (nn/toy.cpp) and nn/toy.cpp (`Half`).").empty());
  CHECK(errors_for("tests/test_toy.cpp:\n\n- \"twice doubles,\n  even zero\"").empty());
  const std::vector<std::string> one = errors_for("- nn/toy.cpp: `helper`.");
  REQUIRE(one.size() == 1);
  CHECK(one[0] == "docs/page.md:5 names `helper` in nn/toy.cpp, which does not define it");
  CHECK(errors_for("- nn/toy.cpp: Section 2.").size() == 1);          // no such banner
  CHECK(errors_for("- nn/gone.cpp: `twice`.").size() == 1);           // no such file
  CHECK(errors_for("Read [it](gone.md).").size() == 1);               // a broken link
  CHECK(errors_for("Elsewhere `thrice` (nn/toy.cpp).").size() == 1);  // a name next to a file
  CHECK(errors_for("tests/test_toy.cpp:\n\n- \"twice doubles\"").size() == 1);  // a test renamed
}

// The numbers of docs/matrix-rule.md, section 4, through the engine.
TEST_CASE(
    "docs/matrix-rule.md's worked example: dA = dC B^T = [[5,7],[12,16]] and dB = A^T dC = "
    "[[1,6],[2,8]]") {
  using qkv::Tensor;
  using qkv::Var;
  Var A(Tensor::from_vector({1, 2, 3, 4}, {2, 2}), true);
  Var B(Tensor::from_vector({5, 6, 7, 8}, {2, 2}), true);
  const Var C = qkv::matmul(A, B);  // [[19, 22], [43, 50]]
  Var L = qkv::sum(qkv::mul(C, Var(Tensor::from_vector({1, 0, 0, 2}, {2, 2}))));  // c11 + 2 c22
  L.backward();
  CHECK(C.data().to_vector() == std::vector<qkv::real>{19, 22, 43, 50});
  CHECK(A.grad().to_vector() == std::vector<qkv::real>{5, 7, 12, 16});
  CHECK(B.grad().to_vector() == std::vector<qkv::real>{1, 6, 2, 8});
}
