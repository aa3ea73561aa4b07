// Image folders as MDS sets (data/prepare_image_folder.h) and the loader
// that decodes them: classes numbered as torchvision numbers them, every
// image read back with its class, shards mixing the classes, a corrupt file
// failing the prepare by name or skipped and listed, an interrupted prepare
// resuming to the same bytes, and the loader's workers giving the same
// batches at any count, the first bad sample's error included.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/image_codec.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/prepare_image_folder.h"
#include "gradmesh/data/sharded_images.h"
#include "support/temp_dir.h"

namespace gradmesh::data {
namespace {

namespace fs = std::filesystem;
using gradmesh::testing::TempDir;

constexpr ImageSize kSize{1, 12, 10};

// The pixels of image `i`: distinct per image, so a read-back names its file.
std::vector<uint8_t> folder_pixels(int i) {
  std::vector<uint8_t> p(static_cast<size_t>(kSize.channels * kSize.height * kSize.width));
  for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<uint8_t>((i * 31 + static_cast<int>(k) * 7) % 251);
  return p;
}

void put(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// ROOT/<class>/img<i>.png, 3 classes (named out of order) of 40 images; PNG, so pixels survive exactly.
std::map<int, int> make_folder(const std::string& root) {
  const char* classes[] = {"trouser", "bag", "coat"};  // sorted: bag=0, coat=1, trouser=2
  const int label_of[] = {2, 0, 1};
  std::map<int, int> labels;  // first pixel -> label
  for (int i = 0; i < 120; ++i) {
    const std::vector<uint8_t> p = folder_pixels(i);
    put(root + "/" + classes[i % 3] + "/sub/img" + std::to_string(i) + ".png", encode_png(p.data(), kSize));
    labels[i] = label_of[i % 3];
  }
  put(root + "/bag/notes.txt", "not an image: ignored, as ImageFolder ignores it");
  return labels;
}

ImageFolderOptions options(const std::string& root, const std::string& output) {
  ImageFolderOptions o;
  o.root = root;
  o.output = output;
  o.shard_bytes = 4 << 10;  // several shards
  o.threads = 3;
  return o;
}

// Which folder image each sample of the set is (by its pixels), and its label.
std::vector<std::pair<int, int32_t>> read_back(const std::string& dir) {
  const ShardedImages set(std::make_shared<const MdsReader>(dir), Normalization{1.0f, 0.0f, 1.0f}, LabelSpace{3, "classes"});
  EXPECT_EQ(set.sample_shape(), (Shape{1, 12, 10}));
  std::vector<std::pair<int, int32_t>> found;
  std::vector<float> x(120);
  for (int64_t s = 0; s < set.count(); ++s) {
    int32_t y = -1;
    set.fill(0, s, x.data(), &y);
    int which = -1;
    for (int i = 0; i < 120 && which < 0; ++i) {
      const std::vector<uint8_t> p = folder_pixels(i);
      bool same = true;
      for (size_t k = 0; k < p.size() && same; ++k) same = x[k] == static_cast<float>(p[k]);
      if (same) which = i;
    }
    found.emplace_back(which, y);
  }
  return found;
}

TEST(ImageFolder, EveryImageIsReadBackWithItsClassAndShardsMixTheClasses) {
  TempDir dir;
  const std::map<int, int> labels = make_folder(dir.file("in"));
  const PreparedFolder r = prepare_image_folder(options(dir.file("in"), dir.file("set")));
  EXPECT_EQ(r.classes, (std::vector<std::string>{"bag", "coat", "trouser"}));
  EXPECT_EQ(r.set.samples, 120);
  EXPECT_GT(r.set.shards, 3u);
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_FALSE(fs::exists(dir.file("set/prepare-state.json")));
  EXPECT_EQ(gradmesh::testing::read_file(dir.file("set/classes.json")), "[\"bag\",\"coat\",\"trouser\"]\n");
  const MdsReader set(dir.file("set"));
  EXPECT_EQ(set.columns()[set.column("x")].encoding, "png");
  const std::vector<std::pair<int, int32_t>> found = read_back(dir.file("set"));
  std::vector<int> seen(120, 0);
  for (const auto& [which, y] : found) {
    ASSERT_GE(which, 0) << "a sample is none of the folder's images";
    ++seen[static_cast<size_t>(which)];
    EXPECT_EQ(y, labels.at(which)) << "image " << which;
  }
  for (int i = 0; i < 120; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "image " << i;
  // The first shard holds every class: samples were written in a drawn order.
  std::vector<int> first_shard_classes(3, 0);
  for (int64_t s = 0; s < set.shards()[0].samples; ++s) ++first_shard_classes[static_cast<size_t>(found[static_cast<size_t>(s)].second)];
  for (int c = 0; c < 3; ++c) EXPECT_GT(first_shard_classes[static_cast<size_t>(c)], 0) << "class " << c;
}

TEST(ImageFolder, ACorruptImageFailsNamingTheFileOrIsSkippedAndListed) {
  TempDir dir;
  make_folder(dir.file("in"));
  const std::string bad = dir.file("in/coat/sub/img5.png");
  std::string bytes = gradmesh::testing::read_file(bad);
  put(bad, bytes.substr(0, bytes.size() / 2));
  try {
    prepare_image_folder(options(dir.file("in"), dir.file("set")));
    FAIL() << "a truncated PNG was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--on-corrupt skip"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.file("set/index.json"))) << "a failed prepare leaves no set behind";
  fs::remove_all(dir.file("set"));
  ImageFolderOptions o = options(dir.file("in"), dir.file("set"));
  o.on_corrupt = OnCorrupt::kSkip;
  const PreparedFolder r = prepare_image_folder(o);
  EXPECT_EQ(r.set.samples, 119);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find(bad), std::string::npos) << r.skipped[0];
}

TEST(ImageFolder, AnImageOfAnotherSizeOrAnEmptyClassIsAnErrorNamingIt) {
  TempDir dir;
  make_folder(dir.file("in"));
  const std::vector<uint8_t> big(3 * 4 * 4, 9);
  put(dir.file("in/bag/odd.png"), encode_png(big.data(), ImageSize{3, 4, 4}));
  try {
    prepare_image_folder(options(dir.file("in"), dir.file("set")));
    FAIL() << "an image of another size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("odd.png"), std::string::npos) << e.what();
  }
  fs::remove(dir.file("in/bag/odd.png"));
  fs::create_directories(dir.file("in/empty"));
  fs::remove_all(dir.file("set"));
  EXPECT_THROW(prepare_image_folder(options(dir.file("in"), dir.file("set"))), Error);
  EXPECT_THROW(prepare_image_folder(options(dir.file("missing"), dir.file("set2"))), Error);
}

TEST(ImageFolder, AnInterruptedPrepareResumesToTheSameShards) {
  TempDir dir;
  make_folder(dir.file("in"));
  for (int i = 120; i < 600; ++i) {  // more files than one batch of 256
    const std::vector<uint8_t> p = folder_pixels(i % 120);
    put(dir.file("in/bag/extra" + std::to_string(i) + ".png"), encode_png(p.data(), kSize));
  }
  prepare_image_folder(options(dir.file("in"), dir.file("whole")));
  ImageFolderOptions o = options(dir.file("in"), dir.file("set"));
  o.threads = 1;  // batches of 256 files: shards are closed (and recorded) before the first one ends
  const auto interrupt = [](int64_t done, int64_t total) {
    if (done < total) throw Error(ErrorKind::kIo, "interrupted");
  };
  o.progress = interrupt;
  EXPECT_THROW(prepare_image_folder(o), Error);
  ASSERT_TRUE(fs::exists(dir.file("set/prepare-state.json")));
  ASSERT_FALSE(fs::exists(dir.file("set/index.json")));
  o.progress = nullptr;
  const PreparedFolder r = prepare_image_folder(o);
  EXPECT_GT(r.resumed_at, 0);
  EXPECT_LT(r.resumed_at, 256);
  EXPECT_EQ(r.set.samples, 600);
  for (const fs::directory_entry& e : fs::directory_iterator(dir.file("whole")))
    EXPECT_EQ(gradmesh::testing::read_file(e.path().string()), gradmesh::testing::read_file(dir.file("set/" + e.path().filename().string())))
        << e.path().filename() << " differs from an uninterrupted prepare's";
  // An unfinished prepare is not continued with other options.
  ImageFolderOptions other = options(dir.file("in"), dir.file("set3"));
  other.threads = 1;
  other.progress = interrupt;
  EXPECT_THROW(prepare_image_folder(other), Error);
  other.progress = nullptr;
  other.seed = 5;
  try {
    prepare_image_folder(other);
    FAIL() << "an unfinished prepare was continued with another seed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
  }
}

TEST(ImageFolder, LoaderWorkersGiveTheSameBatchesAndTheFirstBadSamplesError) {
  TempDir dir;
  make_folder(dir.file("in"));
  prepare_image_folder(options(dir.file("in"), dir.file("set")));
  auto set = std::make_shared<const MdsReader>(dir.file("set"));
  const ShardedImages images(set, Normalization{1.0f / 255.0f, 0.5f, 0.5f}, LabelSpace{3, "classes"}, 0,
                             ImageAugment{2, true, 11});
  std::vector<std::vector<float>> runs;
  for (const int workers : {1, 3}) {
    BatchLoaderOptions o;
    o.global_batch = 32;
    o.workers = workers;
    o.seed = 4;
    o.shuffle_block = 40;
    BatchLoader loader(images, o);
    std::vector<float> all;
    loader.start_epoch(1);
    Batch b;
    while (loader.next(b)) all.insert(all.end(), b.images.data(), b.images.data() + b.images.numel());
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0].size(), 120u * 120u);
  EXPECT_EQ(runs[0], runs[1]) << "the workers change how samples are spread, not what they are";
}

TEST(ImageFolder, ADamagedOrMisSizedSampleInAShardIsAnErrorNamingShardAndSample) {
  TempDir dir;
  {
    MdsWriter w(dir.file("set"), {{"x", "jpeg", std::nullopt}, {"y", "int", std::nullopt}}, 1 << 20);
    const std::vector<uint8_t> p = folder_pixels(0);
    const std::vector<uint8_t> other(3 * 5 * 5, 1);
    const std::string label(8, '\0');
    for (int i = 0; i < 12; ++i) {
      std::string x = encode_jpeg(p.data(), kSize, 90);
      if (i == 7) x = encode_jpeg(other.data(), ImageSize{3, 5, 5}, 90);
      if (i == 5) x = x.substr(0, x.size() / 3);
      w.add({x, label});
    }
    w.finish();
  }
  const ShardedImages images(std::make_shared<const MdsReader>(dir.file("set")), Normalization{1.0f, 0.0f, 1.0f},
                             LabelSpace{1, "classes"});
  std::vector<float> x(120);
  int32_t y = 0;
  for (const int bad : {5, 7}) {
    try {
      images.fill(0, bad, x.data(), &y);
      FAIL() << "sample " << bad << " was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shard.00000.mds: sample " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
  // Through the loader's three threads the error is the first bad sample's, as with one.
  BatchLoaderOptions o;
  o.global_batch = 12;
  o.shuffle = false;
  o.workers = 3;
  BatchLoader loader(images, o);
  loader.start_epoch(0);
  Batch b;
  try {
    loader.next(b);
    FAIL() << "a batch with damaged samples was delivered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::data
