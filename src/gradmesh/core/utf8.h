// UTF-8 encoding of one code point, shared by the JSON reader's \u escapes
// and the character vocabulary's decoding.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh {

// Appends `code_point` (at most U+10FFFF) to `out` as one to four UTF-8 bytes.
void append_utf8(uint32_t code_point, std::string& out);

}  // namespace gradmesh
