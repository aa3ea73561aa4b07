// The strict JSON pull reader: documents read value by value, every
// malformed text refused with the byte where it goes wrong, and the same
// verdict as nlohmann's full parser on thousands of mutated documents.
#include "gradmesh/core/json_reader.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstring>
#include <random>

namespace gradmesh {
namespace {

// Accepts the whole text as one JSON document, or throws.
void check_document(std::string_view text) {
  JsonReader r(text);
  r.skip_value();
  r.expect_end();
}

TEST(JsonReader, ReadsADocumentValueByValue) {
  JsonReader r(R"( {"a": [1, -2.5e1, 0], "s": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "t": true, "f": false, "n": null, "o": {}} )");
  r.begin_object();
  std::string key;
  ASSERT_TRUE(r.next_member(key));
  EXPECT_EQ(key, "a");
  r.begin_array();
  std::vector<double> values;
  while (r.next_element()) values.push_back(r.read_double());
  EXPECT_EQ(values, (std::vector<double>{1, -25, 0}));
  ASSERT_TRUE(r.next_member(key));
  EXPECT_EQ(r.read_string(), "q\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  ASSERT_TRUE(r.next_member(key));
  EXPECT_TRUE(r.read_bool());
  ASSERT_TRUE(r.next_member(key));
  EXPECT_FALSE(r.read_bool());
  ASSERT_TRUE(r.next_member(key));
  EXPECT_EQ(r.peek(), JsonKind::kNull);
  r.read_null();
  ASSERT_TRUE(r.next_member(key));
  EXPECT_EQ(key, "o");
  r.begin_object();
  EXPECT_FALSE(r.next_member(key));
  EXPECT_FALSE(r.next_member(key));
  r.expect_end();

  EXPECT_TRUE(JsonReader::is_integer_token("-12"));
  EXPECT_FALSE(JsonReader::is_integer_token("1e2"));
  EXPECT_TRUE(std::isinf(JsonReader::to_double("1e400")));
  EXPECT_EQ(JsonReader::to_double("1e-400"), 0.0);
}

// The one-pass number reader gives from_chars's double, bit for bit, on the
// forms people write and on those its fast path must leave to from_chars.
TEST(JsonReader, NumbersReadInOnePassEqualFromChars) {
  std::mt19937 rng(7);
  auto digits = [&](int n) {
    std::string d;
    for (int i = 0; i < n; ++i) d += static_cast<char>('0' + rng() % 10);
    return d;
  };
  std::vector<std::string> texts = {"0", "-0", "1", "0.1", "0.3", "123456789", "9007199254740993", "1e22", "1e23",
                                    "-1.5e-22", "1e-23", "4.9e-324", "1.7976931348623157e308", "1e400", "1e-400",
                                    "123456789012345678901234567890", "0.000000000000000000000001"};
  for (int i = 0; i < 20000; ++i) {
    std::string t = rng() % 4 == 0 ? "-" : "";
    const int whole = 1 + static_cast<int>(rng() % 12);
    std::string w = digits(whole);
    while (w.size() > 1 && w[0] == '0') w.erase(0, 1);
    t += w;
    if (rng() % 2) t += "." + digits(1 + static_cast<int>(rng() % 12));
    if (rng() % 3 == 0) t += "e" + std::to_string(static_cast<int>(rng() % 60) - 30);
    texts.push_back(t);
  }
  for (const std::string& text : texts) {
    JsonReader r(text);
    std::string_view token;
    const double fast = r.read_number(&token);
    r.expect_end();
    EXPECT_EQ(token, text);
    const double slow = JsonReader::to_double(text);
    ASSERT_EQ(std::memcmp(&fast, &slow, sizeof fast), 0) << text << ": " << fast << " against " << slow;
  }
}

TEST(JsonReader, AValueCanBeReadAgainFromItsOffset) {
  JsonReader r(R"({"data": [3, 4], "shape": [2]})");
  r.begin_object();
  std::string key;
  ASSERT_TRUE(r.next_member(key));
  r.peek();
  const size_t data_at = r.offset();
  r.skip_value();
  ASSERT_TRUE(r.next_member(key));
  r.skip_value();
  EXPECT_FALSE(r.next_member(key));
  JsonReader again = r.at(data_at);
  again.begin_array();
  ASSERT_TRUE(again.next_element());
  EXPECT_EQ(again.read_double(), 3);
}

TEST(JsonReader, DescribesAValueForAMessage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1.5", "number 1.5"}, {"\"x\\\"\"", "string \"x\\\"\""}, {"true", "boolean true"},
      {"null", "null"},      {"[1, [2]]", "array"},               {"{\"a\": 1}", "object"}};
  for (const auto& [text, described] : cases) {
    JsonReader r(text);
    EXPECT_EQ(r.describe_value(), described) << text;
    r.expect_end();
  }
}

TEST(JsonReader, EveryMalformedTextIsRefusedWhereItGoesWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "at byte 0: expected a value, found the end"},
      {"{", "at byte 1: expected a member name"},
      {R"({"a"})", "at byte 4: expected ':'"},
      {R"({"a":1,})", "at byte 7: expected a member name"},
      {R"({"a":1 "b":2})", "at byte 7: expected ',' or '}'"},
      {"[1,]", "at byte 3: expected a value"},
      {"[,1]", "at byte 1: expected a value"},
      {"[1 2]", "at byte 3: expected ',' or ']'"},
      {"01", "at byte 1: expected the end of the document"},
      {"1.", "at byte 2: expected a digit after the decimal point"},
      {"-", "at byte 1: expected a digit"},
      {"1e", "at byte 2: expected a digit in the exponent"},
      {"+1", "at byte 0: expected a value"},
      {".5", "at byte 0: expected a value"},
      {"NaN", "at byte 0: expected a value"},
      {"tru", "expected true or false"},
      {"nul", "expected null"},
      {R"("\x")", "at byte 2: expected one of"},
      {R"("\ud800")", "expected a low surrogate"},
      {R"("\udc00")", "expected a high surrogate before a low one"},
      {R"("\u12G4")", "expected four hex digits"},
      {"\"\xff\"", "at byte 1: expected valid UTF-8"},
      {"\"\xc0\xaf\"", "expected valid UTF-8"},      // overlong
      {"\"\xed\xa0\x80\"", "expected valid UTF-8"},  // an encoded surrogate
      {"\"\xe2\x82\"", "expected valid UTF-8"},      // cut short
      {"\"a\nb\"", "at byte 2: expected no control characters"},
      {"\"abc", "expected the string's closing"},
      {"[1] 2", "at byte 4: expected the end of the document"},
      {std::string(100, '['), "at byte 64: expected at most 64 levels"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      check_document(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const JsonSyntaxError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << text << "\n  -> " << e.what();
    }
  }
}

// Mutations of a valid document (bytes replaced, dropped, duplicated): the
// reader and nlohmann's parser accept and refuse the same texts.
TEST(JsonReader, AgreesWithAFullParserOnMutatedDocuments) {
  const std::string valid =
      R"({"id":"q\u00e9","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1.5,-2e-3],[0,7]]}],)"
      R"("outputs":[{"name":"logits","parameters":{"binary_data":true}}],"n":null,"t":[true,false,""]})";
  const std::string pieces = "{}[]\":,0123456789.-+eE tfnrual\\/\x01\x7f\xc3\xa9\xff";
  std::mt19937 rng(20261207);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = valid;
    for (int k = 0, n = 1 + static_cast<int>(pick(3)); k < n; ++k) {
      const size_t at = pick(text.size());
      switch (pick(3)) {
        case 0: text[at] = pieces[pick(pieces.size())]; break;
        case 1: text.erase(at, 1); break;
        default: text.insert(at, 1, text[at]); break;
      }
    }
    bool reader_ok = true, full_ok = true;
    try {
      check_document(text);
    } catch (const JsonSyntaxError&) {
      reader_ok = false;
    }
    full_ok = nlohmann::json::accept(text);
    ASSERT_EQ(reader_ok, full_ok) << text;
    (reader_ok ? accepted : refused) += 1;
  }
  EXPECT_GT(accepted, 1000) << "the mutations should leave many documents valid";
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace gradmesh
