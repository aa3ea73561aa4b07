// A strict pull reader of JSON text (RFC 8259), for the documents that a
// server reads on its hot path: the caller walks the document value by
// value and keeps only what it wants, so a request whose tensor is a
// million numbers costs that tensor's floats and nothing else (a DOM costs
// tens of bytes per number). Every value is checked as it is read or
// skipped: the grammar, UTF-8 in strings, escapes, number syntax, nesting
// depth, and that nothing but whitespace follows the document.
//
//   JsonReader r(text);
//   r.begin_object();
//   for (std::string key; r.next_member(key);)
//     if (key == "n") n = r.read_double(); else r.skip_value();
//   r.expect_end();
//
// Errors are JsonSyntaxError, which names the byte offset and what was
// expected there. Type errors (a string where a number belongs) are the
// caller's to word: peek() says what comes next without consuming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh {

class JsonSyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class JsonKind { kObject, kArray, kString, kNumber, kBoolean, kNull };
const char* json_kind_name(JsonKind kind);  // "object", "array", "string", "number", "boolean", "null"

class JsonReader {
 public:
  explicit JsonReader(std::string_view text, int max_depth = 64);

  // What the next value is (whitespace skipped, nothing consumed).
  JsonKind peek() {
    skip_whitespace();
    if (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == '-' || (c >= '0' && c <= '9')) return JsonKind::kNumber;
      if (c == '{') return JsonKind::kObject;
      if (c == '[') return JsonKind::kArray;
      if (c == '"') return JsonKind::kString;
      if (c == 't' || c == 'f') return JsonKind::kBoolean;
      if (c == 'n') return JsonKind::kNull;
    }
    fail("a value");
  }

  // Containers. begin_* consumes the opening bracket; next_* consumes a
  // separating comma and returns true while there is another member or
  // element (next_member reads its key and the colon), false after
  // consuming the closing bracket.
  void begin_object();
  bool next_member(std::string& key);
  void begin_array();
  bool next_element();

  // Scalars; each refuses a value of another kind (JsonSyntaxError).
  std::string read_string();
  bool read_bool();
  void read_null();
  // The number's text as written, checked against JSON's grammar.
  std::string_view read_number_token();
  // A number as a double; +-inf when it overflows a double (1e400), 0 when it
  // underflows.
  double read_double();
  // The same, with its text in *token (for a message): one pass, and most
  // numbers people write ("0.25", "-3", "1.5e-3": up to 19 digits and a
  // power of ten within 1e22) are converted with one exact multiply or
  // divide (Clinger's fast path, correctly rounded), the rest by from_chars.
  double read_number(std::string_view* token);
  // A number token (as read_number_token gives it) as a double, as read_double does.
  static double to_double(std::string_view token);
  // True when the token is an integer (no fraction, no exponent).
  static bool is_integer_token(std::string_view token);

  // The next value whatever it is, checked as strictly as if it were read.
  void skip_value();
  // The next value, read (checked) and described for a message:
  // "number 1.5", "string \"x\"", "boolean true", "null", "array", "object".
  std::string describe_value();

  // Only whitespace is left.
  void expect_end();

  size_t offset() const { return at_; }
  // Resumes reading at `offset` (an offset() taken before a value) as a fresh
  // reader of the same text, for a value that must wait for its siblings.
  JsonReader at(size_t offset) const;

 private:
  [[noreturn]] void fail(const std::string& expected) const;
  void skip_whitespace() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
      ++at_;
    }
  }
  void push();
  void pop();
  uint32_t read_hex4();

  std::string_view text_;
  size_t at_ = 0;
  int max_depth_;
  std::vector<bool> first_;  // per open container: no member or element read yet
};

}  // namespace gradmesh
