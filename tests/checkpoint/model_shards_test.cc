// Weights in pieces (model.shard-<i>-of-<K>): joined back into the whole
// model by read_model_weights, every malformed shard set named with its file
// and field; the manifest's layout written, read back and checked.
#include <gtest/gtest.h>

#include <functional>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "gradmesh/checkpoint/model_shards.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

using gradmesh::testing::TempDir;
using testing::trainer_at;

// The whole model: a [2, 3] and b [4], ten elements 0..9 in flat order.
const std::vector<std::pair<std::string, Shape>> kParams = {{"a", {2, 3}}, {"b", {4}}};

// Shard `index` of 2: shard 1 holds [0, 3) and [6, 8), shard 2 [3, 6) and [8, 10).
TensorFile piece(int index, const std::vector<std::pair<std::string, Shape>>& params = kParams) {
  const std::vector<ElementRange> ranges =
      index == 1 ? std::vector<ElementRange>{{0, 3}, {6, 2}} : std::vector<ElementRange>{{3, 3}, {8, 2}};
  std::vector<float> values;
  for (const ElementRange& r : ranges)
    for (int64_t i = r.begin; i < r.begin + r.count; ++i) values.push_back(static_cast<float>(i));
  return model_shard_file(index, 2, index - 1, ranges, Tensor::from_vector({static_cast<int64_t>(values.size())}, values),
                          params, {{"format", "pt"}});
}

// A checkpoint of `files` (and trainer.json), committed and verified.
LoadedCheckpoint commit(const TempDir& dir, std::vector<TensorFile> files) {
  Snapshot s;
  s.step = 1;
  s.world_size = 2;
  s.layout = SavedLayout{1, 2, 1, 0};
  s.tensor_files = std::move(files);
  s.text_files.emplace_back("trainer.json", trainer_state_json(trainer_at(1)));
  CheckpointWriter writer({dir.path(), 0});
  const SaveResult saved = writer.save(s);
  EXPECT_TRUE(saved.ok) << saved.error;
  return verify_checkpoint(dir.file("step-1"));
}

std::string join_error(std::vector<TensorFile> files) {
  TempDir dir;
  const LoadedCheckpoint loaded = commit(dir, std::move(files));
  try {
    read_model_weights(loaded);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelShards, PiecesJoinIntoTheWholeModel) {
  TempDir dir;
  const LoadedCheckpoint loaded = commit(dir, {piece(1), piece(2)});
  EXPECT_TRUE(has_model_shards(loaded));
  const std::vector<NamedTensor> whole = read_model_weights(loaded);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].name, "a");
  EXPECT_EQ(whole[0].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(whole[0].tensor.to_vector(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(whole[1].name, "b");
  EXPECT_EQ(whole[1].tensor.to_vector(), (std::vector<float>{6, 7, 8, 9}));
  // The layout is in the manifest.
  ASSERT_TRUE(loaded.manifest.layout.has_value());
  EXPECT_EQ(*loaded.manifest.layout, (SavedLayout{1, 2, 1, 0}));
}

TEST(ModelShards, ParamShapesTextIsStrict) {
  const std::vector<std::pair<std::string, Shape>> params = {{"w", {65, 32}}, {"s", {}}, {"b", {7}}};
  EXPECT_EQ(param_shapes_text(params), "w:65x32,s:,b:7");
  EXPECT_EQ(parse_param_shapes("w:65x32,s:,b:7", "f"), params);
  for (const char* bad : {"", "w", ":3", "w:3x", "w:0", "w:x3", "w:3,", "w:3,,b:2", "w:1x1x1x1x1x1x1x1x1", "w:-2"}) {
    try {
      parse_param_shapes(bad, "shard.safetensors");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat) << bad;
      EXPECT_NE(std::string(e.what()).find("shard.safetensors"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("metadata 'params'"), std::string::npos) << e.what();
    }
  }
}

TEST(ModelShards, MalformedShardSetsAreNamed) {
  auto with = [](TensorFile f, const std::function<void(TensorFile&)>& change) {
    change(f);
    return f;
  };
  const TensorFile whole{kModelFileName, copy_tensors({{"a", Tensor::zeros({2, 3})}}), {{"format", "pt"}}, 0};
  struct Case {
    std::vector<TensorFile> files;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{with(piece(1), [](TensorFile& f) { f.metadata.erase("params"); }), piece(2)},
       "model.shard-00001-of-00002.safetensors: metadata 'params' is missing"},
      {{piece(1), with(piece(2), [](TensorFile& f) { f.metadata.erase("ranges"); })},
       "model.shard-00002-of-00002.safetensors: metadata 'ranges' is missing"},
      {{piece(1), piece(2, {{"a", {2, 3}}, {"c", {4}}})}, "metadata 'params' differs"},
      {{with(piece(1), [](TensorFile& f) { f.metadata["ranges"] = "0+3,6+3"; }), piece(2)},
       "expected one F32 tensor 'weights' of 6 elements"},
      {{with(piece(1), [](TensorFile& f) { f.metadata["ranges"] = "6+2,0+3"; }), piece(2)},
       "is not after the range before it"},
      {{with(piece(1), [](TensorFile& f) { f.metadata["ranges"] = "0+3,5+2"; }), piece(2)}, "overlaps another"},
      {{with(piece(1), [](TensorFile& f) { f.metadata["ranges"] = "0+2,6+3"; }), piece(2)}, "are in no piece"},
      {{with(piece(1), [](TensorFile& f) { f.metadata["ranges"] = "0+3,9+2"; }), piece(2)},
       "ends beyond the model's 10 elements"},
      {{with(piece(1), [](TensorFile& f) { f.tensors[0].name = "w"; }), piece(2)}, "expected one F32 tensor 'weights'"},
      {{piece(1)}, "model shard model.shard-00002-of-00002.safetensors is missing"},
      {{whole, piece(1), piece(2)}, "holds both model.safetensors and model shards"},
      {{TensorFile{"other.safetensors", copy_tensors({{"a", Tensor::zeros({1})}}), {}, 0}}, "holds no weights"},
  };
  for (const Case& c : cases) {
    const std::string error = join_error(c.files);
    EXPECT_NE(error.find(c.expected), std::string::npos) << "expected '" << c.expected << "', got '" << error << "'";
  }
}

TEST(ManifestLayout, IsWrittenReadAndChecked) {
  Manifest m;
  m.step = 3;
  m.world_size = 4;
  m.layout = SavedLayout{2, 2, 1, 1};
  const std::string text = manifest_json(m);
  EXPECT_NE(text.find("\"layout\""), std::string::npos);
  EXPECT_EQ(parse_manifest(text, "manifest.json").layout, m.layout);
  m.layout.reset();
  EXPECT_EQ(manifest_json(m).find("\"layout\""), std::string::npos);
  EXPECT_FALSE(parse_manifest(manifest_json(m), "manifest.json").layout.has_value());
  const std::string head = R"({"format": "gradmesh-checkpoint", "version": 1, "step": 3, "world_size": 4, )"
                           R"("created_unix": 0, "files": [], "layout": )";
  for (const auto& [layout, expected] : std::vector<std::pair<std::string, std::string>>{
           {"[2, 2]", "expected an object"},
           {R"({"dp": 2, "pp": 2, "tp": 1})", "missing field 'zero'"},
           {R"({"dp": 0, "pp": 2, "tp": 1, "zero": 0})", "field 'dp'"},
           {R"({"dp": 2, "pp": 2, "tp": 1, "zero": 4})", "field 'zero'"},
           {R"({"dp": 2, "pp": 1, "tp": 1, "zero": 0})", "dp x pp x tp = 2 is not the world size 4"}}) {
    try {
      parse_manifest(head + layout + "}", "step-3/manifest.json");
      ADD_FAILURE() << "accepted " << layout;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("step-3/manifest.json: layout"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradmesh::checkpoint
