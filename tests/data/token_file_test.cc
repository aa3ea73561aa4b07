// Token sets for language models: tokenising text (bytes, characters and
// SentencePiece subwords), the directory round trip, nanoGPT's directories,
// and every malformed input named with what was expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "gradmesh/core/error.h"
#include "gradmesh/data/sample_source.h"
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
  EXPECT_EQ(detokenize(t, t.train.to_vector()), "hello world!");
  write_token_set(t, dir.file("tokens"));
  const TokenSet back = read_token_set(dir.file("tokens"));
  EXPECT_EQ(back.train.to_vector(), t.train.to_vector());
  EXPECT_EQ(back.val.to_vector(), t.val.to_vector());
  EXPECT_EQ(back.train.width(), 2) << "a vocabulary of 256 is stored as uint16";
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
  EXPECT_EQ(t.train.to_vector(), (std::vector<uint32_t>{1, 2, 0}));
  write_token_set(t, dir.file("tokens"));
  const TokenSet back = read_token_set(dir.file("tokens"));
  EXPECT_EQ(detokenize(back, back.train.to_vector()), "b\xc3\xa9" "a");
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
      {"{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"word\"}", "\"kind\" must be \"byte\", \"char\" or \"sentencepiece\""},
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

TEST_F(MalformedTokenSet, TokenOutsideTheVocabularyIsNamedWhenItsWindowIsRead) {
  write(vocab(), "{\"format\":\"gradmesh-tokens\",\"version\":1,\"kind\":\"char\",\"vocab_size\":2,"
                 "\"train_tokens\":9,\"val_tokens\":1,\"chars\":[97,98]}");
  // The set maps its files: a bad token costs nothing until a window holding it is read.
  const TokenSet t = read_token_set(dir_.path());
  const TokenBlocks blocks(t.train, 4, dir_.file("train.bin"), 0, t.vocab_size);
  std::vector<float> x(4);
  std::vector<int32_t> y(4);
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { blocks.fill(0, 0, x.data(), y.data()); }, &kind)
                .find("train.bin: token 0 is 97, outside the vocabulary [0, 2)"),
            std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kFormat);
}

TEST(TokenSet, SentencePieceTrainsEncodesAndDecodesTheTextBack) {
  gradmesh::testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog\tand  again.\n";
  write(dir.file("corpus.txt"), text);
  PrepareTextOptions o;
  o.inputs = {dir.file("corpus.txt")};
  o.kind = Vocabulary::kSentencePiece;
  o.vocab_size = 600;
  o.threads = 2;
  const TokenSet t = tokenize_text(o);
  EXPECT_EQ(t.vocab_size, 600);
  EXPECT_LT(t.train.size() + t.val.size(), static_cast<int64_t>(text.size()) / 3) << "subwords, not bytes";
  std::vector<uint32_t> all = t.train.to_vector();
  for (const uint32_t v : t.val.to_vector()) all.push_back(v);
  EXPECT_TRUE(detokenize(t, all) == text) << "tabs, newlines and double spaces survive (byte fallback, no normalisation)";
  write_token_set(t, dir.file("tokens"));
  const TokenSet back = read_token_set(dir.file("tokens"));
  EXPECT_EQ(back.kind, Vocabulary::kSentencePiece);
  EXPECT_EQ(back.train.to_vector(), t.train.to_vector());
  EXPECT_EQ(encode_text(back, "the lazy dog", "p"), encode_text(t, "the lazy dog", "p"));
  // The same corpus and seed train the same tokenizer; a given model file is used as it is.
  EXPECT_EQ(tokenize_text(o).train.to_vector(), t.train.to_vector());
  PrepareTextOptions loaded = o;
  loaded.tokenizer_model = dir.file("tokens/tokenizer.model");
  EXPECT_EQ(tokenize_text(loaded).train.to_vector(), t.train.to_vector());
  write(dir.file("bad.model"), "not a model");
  loaded.tokenizer_model = dir.file("bad.model");
  EXPECT_NE(error_of([&] { tokenize_text(loaded); }).find("bad.model: not a SentencePiece model"), std::string::npos);
}

TEST(TokenSet, NanoGptDirectoriesAreReadAsTheyAreWithTheModelsVocabularySize) {
  gradmesh::testing::TempDir dir;
  std::string train, val;
  for (uint32_t i = 0; i < 1000; ++i) train += {static_cast<char>((i * 7) & 0xFF), static_cast<char>((i * 7) >> 8)};
  for (uint32_t i = 0; i < 100; ++i) val += {static_cast<char>(i), 0};
  write(dir.file("train.bin"), train);
  write(dir.file("val.bin"), val);
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { read_token_set(dir.path()); }, &kind).find("set model.vocab_size"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kConfig);
  const TokenSet t = read_token_set(dir.path(), 50304);
  EXPECT_EQ(t.kind, Vocabulary::kIds);
  EXPECT_EQ(t.train.size(), 1000);
  EXPECT_EQ(t.train[999], 999u * 7);
  EXPECT_EQ(t.val.size(), 100);
  write(dir.file("val.bin"), val + "x");
  EXPECT_NE(error_of([&] { read_token_set(dir.path(), 50304); }).find("val.bin: holds an odd number of bytes"),
            std::string::npos);
}

TEST_F(MalformedTokenSet, MissingFilesAreIoErrors) {
  std::filesystem::remove(dir_.file("val.bin"));
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { read_token_set(dir_.path()); }, &kind).find("val.bin: cannot open"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kIo);
}

}  // namespace
}  // namespace gradmesh::data
