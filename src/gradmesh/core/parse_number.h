// Text to number: the one place gradmesh turns a string into an integer or a
// real (environment variables, command-line values, store values, /proc).
//
// One grammar everywhere, so a value accepted in one place is accepted in
// every other: the WHOLE text is the number, with no blanks around it, no
// leading '+', no hex or octal prefix. Integers are an optional '-' and
// decimal digits; reals are what std::from_chars accepts ("1", "0.5", "-2",
// "1e3"), finite only ("inf" and "nan" are refused). A value outside
// [min, max] is refused, including one that does not fit the type at all
// ("9223372036854775808").
//
// The try_ forms return nullopt and let the caller word its own message; the
// others throw Error(kind) naming `what` (the variable, flag or key), the
// text and the range that was expected.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "gradmesh/core/error.h"

namespace gradmesh {

inline constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::optional<int64_t> try_parse_int(std::string_view text, int64_t min = kInt64Min, int64_t max = kInt64Max);
std::optional<double> try_parse_double(std::string_view text, double min, double max);

// "<what>: expected an integer in [min, max], got '<text>'" as Error(kind).
int64_t parse_int(std::string_view text, const std::string& what, int64_t min, int64_t max,
                  ErrorKind kind = ErrorKind::kUsage);
// "<what>: expected a finite number in [min, max], got '<text>'" as Error(kind).
double parse_double(std::string_view text, const std::string& what, double min, double max,
                    ErrorKind kind = ErrorKind::kUsage);

// How the messages above word a range: "in [1, 65535]", ">= 0", "" (any int64).
std::string int_range_text(int64_t min, int64_t max);
std::string double_range_text(double min, double max);

}  // namespace gradmesh
