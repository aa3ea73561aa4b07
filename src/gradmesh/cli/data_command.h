// `gradmesh data prepare` (IDX files or an image folder -> an MDS set),
// `gradmesh data bench` (a set read through the training loader, timed) and
// what `gradmesh inspect` says of a set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::cli {

struct PrepareArgs {
  std::string images, labels;  // IDX files
  std::string image_folder;    // or ROOT/<class>/<image>
  std::string output;
  int64_t shard_mb = 64;
  int workers = 0;  // decoding threads; 0 = the machine's cores
  std::string on_corrupt = "fail";
  uint64_t seed = 0;
};
int run_prepare(const PrepareArgs& args);

// `gradmesh data prepare-text`: tokenises the inputs (default Debian's
// fortunes) into a token set and prints what it wrote.
struct PrepareTextArgs {
  std::vector<std::string> inputs;
  std::string output, vocab = "byte";
  double val_fraction = 0.1;
  int vocab_size = 8000;          // sentencepiece, trained
  std::string tokenizer_model;    // sentencepiece, loaded
  int workers = 0;                // 0 = every core
  uint64_t seed = 0;
};
int run_prepare_text(const PrepareTextArgs& args);

struct DataBenchArgs {
  std::string set;
  int workers = 1;
  int64_t batch = 256;
  int64_t crop_padding = 0;
  bool flip = false;
  int64_t epochs = 1;
  int64_t limit = 0;         // the first N samples (0 = all)
  bool decode_only = false;  // libjpeg-turbo / libspng alone, one thread, from memory
  bool json = false;
};
int run_data_bench(const DataBenchArgs& args);

// An MDS set: columns, samples, classes, shards, every shard's checksum
// verified; 1 when one does not verify.
int inspect_set(const std::string& dir);

}  // namespace gradmesh::cli
