// The link rate and latency a user names on the command line, in tc's
// spelling: "10gbit", "200mbit", "1.5gbit", "800kbit", "1000000bit";
// "50us", "1ms", "0.2ms", "1s".
#pragma once

#include <string>

namespace gradmesh::scaling {

// Bits per second (1 gbit = 1e9, as tc counts). Error(kUsage) naming `what`
// for anything else, zero or negative.
double parse_rate(const std::string& text, const std::string& what);
// Seconds (>= 0). Error(kUsage) naming `what` for anything else.
double parse_latency(const std::string& text, const std::string& what);

}  // namespace gradmesh::scaling
