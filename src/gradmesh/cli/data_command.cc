#include "gradmesh/cli/data_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/image_codec.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/prepare_image_folder.h"
#include "gradmesh/data/prepare_images.h"
#include "gradmesh/data/sharded_images.h"
#include "gradmesh/data/token_file.h"

namespace gradmesh::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A progress bar on a terminal; on a pipe or a log, a line every tenth.
class ProgressBar {
 public:
  explicit ProgressBar(const char* what) : what_(what), tty_(isatty(STDERR_FILENO) != 0), start_(Clock::now()) {}
  void update(int64_t done, int64_t total) {
    const double rate = done / std::max(seconds_since(start_), 1e-9);
    const int percent = total > 0 ? static_cast<int>(done * 100 / total) : 100;
    if (tty_) {
      char bar[31];
      const int filled = percent * 30 / 100;
      for (int i = 0; i < 30; ++i) bar[i] = i < filled ? '#' : '.';
      bar[30] = 0;
      std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld, %.0f/s ", what_, bar, percent, static_cast<long long>(done),
                   static_cast<long long>(total), rate);
      if (done == total) std::fputc('\n', stderr);
    } else if (percent / 10 > last_tenth_ || done == total) {
      last_tenth_ = percent / 10;
      std::fprintf(stderr, "%s: %d%% (%lld of %lld, %.0f/s)\n", what_, percent, static_cast<long long>(done),
                   static_cast<long long>(total), rate);
    }
    std::fflush(stderr);
  }

 private:
  const char* what_;
  bool tty_;
  Clock::time_point start_;
  int last_tenth_ = -1;
};

int prepare_folder(const PrepareArgs& a) {
  data::ImageFolderOptions o;
  o.root = a.image_folder;
  o.output = a.output;
  o.shard_bytes = a.shard_mb << 20;
  o.threads = a.workers > 0 ? a.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.on_corrupt = a.on_corrupt == "skip" ? data::OnCorrupt::kSkip : data::OnCorrupt::kFail;
  o.seed = a.seed;
  ProgressBar bar("decoding and writing images");
  o.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
  const data::PreparedFolder r = data::prepare_image_folder(o);
  if (r.resumed_at > 0)
    std::printf("resumed an interrupted prepare after %lld file(s)\n", static_cast<long long>(r.resumed_at));
  for (const std::string& why : r.skipped) std::fprintf(stderr, "gradmesh data prepare: skipped %s\n", why.c_str());
  std::printf("%s: %lld samples of %zu classes in %zu shard(s), %lld bytes (MDS%s; `gradmesh inspect %s` verifies "
              "them)\n",
              a.output.c_str(), static_cast<long long>(r.set.samples), r.classes.size(), r.set.shards,
              static_cast<long long>(r.set.bytes),
              r.skipped.empty() ? "" : (", " + std::to_string(r.skipped.size()) + " corrupt file(s) skipped").c_str(),
              a.output.c_str());
  return 0;
}

std::vector<std::string> read_classes(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "classes.json");
  if (!in) return {};
  const nlohmann::json names = nlohmann::json::parse(in, nullptr, false);
  std::vector<std::string> classes;
  if (names.is_array())
    for (const nlohmann::json& n : names)
      if (n.is_string()) classes.push_back(n.get<std::string>());
  return classes;
}

// Images per second decoding the set's first samples from memory on this thread alone.
double decode_rate(const data::MdsReader& set, int64_t limit) {
  const size_t x = set.column("x");
  std::vector<std::string> encoded;
  for (int64_t i = 0; i < limit; ++i) encoded.push_back(set.sample(i)[x]);
  std::vector<uint8_t> pixels;
  const Clock::time_point start = Clock::now();
  for (const std::string& bytes : encoded) data::decode_image(bytes, pixels, set.dir());
  return static_cast<double>(limit) / seconds_since(start);
}

}  // namespace

int run_prepare(const PrepareArgs& a) {
  if (!a.image_folder.empty() && (!a.images.empty() || !a.labels.empty()))
    throw_error(ErrorKind::kUsage, "data prepare", "--image-folder or --images with --labels, not both");
  if (!a.image_folder.empty()) return prepare_folder(a);
  if (a.images.empty() || a.labels.empty())
    throw_error(ErrorKind::kUsage, "data prepare", "needs --images FILE --labels FILE (IDX) or --image-folder DIR");
  const data::PreparedSet r = data::prepare_images_from_idx(a.images, a.labels, a.output, a.shard_mb << 20);
  std::printf("%s: %lld samples in %zu shard(s), %lld bytes (MDS; `gradmesh inspect %s` verifies them)\n",
              a.output.c_str(), static_cast<long long>(r.samples), r.shards, static_cast<long long>(r.bytes),
              a.output.c_str());
  return 0;
}

int run_prepare_text(const PrepareTextArgs& a) {
  data::PrepareTextOptions o;
  o.inputs = a.inputs;
  if (o.inputs.empty()) o.inputs.push_back("/usr/share/games/fortunes");  // Debian's fortunes package
  o.kind = a.vocab == "char" ? data::Vocabulary::kChar
           : a.vocab == "sentencepiece" ? data::Vocabulary::kSentencePiece : data::Vocabulary::kByte;
  o.val_fraction = a.val_fraction;
  o.vocab_size = a.vocab_size;
  o.tokenizer_model = a.tokenizer_model;
  o.threads = a.workers > 0 ? a.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.seed = a.seed;
  if (!a.tokenizer_model.empty() && o.kind != data::Vocabulary::kSentencePiece)
    throw_error(ErrorKind::kUsage, "--tokenizer-model", "goes with --vocab sentencepiece");
  const Clock::time_point start = Clock::now();
  const data::TokenSet tokens = data::tokenize_text(o);
  data::write_token_set(tokens, a.output);
  std::printf("%s: %lld training and %lld validation tokens, vocabulary of %d (%s%s), %.1f s\n", a.output.c_str(),
              static_cast<long long>(tokens.train.size()), static_cast<long long>(tokens.val.size()), tokens.vocab_size,
              a.vocab.c_str(),
              o.kind == data::Vocabulary::kSentencePiece ? (a.tokenizer_model.empty() ? ", trained" : ", loaded") : "",
              seconds_since(start));
  return 0;
}

int run_data_bench(const DataBenchArgs& a) {
  auto set = std::make_shared<const data::MdsReader>(a.set);
  const int64_t count = a.limit > 0 ? std::min(a.limit, set->count()) : set->count();
  if (a.decode_only) {
    const double rate = decode_rate(*set, count);
    if (a.json)
      std::printf("{\"set\": \"%s\", \"mode\": \"decode\", \"threads\": 1, \"samples\": %lld, \"samples_per_s\": %.1f}\n",
                  a.set.c_str(), static_cast<long long>(count), rate);
    else
      std::printf("%s: decoding alone, one thread: %.0f images/s (%lld images)\n", a.set.c_str(), rate,
                  static_cast<long long>(count));
    return 0;
  }
  const data::ImageAugment augment{a.crop_padding, a.flip, 0};
  const data::ShardedImages images(set, data::Normalization{1.0f / 255.0f, 0.0f, 1.0f},
                                   data::LabelSpace{std::numeric_limits<int32_t>::max(), "the labels"}, count, augment);
  data::BatchLoaderOptions o;
  o.global_batch = a.batch;
  o.workers = a.workers;
  o.shuffle_block = 4 * ((count + static_cast<int64_t>(set->shards().size()) - 1) / static_cast<int64_t>(set->shards().size()));
  data::BatchLoader loader(images, o);
  int64_t samples = 0;
  double checksum = 0;  // reads the batches, so nothing is optimised away
  const Clock::time_point start = Clock::now();
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    loader.start_epoch(epoch);
    data::Batch batch;
    while (loader.next(batch)) {
      samples += static_cast<int64_t>(batch.sample_indices.size());
      checksum += batch.images.data()[0];
    }
  }
  const double seconds = seconds_since(start), rate = static_cast<double>(samples) / seconds;
  if (a.json)
    std::printf("{\"set\": \"%s\", \"mode\": \"loader\", \"workers\": %d, \"batch\": %lld, \"crop_padding\": %lld, "
                "\"flip\": %s, \"samples\": %lld, \"seconds\": %.3f, \"samples_per_s\": %.1f, \"checksum\": %.6g}\n",
                a.set.c_str(), a.workers, static_cast<long long>(a.batch), static_cast<long long>(a.crop_padding),
                a.flip ? "true" : "false", static_cast<long long>(samples), seconds, rate, checksum);
  else
    std::printf("%s: %lld samples in %.2f s through the loader (%d worker(s)%s%s): %.0f samples/s\n", a.set.c_str(),
                static_cast<long long>(samples), seconds, a.workers, images.encoded() ? ", decoding" : "",
                augment.active() ? ", crop and flip" : "", rate);
  return 0;
}

int inspect_set(const std::string& dir) {
  const data::MdsReader set(dir);
  std::printf("MDS set %s: %lld samples in %zu shard(s)\n", dir.c_str(), static_cast<long long>(set.count()),
              set.shards().size());
  for (const data::MdsColumn& c : set.columns())
    std::printf("  column %s: %s%s\n", c.name.c_str(), c.encoding.c_str(),
                c.size ? (" (" + std::to_string(*c.size) + " bytes)").c_str() : " (variable)");
  const std::vector<std::string> classes = read_classes(dir);
  if (!classes.empty()) {
    std::string names;
    for (size_t i = 0; i < classes.size() && i < 10; ++i) names += (i ? ", " : "") + classes[i];
    std::printf("  classes: %zu (classes.json: %s%s)\n", classes.size(), names.c_str(), classes.size() > 10 ? ", ..." : "");
  }
  int bad = 0;
  int64_t bytes = 0;
  for (size_t s = 0; s < set.shards().size(); ++s) {
    const data::MdsShardInfo& shard = set.shards()[s];
    const std::string wrong = set.verify_shard(s);
    bad += !wrong.empty();
    bytes += shard.bytes;
    std::printf("  %s: %lld samples, %lld bytes, %s\n", shard.file.c_str(), static_cast<long long>(shard.samples),
                static_cast<long long>(shard.bytes), wrong.empty() ? "xxh64 verified" : ("BAD: " + wrong).c_str());
  }
  std::printf("  %lld bytes in all; %s\n", static_cast<long long>(bytes),
              bad ? (std::to_string(bad) + " shard(s) do not verify").c_str() : "every shard verifies");
  if (bad) std::fprintf(stderr, "gradmesh inspect: %d shard(s) of %s do not verify\n", bad, dir.c_str());
  return bad ? 1 : 0;
}

}  // namespace gradmesh::cli
