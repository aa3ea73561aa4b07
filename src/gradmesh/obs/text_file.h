// Writes a small text output (trace, report) so that a reader never sees half
// a file: into a temporary next to it, then renamed over it.
#pragma once

#include <string>

namespace gradmesh::obs {

// Error(kIo) naming `path` when it cannot be written.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace gradmesh::obs
