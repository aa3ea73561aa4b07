// `gradmesh plan CONFIG --workers N`: every layout of the job on N workers,
// with memory per rank and predicted step time (scaling/layout_plan.h);
// layouts over --memory-limit are rejected with their numbers and the
// fastest one that fits is named.
#pragma once

#include <string>
#include <vector>

namespace gradmesh::cli {

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  int workers = 1;
  std::string mesh;                                   // "dp=2,pp=2,tp=1": that mesh only
  std::string bandwidth = "10gbit", latency = "50us"; // the network between the workers
  std::string memory_limit;                           // "" = none
};

int run_plan(const PlanArgs& args);

}  // namespace gradmesh::cli
