#include "gradmesh/cli/serve_shards.h"

#include <sstream>
#include <utility>
#include <vector>

#include "gradmesh/cli/model_source.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/mesh.h"
#include "gradmesh/parallel/pipeline_schedule.h"
#include "gradmesh/parallel/tensor_parallel.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::cli {

ServeMesh parse_serve_mesh(const std::string& text) {
  ServeMesh mesh;
  if (text.empty()) return mesh;
  auto bad = [&](const std::string& why) {
    throw_error(ErrorKind::kUsage, "--mesh '" + text + "'", why + "; expected pp=P, tp=T or pp=P,tp=T");
  };
  std::stringstream in(text);
  std::string item;
  bool seen_pp = false, seen_tp = false;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) bad("'" + item + "' is not NAME=VALUE");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    int n = 0;
    size_t used = 0;
    try {
      n = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size() || n < 1 || n > 1024) bad(name + " = '" + value + "' is not an integer from 1 to 1024");
    if (name == "pp" && !seen_pp) {
      mesh.pp = n, seen_pp = true;
    } else if (name == "tp" && !seen_tp) {
      mesh.tp = n, seen_tp = true;
    } else if (name == "dp") {
      bad("a server is one replica (run more servers for more replicas)");
    } else {
      bad("'" + name + "' is not pp or tp, or is given twice");
    }
  }
  return mesh;
}

ShardedPart load_sharded_part(const std::shared_ptr<comm::ProcessGroup>& world, const ServeMesh& mesh,
                              const train::Config& config, const train::InputGeometry& geometry,
                              const std::string& path) {
  GRADMESH_CHECK(world->size() == mesh.size(), "the world is the mesh");
  ShardedPart out;
  // Every rank creates every group in the same order (collective), before any
  // rank can fail alone.
  const parallel::MeshGroups groups =
      parallel::create_mesh_groups(world, parallel::DeviceMesh(parallel::MeshShape{1, mesh.pp, mesh.tp}));
  serve::ShardGroups sg;
  sg.pp = mesh.pp;
  sg.tp = mesh.tp;
  sg.world = world;
  std::vector<int> all(static_cast<size_t>(world->size()));
  for (int r = 0; r < world->size(); ++r) all[static_cast<size_t>(r)] = r;
  sg.control = world->new_group(all);
  if (mesh.pp > 1) {
    std::vector<int> stages(static_cast<size_t>(mesh.pp));
    for (int s = 0; s < mesh.pp; ++s) stages[static_cast<size_t>(s)] = s;
    sg.down = groups.pp->new_group(stages);
    sg.up = groups.pp->new_group(stages);
  }
  std::shared_ptr<nn::TensorSplit> split;
  if (mesh.tp > 1) {
    sg.tp_group = groups.tp;
    split = std::make_shared<parallel::GroupTensorSplit>(groups.tp);
  }
  train::on_every_rank(world.get(), [&] {
    if (config.model.kind != "gpt")
      throw_error(ErrorKind::kConfig, "model.kind",
                  "\"" + config.model.kind + "\" cannot be split across processes (only the GPT splits its layers)");
    if (config.model.n_layer < mesh.pp)
      throw_error(ErrorKind::kConfig, "--mesh",
                  std::to_string(mesh.pp) + " stages need at least as many blocks, model.n_layer = " +
                      std::to_string(config.model.n_layer));
    nn::GptStage stage;
    if (mesh.pp > 1) {
      const std::vector<parallel::StageBlocks> blocks = train::gpt_stage_split(config.model, geometry, mesh.pp);
      out.stage_split = parallel::describe_stages(blocks);
      const int index = world->rank() / mesh.tp;
      stage = nn::GptStage{index, mesh.pp, blocks[static_cast<size_t>(index)].begin, blocks[static_cast<size_t>(index)].end};
    }
    out.part = train::build_model(config.model, geometry, config.train.seed, nn::ParameterInit::kNow, split, stage);
    // A stage takes its parameters of the whole model; a shard its pieces of them.
    out.version = load_weights_at(path, *out.part, /*others_allowed=*/mesh.pp > 1);
    out.part->set_training(false);
  }, "loading the sharded model");
  out.sharded = std::make_shared<serve::ShardedGpt>(static_cast<nn::Gpt&>(out.part->root()), sg);
  return out;
}

}  // namespace gradmesh::cli
