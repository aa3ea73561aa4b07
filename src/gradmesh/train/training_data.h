// The data a training config names, as sample sources for the batch loader
// and the evaluation: images from IDX files (data.format = "idx", loaded
// whole), images from sharded MDS sets (data.format = "mds", read sample by
// sample) or language-model windows from a token set (data.format = "tokens").
#pragma once

#include <memory>

#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/data/token_file.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"

namespace gradmesh::train {

// Owns what the sources read, so it is shared, never moved.
struct TrainingData {
  data::ImageDataset train_images, test_images;  // format = "idx"
  data::TokenSet tokens;                         // format = "tokens"
  std::unique_ptr<data::SampleSource> train;
  std::unique_ptr<data::SampleSource> test;      // null unless loaded with the evaluation set
  InputGeometry geometry;                        // what the model is built for
};

// Loads config.data (the evaluation set too when `with_test`). Throws
// Error(kConfig) when model.kind and data.format do not go together or
// data.tokens is missing, and the loaders' errors (kIo, kFormat) naming the file.
std::shared_ptr<const TrainingData> load_training_data(const Config& config, bool with_test);

}  // namespace gradmesh::train
