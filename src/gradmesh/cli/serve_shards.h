// gradmesh serve --nproc N --mesh pp=P,tp=T: one GPT split across N = P x T
// processes (serve/sharded_gpt.h), each building its stage and shard as
// training does (train/model_factory.h) and loading its part of the
// weights from a checkpoint of any layout.
#pragma once

#include <memory>
#include <string>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/serve/sharded_gpt.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/model_factory.h"

namespace gradmesh::cli {

struct ServeMesh {
  int pp = 1, tp = 1;
  int size() const { return pp * tp; }
};

// "pp=2", "tp=2", "pp=2,tp=2" (either order; a missing one is 1); "" is the
// whole model. Error(kUsage) naming --mesh for anything else (dp, which a
// server gets by running more servers, included).
ServeMesh parse_serve_mesh(const std::string& text);

struct ShardedPart {
  std::unique_ptr<nn::Model> part;  // this rank's stage and shard, with its weights
  std::shared_ptr<serve::ShardedGpt> sharded;
  std::string version;              // the checkpoint's step
  std::string stage_split;          // pp > 1: which blocks each stage holds
};

// Collective over `world` (pp x tp ranks): creates the groups, builds this
// rank's part of the GPT `config` describes and loads its weights from
// `path` (cli/model_source.h). A rank that fails makes every rank fail,
// naming it. Error(kConfig) for a model that is not a GPT or does not split
// this way.
ShardedPart load_sharded_part(const std::shared_ptr<comm::ProcessGroup>& world, const ServeMesh& mesh,
                              const train::Config& config, const train::InputGeometry& geometry,
                              const std::string& path);

}  // namespace gradmesh::cli
