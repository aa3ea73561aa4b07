// Sample sources: language-model windows drawn from the counter-based RNG
// (a pure function of seed, epoch and sample index), evaluation blocks, the
// image adapter, and batches of windows with one target per position.
#include <gtest/gtest.h>

#include <set>

#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/data/token_file.h"

namespace gradmesh::data {
namespace {

TokenStream counting_tokens(size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i % 1000);
  return TokenStream(t);
}

TEST(TokenWindows, EachWindowIsContiguousAndItsTargetsAreTheNextTokens) {
  const TokenStream tokens = counting_tokens(500);
  const TokenWindows w(tokens, 16, 0, 7, "train.bin");
  EXPECT_EQ(w.count(), 500 / 16);
  EXPECT_EQ(w.sample_shape(), Shape{16});
  EXPECT_EQ(w.targets_per_sample(), 16);
  std::vector<float> x(16);
  std::vector<int32_t> y(16);
  for (int64_t i = 0; i < w.count(); ++i) {
    w.fill(0, i, x.data(), y.data());
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], static_cast<int32_t>(x[j]) + 1) << "window " << i << " position " << j;
      if (j > 0) {
        EXPECT_EQ(x[j], x[j - 1] + 1);
      }
    }
    EXPECT_LE(x[0] + 16, 499);  // the last target is inside the stream
  }
}

TEST(TokenWindows, APureFunctionOfSeedEpochAndIndex) {
  const TokenStream tokens = counting_tokens(5000);
  const TokenWindows a(tokens, 8, 100, 3, "t"), b(tokens, 8, 100, 3, "t"), other_seed(tokens, 8, 100, 4, "t");
  std::vector<float> xa(8), xb(8);
  std::vector<int32_t> y(8);
  std::set<float> starts_epoch0, starts_epoch1;
  int differs_by_seed = 0;
  for (int64_t i = 0; i < 100; ++i) {
    a.fill(0, i, xa.data(), y.data());
    b.fill(0, i, xb.data(), y.data());
    EXPECT_EQ(xa, xb);
    starts_epoch0.insert(xa[0]);
    other_seed.fill(0, i, xb.data(), y.data());
    differs_by_seed += xa != xb;
    a.fill(1, i, xa.data(), y.data());
    starts_epoch1.insert(xa[0]);
  }
  EXPECT_GT(differs_by_seed, 90);
  EXPECT_GT(starts_epoch0.size(), 90u);  // random positions, not one window repeated
  EXPECT_NE(starts_epoch0, starts_epoch1);
}

TEST(TokenWindows, TooFewTokensNameTheFileAndTheNeed) {
  const TokenStream tokens = counting_tokens(16);
  try {
    TokenWindows(tokens, 16, 0, 0, "data/train.bin");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("data/train.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 17"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(TokenWindows(counting_tokens(17), 16, 0, 0, "t"));
}

TEST(TokenBlocks, ConsecutiveBlocksCoverTheStreamOnce) {
  const TokenStream tokens = counting_tokens(100);
  const TokenBlocks blocks(tokens, 10, "val.bin");
  EXPECT_EQ(blocks.count(), 9);  // 99 predictable positions
  std::vector<float> x(10);
  std::vector<int32_t> y(10);
  for (int64_t i = 0; i < blocks.count(); ++i) {
    blocks.fill(5, i, x.data(), y.data());
    EXPECT_EQ(x[0], static_cast<float>(i * 10));
    EXPECT_EQ(y[9], i * 10 + 10);
  }
  EXPECT_EQ(TokenBlocks(tokens, 10, "val.bin", 4).count(), 4);
}

TEST(BatchLoader, WindowBatchesCarryOneTargetPerPositionAndSplitByRank) {
  const TokenStream tokens = counting_tokens(3000);
  const TokenWindows windows(tokens, 12, 40, 1, "t");
  BatchLoaderOptions one;
  one.global_batch = 8;
  one.seed = 1;
  BatchLoader whole(windows, one);
  whole.start_epoch(0);
  Batch full;
  ASSERT_TRUE(whole.next(full));
  EXPECT_EQ(full.images.shape(), (Shape{8, 12}));
  EXPECT_EQ(full.targets_per_sample, 12);
  ASSERT_EQ(full.labels.size(), 96u);
  // Rank 1 of 2 holds the second half of the same global batch.
  BatchLoaderOptions half = one;
  half.rank = 1;
  half.world = 2;
  BatchLoader second(windows, half);
  second.start_epoch(0);
  Batch part;
  ASSERT_TRUE(second.next(part));
  ASSERT_EQ(part.images.shape(), (Shape{4, 12}));
  for (int64_t k = 0; k < 48; ++k) {
    EXPECT_EQ(part.images.data()[k], full.images.data()[48 + k]);
    EXPECT_EQ(part.labels[static_cast<size_t>(k)], full.labels[static_cast<size_t>(48 + k)]);
  }
}

TEST(ImageSamples, CopiesThePixelsAndTheLabel) {
  const ImageDataset d = synthetic_image_dataset(5, 1, 2, 3, 4, 9);
  const ImageSamples s(d);
  EXPECT_EQ(s.count(), 5);
  EXPECT_EQ(s.sample_shape(), (Shape{1, 2, 3}));
  std::vector<float> x(6);
  int32_t y = -1;
  s.fill(0, 3, x.data(), &y);
  EXPECT_EQ(y, d.labels[3]);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(x[k], d.pixels[3 * 6 + k]);
}

TEST(EncodeText, CharactersMapToTheirTokensAndUnknownOnesAreNamed) {
  TokenSet vocab;
  vocab.kind = Vocabulary::kChar;
  vocab.chars = {' ', 'a', 'b', 0xE9};  // é
  vocab.vocab_size = 4;
  EXPECT_EQ(encode_text(vocab, "ab \xC3\xA9", "--prompt"), (std::vector<uint32_t>{1, 2, 0, 3}));
  try {
    encode_text(vocab, "abc", "--prompt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("'c'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--prompt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(encode_text(vocab, "\xFF", "--prompt"), Error);
  TokenSet bytes;
  EXPECT_EQ(encode_text(bytes, "A\xFF", "p"), (std::vector<uint32_t>{65, 255}));
}

}  // namespace
}  // namespace gradmesh::data
