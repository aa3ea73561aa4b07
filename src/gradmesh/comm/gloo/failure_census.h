// Failure census: which ranks reached a collective that failed.
//
// Gloo reports "timed out" or "connection closed", not who was missing. So
// after a collective fails, each rank that reached it records that in the
// store ("census/<seq>/<rank>"), then looks for the others' records for a
// short grace period. Ranks that reached the collective fail within
// milliseconds of each other (the first failure shuts its connections down,
// which fails every peer still waiting in Gloo), so the ranks with no record
// are the ones that never arrived: stuck earlier, hung, or dead.
//
// Costs nothing on the success path: the store is touched only after a
// failure. A store that fails during the census yields `available = false`.
#pragma once

#include <cstdint>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm::gloo_backend {

struct CensusResult {
  bool available = false;      // false: the store failed; nothing is known
  std::vector<int> reached;    // ranks that recorded reaching the collective (including this one)
  std::vector<int> missing;    // ranks with no record after the grace period
  bool any_timed_out = false;  // some rank that reached it saw a timeout (not only closed connections)
};

// The grace period for a collective with `timeout`: long enough for every
// participant's record to land, short next to the timeout.
Millis census_grace(Millis timeout);

CensusResult take_failure_census(Store& store, int64_t seq, int rank, int size, bool timed_out, Millis grace);

}  // namespace gradmesh::comm::gloo_backend
