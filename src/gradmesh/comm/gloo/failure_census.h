// Failure census: which ranks reached a collective that failed.
//
// Gloo reports "timed out" or "connection closed", not who was missing. So
// after a collective fails, each rank records in the store the operation it
// failed in ("census/<rank>" = "<seq> timeout|failed"), then looks for the
// others' records for a short grace period. Ranks that reached the
// collective fail within milliseconds of each other (the first failure shuts
// its connections down, which fails every peer still waiting in Gloo), so
// the ranks with no record are the ones that never arrived: stuck earlier,
// hung, or dead.
//
// The records carry the sequence number because survivors need not fail in
// the same operation: in a ring, one rank can finish all-reduce #6 and start
// #7 while its neighbour still waits for #6's last piece. When a peer dies
// then, one survivor fails in #7 and the other in #6. The one in #6 counts the
// other as arrived (it went past #6); the one in #7 reports that it failed
// earlier, in #6, rather than as missing, so only the dead rank is missing.
//
// A group fails at most once (it is broken afterwards), so one record per rank
// is enough. Costs nothing on the success path: the store is touched only
// after a failure. A store that fails during the census yields
// `available = false`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm::gloo_backend {

struct FailedEarlier {
  int rank = 0;
  int64_t seq = 0;  // the earlier operation it failed in
};

struct CensusResult {
  bool available = false;              // false: the store failed; nothing is known
  std::vector<int> reached;            // ranks that reached the collective (failed in it or later), this one included
  std::vector<FailedEarlier> earlier;  // ranks that failed in an earlier operation, before reaching this one
  std::vector<int> missing;            // ranks with no record after the grace period
  bool any_timed_out = false;          // some rank that reached it saw a timeout (not only closed connections)
};

// The grace period for a collective with `timeout`: long enough for every
// participant's record to land, short next to the timeout.
Millis census_grace(Millis timeout);

CensusResult take_failure_census(Store& store, int64_t seq, int rank, int size, bool timed_out, Millis grace);

// "census/<rank>" holds "<seq> timeout" or "<seq> failed"; exposed for tests.
// Returns false for any other text (a record written by something else).
bool parse_census_record(const std::string& text, int64_t* seq, bool* timed_out);

}  // namespace gradmesh::comm::gloo_backend
