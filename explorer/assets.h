// The page's script, style and vendored library, built into the library from
// the files beside this one (explorer/assets.cpp includes them with the
// assembler's .incbin, so the page works wherever the program runs).
#pragma once

namespace qkv::explorer::assets {

const char* page_js();           // explorer/page.js
const char* page_css();          // explorer/page.css
const char* pan_zoom_js();       // explorer/vendor/svg-pan-zoom.min.js (npm svg-pan-zoom 3.6.2)
const char* pan_zoom_licence();  // explorer/vendor/svg-pan-zoom.LICENSE (BSD-2-Clause)

}  // namespace qkv::explorer::assets
