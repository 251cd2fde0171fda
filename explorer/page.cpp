// The page: the HTML shell, the traces as JSON script blocks, each graph laid
// out by Graphviz, then the script. What the page does is explorer/page.js.
#include "explorer/page.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "explorer/assets.h"
#include "io/output_file.h"
#include "io/run_program.h"

namespace qkv::explorer {

namespace {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Text safe inside <script>: "</" can occur only inside JSON strings, where
// "<\/" means the same.
std::string script_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') out += '\\';
  }
  return out;
}

// A temporary file in $TMPDIR (else /tmp) that is removed with this object.
// Its name goes to Graphviz as an argument, never through a shell.
struct TempFile {
  std::string path;
  explicit TempFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string t = std::string(dir && *dir ? dir : "/tmp") + "/qkv-explorer-XXXXXX" + suffix;
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    const int fd = mkstemps(buf.data(), static_cast<int>(std::string(suffix).size()));
    if (fd < 0)
      throw Error("explorer: cannot create a temporary file " + brief(t) + ": " +
                  std::strerror(errno));
    close(fd);
    path = buf.data();
  }
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace

std::string layout_svg(const std::string& dot) {
  const std::string program = find_program("dot");
  if (program.empty())
    throw Error(
        "explorer: Graphviz's `dot` is not installed (it lays out the graph): apt-get install "
        "graphviz");
  const TempFile in(".dot");
  {
    std::ofstream f(in.path);
    f << dot;
    if (!f) throw Error("explorer: cannot write " + in.path);
  }
  const ProgramRun r = run_program({program, "-Tsvg", in.path});
  if (r.status != 0)
    throw Error("explorer: `dot -Tsvg` (" + program + ") failed with status " +
                std::to_string(r.status) + ": " +
                (r.err.empty() ? std::string("(no message)") : brief(r.err)));
  const size_t start = r.out.find("<svg");
  if (start == std::string::npos) throw Error("explorer: `dot -Tsvg` wrote no <svg>");
  return r.out.substr(start);
}

std::string page_html(const std::vector<Trace>& traces, const PageOptions& options) {
  if (traces.empty()) throw Error("explorer: no trace to show");
  std::string h;
  h.reserve(1 << 20);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + html_escape(options.title) + "</title>\n";
  h += "<style>\n" + std::string(assets::page_css()) + "</style>\n</head>\n";
  h += "<body data-docs-base=\"" + html_escape(options.docs_base) + "\" data-command=\"" +
       html_escape(options.command) + "\">\n";
  h += "<noscript>This page needs JavaScript.</noscript>\n";
  for (size_t i = 0; i < traces.size(); ++i) {
    const std::string n = std::to_string(i);
    h += "<script type=\"application/json\" class=\"qkv-trace\" id=\"trace-" + n + "\">" +
         script_safe(traces[i].json) + "</script>\n";
    h += "<template id=\"graph-" + n + "\">" + layout_svg(traces[i].dot) + "</template>\n";
  }
  h += "<!-- svg-pan-zoom 3.6.2 (npm), https://github.com/bumbu/svg-pan-zoom, its licence:\n" +
       std::string(assets::pan_zoom_licence()) + "-->\n";
  h += "<script>\n" + std::string(assets::pan_zoom_js()) + "\n</script>\n";
  h += "<script>\n" + std::string(assets::page_js()) + "\n</script>\n";
  h += "</body>\n</html>\n";
  return h;
}

void write_page(const std::vector<Trace>& traces, const std::string& path,
                const PageOptions& options) {
  write_file_atomically(path, "explorer: " + path, page_html(traces, options));
}

}  // namespace qkv::explorer
