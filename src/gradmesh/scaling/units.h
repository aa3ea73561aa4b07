// The link rate and latency a user names on the command line, in tc's
// spelling: "10gbit", "200mbit", "1.5gbit", "800kbit", "1000000bit";
// "50us", "1ms", "0.2ms", "1s".
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::scaling {

// Bits per second (1 gbit = 1e9, as tc counts). Error(kUsage) naming `what`
// for anything else, zero or negative.
double parse_rate(const std::string& text, const std::string& what);
// Seconds (>= 0). Error(kUsage) naming `what` for anything else.
double parse_latency(const std::string& text, const std::string& what);
// "16GiB", "512MiB", "64KiB", "1.5GB", "500MB", "64KB" -> bytes (> 0).
// Error(kUsage) naming --memory-limit otherwise.
int64_t parse_memory_size(const std::string& text);

}  // namespace gradmesh::scaling
