// The run directory: runs/<id>/ holds everything one training run produced
// (config.toml, metrics.jsonl, model.safetensors).
#pragma once

#include <string>

namespace gradmesh::train {

// A fresh id: UTC "yyyymmdd-hhmmss-xxxx" (xxxx random hex, so two runs started
// in the same second do not collide).
std::string new_run_id();

// Creates <parent>/<id> (and parent). An existing directory is an error, so a
// run never overwrites another run's results, unless `reuse` (a resumed or
// restarted run continues in its own directory).
std::string create_run_dir(const std::string& parent, const std::string& id, bool reuse = false);

}  // namespace gradmesh::train
