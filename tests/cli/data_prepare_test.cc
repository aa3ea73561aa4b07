// gradmesh data prepare, data bench and inspect on MDS sets, as a user runs
// them: Fashion-MNIST's test set becomes shards that verify; a damaged shard
// makes inspect exit 1 naming it; a set is never written over; a missing
// flag is a usage error (exit 2); an image folder of JPEGs becomes a set of
// its classes that the loader decodes, and a corrupt JPEG in it stops the
// prepare naming the file (exit 1) or is skipped and listed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "gradmesh/data/image_codec.h"

#include "run_command.h"

namespace gradmesh::testing {
namespace {

class DataPrepare : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  }
  CommandResult prepare(const std::string& output) {
    return run_gradmesh(std::string("data prepare --images ") + kDataDir + "/t10k-images-idx3-ubyte.gz --labels " +
                            kDataDir + "/t10k-labels-idx1-ubyte.gz --shard-mb 1 --output " + output,
                        dir_.path());
  }
  TempDir dir_;
};

TEST_F(DataPrepare, WritesShardsThatInspectVerifiesAndNamesADamagedOne) {
  const CommandResult p = prepare("test-set");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("test-set: 10000 samples in "), std::string::npos) << p.out;
  const CommandResult ok = run_gradmesh("inspect test-set", dir_.path());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("column x: ndarray:uint8:1,28,28 (784 bytes)"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("every shard verifies"), std::string::npos) << ok.out;

  {  // one pixel of shard 3 changes: the shard still parses, its checksum no longer matches
    std::fstream shard(dir_.file("test-set/shard.00003.mds"), std::ios::in | std::ios::out | std::ios::binary);
    shard.seekp(-100, std::ios::end);
    shard.put('\x7f');
  }
  const CommandResult bad = run_gradmesh("inspect test-set", dir_.path());
  EXPECT_EQ(bad.exit_code, 1);
  const size_t line = bad.out.find("shard.00003.mds: ");
  ASSERT_NE(line, std::string::npos) << bad.out;
  EXPECT_EQ(bad.out.find("BAD", line), bad.out.find("BAD")) << "only shard 3 fails: " << bad.out;
  EXPECT_NE(bad.out.find("BAD: xxh64"), std::string::npos) << bad.out;
  EXPECT_NE(bad.err.find("1 shard(s) of test-set do not verify"), std::string::npos) << bad.err;
}

TEST_F(DataPrepare, NeverWritesOverASetAndNeedsItsFlags) {
  ASSERT_EQ(prepare("set").exit_code, 0);
  const CommandResult again = prepare("set");
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("already holds a set"), std::string::npos) << again.err;
  const CommandResult missing = run_gradmesh("data prepare --output x", dir_.path());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--images"), std::string::npos) << missing.err;
}

TEST(DataPrepareFolder, JpegFolderBecomesASetTheLoaderDecodesAndACorruptFileIsNamed) {
  TempDir dir;
  const data::ImageSize size{1, 16, 16};
  for (int i = 0; i < 60; ++i) {
    std::vector<uint8_t> pixels(256);
    for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>(i * 3 + static_cast<int>(k));
    const std::string cls = i % 2 ? "cat" : "dog";
    std::filesystem::create_directories(dir.file("photos/" + cls));
    dir.write("photos/" + cls + "/" + std::to_string(i) + ".JPG", data::encode_jpeg(pixels.data(), size, 90));
  }
  const CommandResult p = run_gradmesh("data prepare --image-folder photos --output set --workers 2", dir.path());
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("set: 60 samples of 2 classes in 1 shard(s)"), std::string::npos) << p.out;
  EXPECT_NE(p.err.find("100%"), std::string::npos) << "progress is shown: " << p.err;
  const CommandResult inspect = run_gradmesh("inspect set", dir.path());
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("column x: jpeg (variable)"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("classes: 2 (classes.json: cat, dog)"), std::string::npos) << inspect.out;
  const CommandResult bench = run_gradmesh("data bench set --workers 2 --batch 16 --crop-padding 2 --flip", dir.path());
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("60 samples in"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("decoding, crop and flip"), std::string::npos) << bench.out;

  dir.write("photos/dog/8.JPG", "\xFF\xD8\xFF\xE0 this JPEG ends here");
  const CommandResult fail = run_gradmesh("data prepare --image-folder photos --output set2", dir.path());
  EXPECT_EQ(fail.exit_code, 1);
  EXPECT_NE(fail.err.find("photos/dog/8.JPG"), std::string::npos) << fail.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("set2/index.json")));
  const CommandResult skip =
      run_gradmesh("data prepare --image-folder photos --output set3 --on-corrupt skip", dir.path());
  EXPECT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_NE(skip.out.find("59 samples of 2 classes"), std::string::npos) << skip.out;
  EXPECT_NE(skip.out.find("1 corrupt file(s) skipped"), std::string::npos) << skip.out;
  EXPECT_NE(skip.err.find("skipped photos/dog/8.JPG"), std::string::npos) << skip.err;
  const CommandResult both = run_gradmesh("data prepare --image-folder photos --images x --labels y --output s4", dir.path());
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

}  // namespace
}  // namespace gradmesh::testing
