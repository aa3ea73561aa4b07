// A flat JSON object built field by field, for metrics lines and trace event
// arguments: numbers, strings, booleans, arrays of numbers, tables of numbers
// ([row][column]) and nested objects. The fields are
// kept as plain values here and rendered by nlohmann-json in json_object.cc,
// so this header stays light and no caller ever assembles JSON text by hand.
//
// Rendering rules (the same for every JSON file gradmesh writes):
// - non-finite doubles (NaN, +-inf) become null: JSON has no such numbers,
//   and strict parsers reject Python's NaN/Infinity extensions;
// - strings are UTF-8: bytes that are not valid UTF-8 become U+FFFD, control
//   characters are escaped, so every line parses whatever text it carries;
// - fields keep the order they were added in; adding a key again replaces
//   its value in place.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace gradmesh::obs {

class JsonObject {
 public:
  using Table = std::vector<std::vector<double>>;
  using Value = std::variant<double, int64_t, std::string, bool, std::vector<double>, std::vector<std::string>,
                             Table, std::shared_ptr<const JsonObject>>;

  JsonObject& add(const std::string& key, double value) { return set(key, value); }
  JsonObject& add(const std::string& key, int64_t value) { return set(key, value); }
  JsonObject& add(const std::string& key, int value) { return set(key, static_cast<int64_t>(value)); }
  JsonObject& add(const std::string& key, const std::string& value) { return set(key, value); }
  JsonObject& add(const std::string& key, const char* value) { return set(key, std::string(value)); }
  JsonObject& add(const std::string& key, bool value) { return set(key, value); }
  JsonObject& add(const std::string& key, std::vector<double> values) { return set(key, std::move(values)); }
  JsonObject& add(const std::string& key, std::vector<std::string> values) { return set(key, std::move(values)); }
  JsonObject& add(const std::string& key, Table rows) { return set(key, std::move(rows)); }
  JsonObject& add(const std::string& key, const JsonObject& nested) {
    return set(key, std::make_shared<const JsonObject>(nested));
  }

  bool empty() const { return fields_.empty(); }
  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }
  // Compact JSON on one line ("{}" when empty).
  std::string str() const;

 private:
  JsonObject& set(const std::string& key, Value value);
  std::vector<std::pair<std::string, Value>> fields_;
};

// Escapes a string body the JSON way, and DEL too, so that the result is also
// a valid TOML basic-string body: train/config_schema.cc quotes TOML values
// with it. JSON output itself goes through JsonObject (nlohmann-json).
std::string json_escape(const std::string& s);

}  // namespace gradmesh::obs
