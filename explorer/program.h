// What a program that writes an explorer page needs besides the page.
//
// The explorer's proofs are finite differences in float64, so a float32
// program that writes a page hands the work to its float64 build: the same
// program built against the float64 library (build/rel-f64/NAME beside
// build/rel-f32/NAME), run with the same arguments. It reads float32
// checkpoints as they are (the safetensors reader converts).
#pragma once
#include <string>

namespace qkv::explorer {

// In a float32 build: replaces this process with its float64 twin, run with
// `argv` (execv); returns only in a float64 build (there is nothing to do).
// Throws qkv::Error naming `flag` and the missing file when the twin is not
// built, with the make command that builds it.
void run_in_float64(const char* flag, char** argv);

// The docs/ folder of the source tree this program was built in
// (build/rel-f64/NAME -> docs/), as a file:// URL for the page's "derived in"
// links (PageOptions::docs_base); empty when there is none.
std::string docs_url_beside_build();

}  // namespace qkv::explorer
