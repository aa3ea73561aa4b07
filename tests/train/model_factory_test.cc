// The model a config builds: its output width is model.classes, and a model
// too large to hold is refused, naming the keys, before anything is allocated.
#include <gtest/gtest.h>

#include "gradmesh/core/error.h"
#include "gradmesh/train/model_factory.h"

namespace gradmesh::train {
namespace {

const InputGeometry kFashion{1, 28, 28};

std::string model_error(const ModelConfig& config) {
  try {
    count_parameters(config, kFashion);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ModelFactory, CountMatchesTheBuiltModelAndClassesSetTheOutputWidth) {
  ModelConfig mlp;
  ModelConfig cnn;
  cnn.kind = "cnn";
  for (ModelConfig* c : {&mlp, &cnn}) {
    for (int64_t classes : {10, 37}) {
      c->classes = classes;
      const std::unique_ptr<nn::Model> model = build_model(*c, kFashion, 0);
      EXPECT_EQ(count_parameters(*c, kFashion), model->num_parameters()) << c->kind;
      const nn::ParameterInfo& last_bias = model->parameters().back();
      EXPECT_EQ(last_bias.shape, (Shape{classes})) << c->kind;
    }
  }
  mlp.classes = 10;
  EXPECT_EQ(count_parameters(mlp, kFashion), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
}

TEST(ModelFactory, TheGptSpecCarriesRecompute) {
  ModelConfig gpt;
  gpt.kind = "gpt";
  const InputGeometry tokens{0, 0, 0, 50};
  EXPECT_FALSE(gpt_spec(gpt, tokens).recompute);
  gpt.recompute = true;
  EXPECT_TRUE(gpt_spec(gpt, tokens).recompute);
}

TEST(ModelFactory, AModelBeyondTwoToTheThirtyOneParametersIsRefused) {
  ModelConfig wide;
  wide.hidden = {1 << 20, 1 << 20};  // each width allowed, the product is not
  const std::string mlp = model_error(wide);
  EXPECT_NE(mlp.find("model.hidden = [1048576, 1048576], model.classes = 10: hidden layer 2 (1048576 -> 1048576) "
                     "alone would hold 1048576 x 1048576 weights, more than the 2147483648 (2^31) parameters"),
            std::string::npos)
      << mlp;
  ModelConfig many;
  many.hidden = std::vector<int64_t>(3000, 1000);  // each layer small, the total too large
  const std::string total = model_error(many);
  EXPECT_NE(total.find("the model would have more than 2147483648 (2^31) parameters"), std::string::npos) << total;
  ModelConfig cnn;
  cnn.kind = "cnn";
  cnn.channels = {1 << 20};
  cnn.fc_hidden = 1 << 20;
  const std::string conv = model_error(cnn);
  EXPECT_NE(conv.find("model.channels = [1048576], model.fc_hidden = 1048576, model.classes = 10: the hidden linear "
                      "layer (177209344 -> 1048576)"),
            std::string::npos)
      << conv;
  EXPECT_THROW(build_model(wide, kFashion, 0), Error);  // build_model checks before allocating
}

}  // namespace
}  // namespace gradmesh::train
