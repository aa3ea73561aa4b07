// Test support for ZeRO through the real binary: a tiny GPT on a token set
// prepared from Debian's fortunes, and the command lines that train them at a given world size and ZeRO stage.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "parallel/trained_weights.h"

namespace gradmesh::testing {

// A tiny GPT, quick on two cores: AdamW with decay on the matrices only and
// clipping, so the sharded optimizer, the decay groups and the global norm
// all take part.
inline const std::string kTinyGpt =
    " --set model.kind=gpt --set data.format=tokens --set data.tokens=tokens --set model.n_layer=2"
    " --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set train.batch_size=8"
    " --set optim.name=adamw --set optim.lr=0.003 --set optim.weight_decay=0.1 --set optim.clip_grad_norm=0.5"
    " --set data.shuffle=false --set train.threads=1 --set output.report=false --set output.trace_steps=0"
    " --set train.eval_every_epoch=false --set parallel.first_bucket_mb=0.002 --set parallel.bucket_mb=0.01";

// " --nproc-per-node N --set parallel.zero=S" (no launcher for N = 0).
inline std::string world(int nproc, int zero) {
  return (nproc > 0 ? " --nproc-per-node " + std::to_string(nproc) : std::string()) +
         " --set parallel.zero=" + std::to_string(zero);
}

// A scratch directory holding `tokens/` (the fortunes, by character) when
// the corpus exists; `available()` says whether it does.
class GptWorkspace {
 public:
  GptWorkspace() {
    if (!std::filesystem::exists(kFortunes)) return;
    const CommandResult r = run_gradmesh(
        std::string("data prepare-text --vocab char --input ") + kFortunes + " --output tokens", dir_.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    available_ = r.exit_code == 0;
  }
  bool available() const { return available_; }
  const TempDir& dir() const { return dir_; }
  std::string file(const std::string& name) const { return dir_.file(name); }

  // gradmesh train with the tiny GPT into runs/<run_id>.
  CommandResult train(const std::string& run_id, const std::string& extra) const {
    return run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=" + run_id +
                            kTinyGpt + extra,
                        dir_.path());
  }
  std::vector<float> weights(const std::string& run_id) const {
    return weights_of(file("runs/" + run_id + "/model.safetensors"));
  }

 private:
  TempDir dir_;
  bool available_ = false;
};

// The last metrics.jsonl line of `type` in a run directory (null when none).
inline nlohmann::json last_metrics_line(const std::string& run_dir, const std::string& type) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["type"] == type) last = j;
  }
  return last;
}

// Every tensor of a safetensors file by name.
inline std::map<std::string, std::vector<float>> named_weights(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : checkpoint::read_safetensors(path).tensors) out[t.name] = t.tensor.to_vector();
  return out;
}

// "" when every tensor of two weight files agrees within `tolerance` of its
// largest magnitude (relative_difference), else one line per tensor that does not.
inline std::string compare_weight_files(const std::string& a_path, const std::string& b_path, double tolerance) {
  const auto a = named_weights(a_path), b = named_weights(b_path);
  if (a.size() != b.size()) return "the files hold different tensors";
  std::string out;
  for (const auto& [name, values] : a) {
    const auto other = b.find(name);
    if (other == b.end()) return "missing " + name;
    const double diff = relative_difference(values, other->second);
    if (!(diff <= tolerance)) out += name + " differs by " + std::to_string(diff) + "\n";
  }
  return out;
}

}  // namespace gradmesh::testing
