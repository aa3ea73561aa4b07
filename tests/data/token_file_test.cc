// Token sets for language models: tokenising text (bytes and characters),
// the directory round trip, and every malformed input named with what was
// expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "gradmesh/core/error.h"
#include "gradmesh/data/token_file.h"
#include "support/temp_dir.h"

namespace gradmesh::data {
namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string error_of(const std::function<void()>& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(TokenSet, BytesRoundTripWithTheEndAsValidation) {
  gradmesh::testing::TempDir dir;
  write(dir.file("a.txt"), "hello ");
  write(dir.file("b.txt"), "world!!!!");
  PrepareTextOptions o;
  o.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  o.val_fraction = 0.2;  // 15 bytes -> 3 for validation
  const TokenSet t = tokenize_text(o);
  EXPECT_EQ(t.vocab_size, 256);
  ASSERT_EQ(t.train.size(), 12u);
  ASSERT_EQ(t.val.size(), 3u);
  EXPECT_EQ(detokenize(t, t.train), "hello world!");
  write_token_set(t, dir.file("tokens"));
  const TokenSet back = read_token_set(dir.file("tokens"));
  EXPECT_EQ(back.train, t.train);
  EXPECT_EQ(back.val, t.val);
  EXPECT_EQ(back.kind, Vocabulary::kByte);
}

TEST(TokenSet, CharactersAreNumberedInCodePointOrder) {
  gradmesh::testing::TempDir dir;
  std::filesystem::create_directories(dir.file("corpus"));
  write(dir.file("corpus/one"), "b\xc3\xa9" "a");  // b, e-acute, a
  write(dir.file("corpus/one.dat"), std::string("\x01\x02\xff", 3));  // fortune's index: skipped
  PrepareTextOptions o;
  o.inputs = {dir.file("corpus")};
  o.kind = Vocabulary::kChar;
  o.val_fraction = 0;
  const TokenSet t = tokenize_text(o);
  EXPECT_EQ(t.chars, (std::vector<uint32_t>{'a', 'b', 0xE9}));
  EXPECT_EQ(t.train, (std::vector<uint16_t>{1, 2, 0}));
  write_token_set(t, dir.file("tokens"));
  const TokenSet back = read_token_set(dir.file("tokens"));
  EXPECT_EQ(detokenize(back, back.train), "b\xc3\xa9" "a");
}

TEST(TokenSet, BadInputsAreNamed) {
  gradmesh::testing::TempDir dir;
  ErrorKind kind{};
  PrepareTextOptions o;
  o.inputs = {dir.file("missing")};
  EXPECT_NE(error_of([&] { tokenize_text(o); }, &kind).find("missing: does not exist"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kIo);
  write(dir.file("latin1"), "caf\xe9!");
  o.inputs = {dir.file("latin1")};
  o.kind = Vocabulary::kChar;
  EXPECT_NE(error_of([&] { tokenize_text(o); }, &kind).find("byte 3 is not valid UTF-8"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kFormat);
  write(dir.file("empty"), "");
  o.inputs = {dir.file("empty")};
  kind = ErrorKind::kInternal;
  EXPECT_NE(error_of([&] { tokenize_text(o); }, &kind).find("fewer than 2 tokens"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kConfig);
}

class MalformedTokenSet : public ::testing::Test {
 protected:
  void SetUp() override {
    write(dir_.file("t.txt"), "abcdefghij");
    PrepareTextOptions o;
    o.inputs = {dir_.file("t.txt")};
    write_token_set(tokenize_text(o), dir_.path());
  }
  std::string vocab() { return dir_.file("vocab.json"); }
  std::string failure() {
    ErrorKind kind{};
    const std::string message = error_of([&] { read_token_set(dir_.path()); }, &kind);
    EXPECT_EQ(kind, ErrorKind::kFormat) << message;
    return message;
  }
  gradmesh::testing::TempDir dir_;
};

TEST_F(MalformedTokenSet, VocabJsonFieldByField) {
  const std::string good = "{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"byte\",\"vocab_size\":256,"
                           "\"train_tokens\":9,\"val_tokens\":1}";
  write(vocab(), good);
  EXPECT_NO_THROW(read_token_set(dir_.path()));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "is not JSON"},
      {"[1]", "expected a JSON object"},
      {"{\"version\":1}", "key \"format\" must be a string"},
      {"{\"format\":\"x\",\"version\":1}", "\"format\" must be \"gradmesh-tokens\""},
      {"{\"format\":\"gradmesh-tokens\",\"version\":2}", "unsupported \"version\""},
      {"{\"format\":\"gradmesh-tokens\",\"version\":\"1\"}", "key \"version\" must be an integer"},
      {"{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"word\"}", "\"kind\" must be \"byte\" or \"char\""},
      {"{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"byte\",\"vocab_size\":100,\"train_tokens\":9,"
       "\"val_tokens\":1}",
       "\"vocab_size\" must be 256"},
      {"{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"byte\",\"vocab_size\":256,\"train_tokens\":8,"
       "\"val_tokens\":1}",
       "train.bin: holds 18 bytes; vocab.json says 8 tokens"},
      {"{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"char\",\"vocab_size\":2,\"train_tokens\":9,"
       "\"val_tokens\":1,\"chars\":[97,-1]}",
       "\"chars\" must hold Unicode code points"},
  };
  for (const auto& [text, expected] : cases) {
    write(vocab(), text);
    const std::string message = failure();
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
    EXPECT_TRUE(message.find("vocab.json") != std::string::npos || message.find(".bin") != std::string::npos)
        << "names the file: " << message;
  }
}

TEST_F(MalformedTokenSet, TokenOutsideTheVocabularyIsNamed) {
  write(vocab(), "{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"char\",\"vocab_size\":2,"
                 "\"train_tokens\":9,\"val_tokens\":1,\"chars\":[97,98]}");
  EXPECT_NE(failure().find("train.bin: token 0 is 97, outside the vocabulary [0, 2)"), std::string::npos);
}

TEST_F(MalformedTokenSet, MissingFilesAreIoErrors) {
  std::filesystem::remove(dir_.file("val.bin"));
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { read_token_set(dir_.path()); }, &kind).find("val.bin: cannot open"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kIo);
}

}  // namespace
}  // namespace gradmesh::data
