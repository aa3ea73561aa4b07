// Loading a run's data: the errors a new user meets first say what to do.
#include "gradmesh/train/training_data.h"

#include <gtest/gtest.h>

#include <string>

#include "gradmesh/core/error.h"
#include "gradmesh/train/config.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

// examples/gpt.toml before its token set was prepared.
TEST(TrainingData, AMissingTokenSetSaysHowToMakeIt) {
  testing::TempDir dir;
  const std::string tokens = dir.path() + "/fortunes";
  const Config config = load_config(GRADMESH_SOURCE_DIR "/examples/gpt.toml", {"data.tokens=" + tokens});
  try {
    load_training_data(config, true);
    ADD_FAILURE() << "a missing token set must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("data.tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("gradmesh data prepare-text --vocab char --output " + tokens), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace gradmesh::train
