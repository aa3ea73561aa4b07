// What the ranks of a data-parallel job must agree on before the first step.
//
// Each rank prepares on its own (config, dataset, model), then all meet once:
//   * a rank whose preparation failed says so, and every rank stops with an
//     error naming it (instead of the others hanging in the first all-reduce);
//   * the configs must be identical, and so must the parameter layouts; a
//     difference is reported with the first differing line and the ranks on
//     each side;
//   * rank 0's initial parameters are broadcast, so every replica starts equal
//     even when ranks were initialised from different files or seeds.
// Strings travel as float32 tensors of byte values (exact below 2^24), so this
// needs nothing but the collectives every backend has.
#pragma once

#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::parallel {

// Every rank's `mine`, in rank order.
std::vector<std::string> allgather_strings(comm::ProcessGroup& group, const std::string& mine);
// Root's `text` on every rank.
std::string broadcast_string(comm::ProcessGroup& group, const std::string& text, int root = 0);

struct StartState {
  std::string error;        // non-empty: this rank could not prepare (the message says why)
  std::string config_text;  // the config as every rank must see it (canonical TOML)
  std::string layout;       // one line per parameter: name and shape
};

// One line per parameter, "name [d0, d1]", in flat-buffer order.
std::string parameter_layout(const nn::Model& model);

// Collective. Throws Error(kConfig) when configs or layouts differ, Error(kComm)
// naming the ranks that failed to prepare (a failed rank rethrows nothing
// itself: it keeps its own error and should throw it after this returns or throws).
void check_start_agreement(comm::ProcessGroup& group, const StartState& mine);

// Collective: every rank's parameters become rank 0's.
void broadcast_parameters(comm::ProcessGroup& group, nn::Model& model);

}  // namespace gradmesh::parallel
