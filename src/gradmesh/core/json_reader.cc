#include "gradmesh/core/json_reader.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "gradmesh/core/utf8.h"

namespace gradmesh {

const char* json_kind_name(JsonKind kind) {
  switch (kind) {
    case JsonKind::kObject: return "object";
    case JsonKind::kArray: return "array";
    case JsonKind::kString: return "string";
    case JsonKind::kNumber: return "number";
    case JsonKind::kBoolean: return "boolean";
    case JsonKind::kNull: return "null";
  }
  return "?";
}

JsonReader::JsonReader(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

JsonReader JsonReader::at(size_t offset) const {
  JsonReader r(text_, max_depth_);
  r.at_ = offset;
  return r;
}

void JsonReader::fail(const std::string& expected) const {
  std::string found = "the end of the text";
  if (at_ < text_.size()) {
    const auto c = static_cast<unsigned char>(text_[at_]);
    char buf[16];
    if (c >= 0x20 && c < 0x7f)
      std::snprintf(buf, sizeof buf, "'%c'", c);
    else
      std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
    found = buf;
  }
  throw JsonSyntaxError("at byte " + std::to_string(at_) + ": expected " + expected + ", found " + found);
}

void JsonReader::push() {
  if (static_cast<int>(first_.size()) >= max_depth_)
    fail("at most " + std::to_string(max_depth_) + " levels of nested arrays and objects");
  ++at_;
  first_.push_back(true);
}

void JsonReader::pop() {
  ++at_;
  first_.pop_back();
}

void JsonReader::begin_object() {
  if (peek() != JsonKind::kObject) fail("'{'");
  push();
}

bool JsonReader::next_member(std::string& key) {
  skip_whitespace();
  if (at_ < text_.size() && text_[at_] == '}') {
    pop();
    return false;
  }
  if (!first_.back()) {
    if (at_ >= text_.size() || text_[at_] != ',') fail("',' or '}'");
    ++at_;
    skip_whitespace();
  }
  first_.back() = false;
  if (at_ >= text_.size() || text_[at_] != '"') fail("a member name in double quotes");
  key = read_string();
  skip_whitespace();
  if (at_ >= text_.size() || text_[at_] != ':') fail("':'");
  ++at_;
  return true;
}

void JsonReader::begin_array() {
  if (peek() != JsonKind::kArray) fail("'['");
  push();
}

bool JsonReader::next_element() {
  skip_whitespace();
  if (at_ < text_.size() && text_[at_] == ']') {
    pop();
    return false;
  }
  if (!first_.back()) {
    if (at_ >= text_.size() || text_[at_] != ',') fail("',' or ']'");
    ++at_;
  }
  first_.back() = false;
  return true;
}

uint32_t JsonReader::read_hex4() {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i, ++at_) {
    if (at_ >= text_.size()) fail("four hex digits after \\u");
    const char c = text_[at_];
    const uint32_t d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
    if (d == 99) fail("four hex digits after \\u");
    v = v * 16 + d;
  }
  return v;
}

std::string JsonReader::read_string() {
  if (peek() != JsonKind::kString) fail("a string");
  ++at_;
  std::string out;
  for (;;) {
    const size_t run = at_;
    while (at_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[at_]);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++at_;
    }
    out.append(text_.substr(run, at_ - run));
    if (at_ >= text_.size()) fail("the string's closing '\"'");
    const auto c = static_cast<unsigned char>(text_[at_]);
    if (c == '"') {
      ++at_;
      return out;
    }
    if (c < 0x20) fail("no control characters inside a string (escape them)");
    if (c >= 0x80) {
      // One UTF-8 sequence, checked as RFC 3629 defines it (no overlong
      // forms, no surrogates, nothing past U+10FFFF).
      int extra = 0;
      unsigned char lo = 0x80, hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) extra = 1;
      else if (c == 0xE0) extra = 2, lo = 0xA0;
      else if (c >= 0xE1 && c <= 0xEC) extra = 2;
      else if (c == 0xED) extra = 2, hi = 0x9F;
      else if (c >= 0xEE && c <= 0xEF) extra = 2;
      else if (c == 0xF0) extra = 3, lo = 0x90;
      else if (c >= 0xF1 && c <= 0xF3) extra = 3;
      else if (c == 0xF4) extra = 3, hi = 0x8F;
      else fail("valid UTF-8 in a string");
      const size_t start = at_++;
      for (int k = 0; k < extra; ++k, ++at_) {
        if (at_ >= text_.size()) fail("valid UTF-8 in a string");
        const auto b = static_cast<unsigned char>(text_[at_]);
        if (b < (k == 0 ? lo : 0x80) || b > (k == 0 ? hi : 0xBF)) fail("valid UTF-8 in a string");
      }
      out.append(text_.substr(start, at_ - start));
      continue;
    }
    ++at_;  // the backslash
    if (at_ >= text_.size()) fail("an escape after '\\'");
    const char e = text_[at_++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t cp = read_hex4();
        if (cp >= 0xDC00 && cp <= 0xDFFF) fail("a high surrogate before a low one");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (text_.substr(at_, 2) != "\\u") fail("a low surrogate (\\uDC00-\\uDFFF) after a high one");
          at_ += 2;
          const uint32_t low = read_hex4();
          if (low < 0xDC00 || low > 0xDFFF) fail("a low surrogate (\\uDC00-\\uDFFF) after a high one");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        append_utf8(cp, out);
        break;
      }
      default:
        --at_;
        fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
    }
  }
}

bool JsonReader::read_bool() {
  if (peek() != JsonKind::kBoolean) fail("true or false");
  if (text_.substr(at_, 4) == "true") {
    at_ += 4;
    return true;
  }
  if (text_.substr(at_, 5) == "false") {
    at_ += 5;
    return false;
  }
  fail("true or false");
}

void JsonReader::read_null() {
  if (peek() != JsonKind::kNull || text_.substr(at_, 4) != "null") fail("null");
  at_ += 4;
}

std::string_view JsonReader::read_number_token() {
  if (peek() != JsonKind::kNumber) fail("a number");
  const size_t start = at_;
  auto digit = [&] { return at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; };
  auto digits = [&](const char* what) {
    if (!digit()) fail(what);
    while (digit()) ++at_;
  };
  if (text_[at_] == '-') ++at_;
  if (at_ < text_.size() && text_[at_] == '0')
    ++at_;  // no leading zeros: "01" ends at the 0
  else
    digits("a digit");
  if (at_ < text_.size() && text_[at_] == '.') {
    ++at_;
    digits("a digit after the decimal point");
  }
  if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
    ++at_;
    if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
    digits("a digit in the exponent");
  }
  return text_.substr(start, at_ - start);
}

bool JsonReader::is_integer_token(std::string_view token) {
  return token.find_first_of(".eE") == std::string_view::npos;
}

double JsonReader::read_double() { return to_double(read_number_token()); }

double JsonReader::read_number(std::string_view* token) {
  if (peek() != JsonKind::kNumber) fail("a number");
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const size_t start = at_;
  const bool negative = text_[at_] == '-';
  if (negative) ++at_;
  uint64_t mantissa = 0;
  int digits = 0, exp10 = 0;
  auto digit = [&] { return at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; };
  auto take = [&](bool fraction) {
    mantissa = mantissa * 10 + static_cast<uint64_t>(text_[at_++] - '0');
    ++digits;
    exp10 -= fraction;
  };
  if (at_ < text_.size() && text_[at_] == '0') {
    ++at_;
  } else {
    if (!digit()) fail("a digit");
    while (digit()) take(false);
  }
  if (at_ < text_.size() && text_[at_] == '.') {
    ++at_;
    if (!digit()) fail("a digit after the decimal point");
    while (digit()) take(true);
  }
  bool plain = digits <= 19;
  if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
    ++at_;
    const bool minus = at_ < text_.size() && text_[at_] == '-';
    if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
    if (!digit()) fail("a digit in the exponent");
    int e = 0;
    while (digit()) {
      if (e < 100000) e = e * 10 + (text_[at_] - '0');
      ++at_;
    }
    exp10 += minus ? -e : e;
  }
  *token = text_.substr(start, at_ - start);
  plain = plain && mantissa <= (uint64_t{1} << 53) && exp10 >= -22 && exp10 <= 22;
  if (!plain) return to_double(*token);
  double x = static_cast<double>(mantissa);
  x = exp10 < 0 ? x / kPow10[-exp10] : x * kPow10[exp10];
  return negative ? -x : x;
}

double JsonReader::to_double(std::string_view token) {
  double x = 0;
  const auto r = std::from_chars(token.data(), token.data() + token.size(), x);
  if (r.ec == std::errc::result_out_of_range) return std::strtod(std::string(token).c_str(), nullptr);  // +-inf or 0
  return x;
}

void JsonReader::skip_value() {
  switch (peek()) {
    case JsonKind::kObject: {
      begin_object();
      for (std::string key; next_member(key);) skip_value();
      return;
    }
    case JsonKind::kArray:
      begin_array();
      while (next_element()) skip_value();
      return;
    case JsonKind::kString: read_string(); return;
    case JsonKind::kNumber: read_number_token(); return;
    case JsonKind::kBoolean: read_bool(); return;
    case JsonKind::kNull: read_null(); return;
  }
}

std::string JsonReader::describe_value() {
  const JsonKind kind = peek();
  std::string text;
  switch (kind) {
    case JsonKind::kString: {
      const std::string s = read_string();
      if (s.size() <= 40) {
        text = " \"";
        for (const char c : s) text += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
        text += '"';
      }
      break;
    }
    case JsonKind::kNumber: {
      const std::string_view token = read_number_token();
      if (token.size() <= 40) text = " " + std::string(token);
      break;
    }
    case JsonKind::kBoolean: text = read_bool() ? " true" : " false"; break;
    case JsonKind::kNull: read_null(); break;
    default: skip_value();
  }
  return json_kind_name(kind) + text;
}

void JsonReader::expect_end() {
  skip_whitespace();
  if (at_ != text_.size()) fail("the end of the document");
}

}  // namespace gradmesh
