// The files the page embeds, included byte for byte by the assembler and
// ended with a 0 byte (the Makefile rebuilds this object when they change).
// Paths are relative to the top of the tree, where make runs the compiler.
#include "explorer/assets.h"

#define QKV_EMBED(symbol, file)         \
  __asm__(                              \
      ".section .rodata\n"              \
      ".global " #symbol                \
      "\n"                              \
      ".type " #symbol                  \
      ", @object\n"                     \
      ".balign 16\n" #symbol            \
      ":\n"                             \
      ".incbin \"" file                 \
      "\"\n"                            \
      ".byte 0\n"                       \
      ".size " #symbol ", . - " #symbol \
      "\n"                              \
      ".previous\n");                   \
  extern "C" const char symbol[];

QKV_EMBED(qkv_explorer_page_js, "explorer/page.js")
QKV_EMBED(qkv_explorer_page_css, "explorer/page.css")
QKV_EMBED(qkv_explorer_pan_zoom_js, "explorer/vendor/svg-pan-zoom.min.js")
QKV_EMBED(qkv_explorer_pan_zoom_licence, "explorer/vendor/svg-pan-zoom.LICENSE")

namespace qkv::explorer::assets {

const char* page_js() { return qkv_explorer_page_js; }
const char* page_css() { return qkv_explorer_page_css; }
const char* pan_zoom_js() { return qkv_explorer_pan_zoom_js; }
const char* pan_zoom_licence() { return qkv_explorer_pan_zoom_licence; }

}  // namespace qkv::explorer::assets
