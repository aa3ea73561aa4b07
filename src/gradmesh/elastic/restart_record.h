// The worker side of restarts: what a restarted (or replacement) worker can
// learn about the failure that caused its generation, and the store keys
// through which workers and launchers agree on recovery.
//
// Keys, all under the run id (GRADMESH_RUN_ID):
//   <run_id>/restart/<g>   JSON restart record of generation g (g >= 1), written
//                          by the launchers before any worker of g starts
//   <run_id>/generation    the newest generation, written when a generation's
//                          rendezvous closes and on every in-process replacement
//   <run_id>/recovery      "in-process" once a worker announced that it re-forms
//                          its group itself after a peer was replaced
// docs/launch.md describes the whole protocol.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::elastic {

struct RestartRecord {
  int generation = 0;           // the generation this record starts
  int failed_rank = -1;         // -1 when no single rank failed (a lost node, a hang of several)
  std::string cause;            // one line, e.g. "rank 1 (pid 4242) was killed by signal 9 (SIGKILL)"
  int exit_code = 1;            // as the launcher would exit with it
  int64_t failure_unix_ms = 0;  // wall clock when the launcher saw the failure
  int64_t last_step = -1;       // highest step any worker reported through its heartbeat; -1 = none
  int failed_node = -1;         // the node whose launcher or worker failed; -1 = none or unknown (the store)
};

std::string restart_record_key(const std::string& run_id, int generation);
std::string restart_record_json(const RestartRecord& record);
// Error(kFormat) naming `key` when `text` is not a record (bad JSON, missing or mistyped field).
RestartRecord parse_restart_record(const std::string& text, const std::string& key);

// The record that started `generation`; nullopt for generation 0 or when no
// record was written. A malformed record is Error(kFormat) naming the key.
std::optional<RestartRecord> read_restart_record(comm::Store& store, const std::string& run_id, int generation);

// Announces that this job's workers recover in place (elastic.recovery =
// "in-process"): from now on the launcher replaces a failed worker alone.
void announce_in_process_recovery(comm::Store& store, const std::string& run_id);
bool in_process_recovery_announced(comm::Store& store, const std::string& run_id);

// The newest generation of the run (<run_id>/generation), or the launch
// generation GRADMESH_GENERATION when the key is absent. Survivors poll it to
// notice that a replacement joined under a new generation.
int read_current_generation(comm::Store& store, const std::string& run_id);

// After a node was lost with in-process recovery on: "<run_id>/<g>/ranks" =
// the ranks of generation g-1 that go on, in order ("0,1,3"); a survivor's
// rank in generation g is its position in that list. Written before
// <run_id>/generation moves to g. nullopt when generation g kept the world.
void write_surviving_ranks(comm::Store& store, const std::string& run_id, int generation, const std::vector<int>& ranks);
std::optional<std::vector<int>> read_surviving_ranks(comm::Store& store, const std::string& run_id, int generation);
void write_current_generation(comm::Store& store, const std::string& run_id, int generation);

}  // namespace gradmesh::elastic
