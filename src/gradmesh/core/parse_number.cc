#include "gradmesh/core/parse_number.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace gradmesh {
namespace {

// std::from_chars already refuses blanks, '+' and "0x"; what remains is to
// insist that it consumed every character and that the value fit.
template <class T>
std::optional<T> whole(std::string_view text) {
  if (text.empty()) return std::nullopt;
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end) return std::nullopt;
  return value;
}

std::string shortest(double value) {
  char buffer[32];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc{} ? std::string(buffer, ptr) : std::to_string(value);
}

}  // namespace

std::optional<int64_t> try_parse_int(std::string_view text, int64_t min, int64_t max) {
  const std::optional<int64_t> value = whole<int64_t>(text);
  if (!value || *value < min || *value > max) return std::nullopt;
  return value;
}

std::optional<double> try_parse_double(std::string_view text, double min, double max) {
  const std::optional<double> value = whole<double>(text);
  if (!value || !std::isfinite(*value) || *value < min || *value > max) return std::nullopt;
  return value;
}

std::string int_range_text(int64_t min, int64_t max) {
  if (min == kInt64Min && max == kInt64Max) return "";
  if (max == kInt64Max) return ">= " + std::to_string(min);
  if (min == kInt64Min) return "<= " + std::to_string(max);
  return "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

std::string double_range_text(double min, double max) {
  return "in [" + shortest(min) + ", " + shortest(max) + "]";
}

int64_t parse_int(std::string_view text, const std::string& what, int64_t min, int64_t max, ErrorKind kind) {
  if (const std::optional<int64_t> value = try_parse_int(text, min, max)) return *value;
  const std::string range = int_range_text(min, max);
  throw_error(kind, what,
              "expected a decimal integer" + (range.empty() ? "" : " " + range) + ", got '" + std::string(text) + "'");
}

double parse_double(std::string_view text, const std::string& what, double min, double max, ErrorKind kind) {
  if (const std::optional<double> value = try_parse_double(text, min, max)) return *value;
  throw_error(kind, what,
              "expected a finite number " + double_range_text(min, max) + ", got '" + std::string(text) + "'");
}

}  // namespace gradmesh
