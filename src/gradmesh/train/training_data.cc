#include "gradmesh/train/training_data.h"

#include <filesystem>

#include "gradmesh/core/error.h"
#include "gradmesh/data/shard_files.h"
#include "gradmesh/data/sharded_images.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {
namespace {

void check_model_fits_data(const Config& config) {
  const bool language_model = config.model.kind == "gpt", tokens = config.data.format == "tokens";
  if (language_model && !tokens)
    throw_error(ErrorKind::kConfig, "model.kind",
                "gpt is a language model: it trains on a token set (data.format = \"tokens\", data.tokens = a "
                "directory written by gradmesh data prepare-text), not on data.format = \"" + config.data.format + "\"");
  if (!language_model && tokens)
    throw_error(ErrorKind::kConfig, "data.format",
                "\"tokens\" feeds a language model (model.kind = \"gpt\"), not model.kind = \"" + config.model.kind + "\"");
  if (config.data.format != "mds" && (config.data.crop_padding > 0 || config.data.flip))
    throw_error(ErrorKind::kConfig, config.data.crop_padding > 0 ? "data.crop_padding" : "data.flip",
                "augmentation applies to image sets read from shards (data.format = \"mds\"), not to data.format = \"" +
                    config.data.format + "\": write the images as a set with gradmesh data prepare");
  if (tokens && config.data.tokens.empty())
    throw_error(ErrorKind::kConfig, "data.tokens",
                "empty: name the token set directory (gradmesh data prepare-text --output DIR writes one)");
}

void load_tokens(const Config& config, bool with_test, TrainingData& d) {
  const std::string dir = config.data.tokens;
  // The first thing a new user of a language model meets: say how to make the set.
  if (!std::filesystem::exists(std::filesystem::path(dir) / "vocab.json") &&
      !std::filesystem::exists(std::filesystem::path(dir) / "train.bin"))
    throw_error(ErrorKind::kConfig, "data.tokens",
                "no token set in '" + dir + "' (no vocab.json or train.bin there): make one with `gradmesh data "
                "prepare-text --vocab char --output " + dir + "` (Debian's fortunes by default; --input FILE_OR_DIR "
                "for your own text; --vocab sentencepiece for subwords), or point data.tokens at a directory it "
                "wrote or at a nanoGPT data directory");
  d.tokens = data::read_token_set(dir, static_cast<int>(config.model.vocab_size));
  const int64_t block = config.model.block_size;
  const std::string train_file = (std::filesystem::path(dir) / "train.bin").string();
  const std::string val_file = (std::filesystem::path(dir) / "val.bin").string();
  const int vocab = d.tokens.vocab_size;
  d.train = std::make_unique<data::TokenWindows>(d.tokens.train, block, config.data.windows_per_epoch,
                                                 config.train.seed, train_file, vocab);
  if (with_test) {
    auto blocks = std::make_unique<data::TokenBlocks>(d.tokens.val, block, val_file, config.data.limit_test, vocab);
    d.test = std::move(blocks);
  }
  d.geometry.vocab_size = d.tokens.vocab_size;
}

// One MDS set (data.train_set or data.test_set), checked whole first when data.verify_shards says so.
std::unique_ptr<data::ShardedImages> open_set(const Config& config, const std::string& dir, const char* key,
                                              int64_t limit, const data::ImageAugment& augment = {}) {
  if (dir.empty())
    throw_error(ErrorKind::kConfig, std::string("data.") + key,
                "empty: name the MDS set's directory (gradmesh data prepare --output DIR writes one)");
  if (!data::is_http_location(dir) && !std::filesystem::exists(std::filesystem::path(dir) / "index.json"))
    throw_error(ErrorKind::kConfig, std::string("data.") + key,
                "no MDS set in '" + dir + "' (no index.json there): make one with `gradmesh data prepare --images "
                "FILE --labels FILE --output " + dir + "` (IDX files) or `gradmesh data prepare --image-folder DIR "
                "--output " + dir + "` (JPEG and PNG files, a subdirectory per class)");
  data::MdsReadOptions read;
  read.cache_bytes = config.data.cache_mb << 20;
  auto set = std::make_shared<const data::MdsReader>(dir, read);
  if (config.data.verify_shards)
    for (size_t s = 0; s < set->shards().size(); ++s)
      if (const std::string wrong = set->verify_shard(s); !wrong.empty())
        throw_error(ErrorKind::kFormat, dir + "/" + set->shards()[s].file, wrong);
  const DataConfig& c = config.data;
  const data::Normalization norm{static_cast<float>(c.scale), static_cast<float>(c.mean), static_cast<float>(c.std)};
  return std::make_unique<data::ShardedImages>(std::move(set), norm,
                                               data::LabelSpace{static_cast<int32_t>(config.model.classes),
                                                                "model.classes"},
                                               limit, augment);
}

void load_sharded_images(const Config& config, bool with_test, TrainingData& d) {
  const data::ImageAugment augment{config.data.crop_padding, config.data.flip, config.train.seed};
  auto train = open_set(config, config.data.train_set, "train_set", config.data.limit_train, augment);
  const Shape shape = train->sample_shape();
  d.geometry = {shape[0], shape[1], shape[2], 0};
  d.train = std::move(train);
  if (!with_test) return;
  auto test = open_set(config, config.data.test_set, "test_set", config.data.limit_test);
  if (test->sample_shape() != shape)
    throw_error(ErrorKind::kConfig, "data.test_set",
                "its images are " + shape_str(test->sample_shape()) + ", the training set's " + shape_str(shape));
  d.test = std::move(test);
}

}  // namespace

std::shared_ptr<const TrainingData> load_training_data(const Config& config, bool with_test) {
  check_model_fits_data(config);
  auto d = std::make_shared<TrainingData>();
  if (config.data.format == "tokens") {
    load_tokens(config, with_test, *d);
    return d;
  }
  if (config.data.format == "mds") {
    load_sharded_images(config, with_test, *d);
    return d;
  }
  d->train_images = load_train_set(config);
  d->train = std::make_unique<data::ImageSamples>(d->train_images);
  if (with_test) {
    d->test_images = load_test_set(config);
    d->test = std::make_unique<data::ImageSamples>(d->test_images);
  }
  d->geometry = {d->train_images.channels, d->train_images.height, d->train_images.width, 0};
  return d;
}

}  // namespace gradmesh::train
