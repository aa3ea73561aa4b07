// The config schema: one entry per key, the single source for validation,
// defaults and docs/config.md. The parser (config.cc) only turns TOML nodes
// into KeyValues; everything a key means lives in its KeySpec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gradmesh/train/config.h"

namespace gradmesh::train {

// A typed key value; the alternative is the member's type (seeds, stored as
// uint64_t, travel as int64_t because TOML integers are int64).
using KeyValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

enum class KeyType { kBool = 0, kInt = 1, kFloat = 2, kString = 3, kIntList = 4 };

// What values a key accepts beyond its type. Bounds apply to numbers and to
// each entry of an integer array; choices apply to strings.
struct KeyConstraint {
  std::optional<double> lo, hi;
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;
  size_t min_items = 0;  // integer arrays
};

struct KeySpec {
  std::string section;  // "optim"
  std::string path;     // "optim.lr"
  KeyType type;
  KeyValue default_value;
  KeyConstraint constraint;
  std::string doc;
  // Typed access to the member this key fills (generated from a member pointer).
  KeyValue (*get)(const Config& config);
  void (*set)(Config& config, const KeyValue& value);
  // The same member on a lone section struct (used by its default constructor);
  // `section_struct` must point to the struct that `section` names.
  void (*set_in_section)(void* section_struct, const KeyValue& value);
};

struct SectionSpec {
  std::string name;  // "optim"
  std::string doc;
};

// Sections and keys in documentation (and config_to_toml) order.
const std::vector<SectionSpec>& config_sections();
const std::vector<KeySpec>& config_schema();

// nullptr when `path` ("optim.lr") is not a key.
const KeySpec* find_key(const std::string& path);
bool is_section(const std::string& name);

// The closest of `candidates` to `name` when it is close enough to be a
// likely typo (small edit distance, or one is a prefix of the other), else "".
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

// "" when `value` (already of the key's type) is allowed, else the message
// tail "expected <what>, got <value>". For integer arrays the failing entry
// is named by `*index_out` (or left at -1 for a count problem).
std::string check_value(const KeySpec& spec, const KeyValue& value, int64_t* index_out);

// What the key accepts, as an English phrase: "a number in [0, 1)",
// "an integer >= 1", "one of \"mlp\", \"cnn\"".
std::string describe_expected(const KeySpec& spec);
// The type alone, as a phrase: "an integer", "a number", "an array of integers".
std::string describe_type(KeyType type);

// TOML text of a value: shortest round-trip floats (always with a '.' or an
// exponent), quoted and escaped strings, "[1, 2]" arrays.
std::string format_value(const KeyValue& value);
// Shortest text that reads back to the same double, for messages ("0.05", "1e-08", "-1").
std::string number_text(double value);
std::string toml_quote(const std::string& text);

}  // namespace gradmesh::train
