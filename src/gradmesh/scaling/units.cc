#include "gradmesh/scaling/units.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "gradmesh/core/error.h"

namespace gradmesh::scaling {
namespace {

// The number in front of a known unit, times the unit's factor; NaN when the text is neither.
double scaled(const std::string& text, std::initializer_list<std::pair<const char*, double>> units) {
  for (const auto& [unit, factor] : units) {
    const std::string u(unit);
    if (text.size() <= u.size() || text.compare(text.size() - u.size(), u.size(), u) != 0) continue;
    const std::string number = text.substr(0, text.size() - u.size());
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !std::isfinite(v)) return std::nan("");
    return v * factor;
  }
  return std::nan("");
}

}  // namespace

double parse_rate(const std::string& text, const std::string& what) {
  // Longest suffixes first: "bit" ends each of them.
  const double v = scaled(text, {{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1.0}});
  if (!(v > 0) || v > 1e15)
    throw_error(ErrorKind::kUsage, what + " '" + text + "'", "expected a rate such as 10gbit, 200mbit or 800kbit");
  return v;
}

double parse_latency(const std::string& text, const std::string& what) {
  const double v = scaled(text, {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}});
  if (!(v >= 0) || v > 60)
    throw_error(ErrorKind::kUsage, what + " '" + text + "'", "expected a time such as 50us, 1ms or 0.2ms (at most 60s)");
  return v;
}

int64_t parse_memory_size(const std::string& text) {
  const double v = scaled(text, {{"GiB", 1024.0 * 1024 * 1024}, {"MiB", 1024.0 * 1024}, {"KiB", 1024.0},
                                 {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}});
  if (!(v >= 1) || v > 9e18)
    throw_error(ErrorKind::kUsage, "--memory-limit '" + text + "'", "expected a size such as 16GiB, 512MiB or 1.5GB");
  return static_cast<int64_t>(v);
}

}  // namespace gradmesh::scaling
