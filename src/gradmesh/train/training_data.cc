#include "gradmesh/train/training_data.h"

#include <filesystem>

#include "gradmesh/core/error.h"
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
  if (tokens && config.data.tokens.empty())
    throw_error(ErrorKind::kConfig, "data.tokens",
                "empty: name the token set directory (gradmesh data prepare-text --output DIR writes one)");
}

void load_tokens(const Config& config, bool with_test, TrainingData& d) {
  const std::string dir = config.data.tokens;
  // The first thing a new user of a language model meets: say how to make the set.
  if (!std::filesystem::exists(std::filesystem::path(dir) / "vocab.json"))
    throw_error(ErrorKind::kConfig, "data.tokens",
                "no token set in '" + dir + "' (no vocab.json there): make one with `gradmesh data prepare-text "
                "--vocab char --output " + dir + "` (Debian's fortunes by default; --input FILE_OR_DIR for your "
                "own text), or point data.tokens at a directory it wrote");
  d.tokens = data::read_token_set(dir);
  const int64_t block = config.model.block_size;
  const std::string train_file = (std::filesystem::path(dir) / "train.bin").string();
  const std::string val_file = (std::filesystem::path(dir) / "val.bin").string();
  d.train = std::make_unique<data::TokenWindows>(d.tokens.train, block, config.data.windows_per_epoch,
                                                 config.train.seed, train_file);
  if (with_test) {
    auto blocks = std::make_unique<data::TokenBlocks>(d.tokens.val, block, val_file, config.data.limit_test);
    d.test = std::move(blocks);
  }
  d.geometry.vocab_size = d.tokens.vocab_size;
}

}  // namespace

std::shared_ptr<const TrainingData> load_training_data(const Config& config, bool with_test) {
  check_model_fits_data(config);
  auto d = std::make_shared<TrainingData>();
  if (config.data.format == "tokens") {
    load_tokens(config, with_test, *d);
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
