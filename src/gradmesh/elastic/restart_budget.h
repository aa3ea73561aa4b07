// The job-wide restart budget (--max-restarts), shared by every launcher of
// the job through the store.
//
// Each restart starts a new generation. The first launcher to claim the
// restart into generation g proposes "<restarts used so far> + 1" with a
// compare-and-set on "<run_id>/<g>/restart"; every other launcher of the job
// reads the same agreed number, so a restart is counted exactly once however
// many nodes saw the failure. The agreed count is also kept in
// "<run_id>/restarts" for the next claim. In-process replacements draw from
// the same budget.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "gradmesh/comm/store.h"
#include "gradmesh/elastic/restart_record.h"

namespace gradmesh::elastic {

class RestartBudget {
 public:
  RestartBudget(std::shared_ptr<comm::Store> store, std::string run_id, int max_restarts);

  // Claims the restart into `next_generation`. Returns the restarts used
  // including this one, or nullopt when the budget is spent (then no launcher
  // of the job restarts into `next_generation`).
  std::optional<int> claim(int next_generation);
  // Restarts claimed so far.
  int used();
  int max() const { return max_restarts_; }

  // Writes the restart record of `record.generation` unless one exists
  // (first writer wins: every launcher may offer one, the failure's own
  // launcher offers it first). Store errors are logged, not thrown.
  void publish_record(const RestartRecord& record);

 private:
  std::shared_ptr<comm::Store> store_;
  std::string run_id_;
  int max_restarts_;
};

// "restart budget exhausted (2 of 2 restarts used); giving up"
std::string budget_exhausted_text(int max_restarts);

}  // namespace gradmesh::elastic
