// The gradient explorer's page: one self-contained HTML file (every script,
// style and number inside it; it opens from disk with no server and no
// network) built from one or more traces (explorer/trace.h). It shows the
// graph laid out by Graphviz (`dot -Tsvg`, run here; one box per module, as
// write_dot draws it), a panel for the clicked node (op, module path, shapes,
// forward formula, backward rule, docs page, value and gradient heatmaps,
// attention P per head, the finite-difference proof of each leaf element),
// and buttons and arrow keys that step through the backward pass in the
// engine's order, or through the forward. docs/explorer.md is its manual.
//
//   explorer::Trace t = explorer::record_trace(loss_fn, &model, options);
//   explorer::write_page({t}, "explain.html");
//
// The page's script and style are explorer/page.js and explorer/page.css,
// built into the library (explorer/assets.cpp), with svg-pan-zoom
// (explorer/vendor/, BSD-2-Clause, its licence kept in the page).
#pragma once
#include <string>
#include <vector>

#include "explorer/trace.h"

namespace qkv::explorer {

struct PageOptions {
  std::string title = "qkv gradient explorer";
  // Where the "derived in" links point: the docs/ folder as a URL
  // ("file:///home/me/qkv/docs/"); empty: the page names the file
  // (docs/attention-backward.md) without a link.
  std::string docs_base;
  // The command that made the page, shown in its footer.
  std::string command;
};

// The page as a string. Throws qkv::Error when Graphviz's `dot` is missing or fails.
std::string page_html(const std::vector<Trace>& traces, const PageOptions& options = {});

// Writes page_html to `path` atomically (write_file_atomically,
// io/output_file.h: a symlink is written through; a device, FIFO, socket or
// dangling symlink is refused). Throws qkv::Error naming the path when it
// cannot be written.
void write_page(const std::vector<Trace>& traces, const std::string& path,
                const PageOptions& options = {});

// Graphviz's layout of a DOT graph as SVG text, without the XML prologue:
// `dot -Tsvg FILE` run without a shell (io/run_program.h) on a temporary copy
// of `dot` in $TMPDIR. Throws qkv::Error when `dot` is not installed, or when
// it fails, quoting its stderr.
std::string layout_svg(const std::string& dot);

}  // namespace qkv::explorer
