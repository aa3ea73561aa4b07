// Writing an image folder in torchvision's ImageFolder layout as an MDS set
// (gradmesh data prepare --image-folder): ROOT/<class>/**/<file>.jpg|.jpeg|.png,
// classes numbered in the sorted order of their directory names, as
// torchvision.datasets.ImageFolder numbers them. Each sample keeps its file's
// bytes ("x": "jpeg", "png", or "bytes" when a folder mixes the two) and its
// class ("y": int); the loader decodes them. The class names go to
// classes.json next to index.json.
//
// Every file is decoded once while preparing (on `threads` threads), so a
// corrupt or truncated image is found here, named, and either stops the
// prepare or is skipped and listed. Samples are written in an order drawn
// from `seed`, so every shard mixes the classes. An interrupted prepare
// resumes where its last finished shard ended: the progress is recorded in
// OUTPUT/prepare-state.json after every shard and removed at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gradmesh/data/prepare_images.h"

namespace gradmesh::data {

enum class OnCorrupt { kFail, kSkip };

struct ImageFolderOptions {
  std::string root;
  std::string output;
  int64_t shard_bytes = int64_t{64} << 20;
  int threads = 1;  // decoding threads, >= 1
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  uint64_t seed = 0;  // the order samples are written in
  // Called after each batch of files with (files done, files in all).
  std::function<void(int64_t, int64_t)> progress;
};

struct PreparedFolder {
  PreparedSet set;
  std::vector<std::string> classes;
  std::vector<std::string> skipped;  // "FILE: why", with OnCorrupt::kSkip
  int64_t resumed_at = 0;            // files already done by an earlier, interrupted run
};

// Error(kUsage) for a missing root, one without class directories, or an
// output that already holds a set or another prepare's unfinished one;
// Error(kFormat) naming the file for a corrupt image (OnCorrupt::kFail), an
// image of another size than the first, or a class without images.
PreparedFolder prepare_image_folder(const ImageFolderOptions& options);

}  // namespace gradmesh::data
