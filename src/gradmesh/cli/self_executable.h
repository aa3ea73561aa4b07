// This program's own path, so the launcher can start copies of it as workers
// (gradmesh train --nproc-per-node, gradmesh serve --nproc).
#pragma once

#include <string>

namespace gradmesh::cli {

// Error(kIo) when /proc/self/exe cannot be read.
std::string self_executable();

}  // namespace gradmesh::cli
