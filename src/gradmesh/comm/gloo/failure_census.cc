#include "gradmesh/comm/gloo/failure_census.h"

#include <algorithm>
#include <string>

#include "gradmesh/comm/endpoint.h"

namespace gradmesh::comm::gloo_backend {
namespace {

std::string census_key(int64_t seq, int rank) { return "census/" + std::to_string(seq) + "/" + std::to_string(rank); }

constexpr const char* kTimedOut = "timeout";
constexpr const char* kFailed = "failed";

}  // namespace

Millis census_grace(Millis timeout) { return std::clamp(timeout / 10, Millis{100}, Millis{1000}); }

CensusResult take_failure_census(Store& store, int64_t seq, int rank, int size, bool timed_out, Millis grace) {
  CensusResult result;
  try {
    store.set(census_key(seq, rank), timed_out ? kTimedOut : kFailed);
    std::vector<bool> seen(static_cast<size_t>(size), false);
    seen[static_cast<size_t>(rank)] = true;
    poll_until(grace, [&] {
      bool all = true;
      for (int r = 0; r < size; ++r) {
        if (!seen[static_cast<size_t>(r)]) seen[static_cast<size_t>(r)] = store.check({census_key(seq, r)});
        all = all && seen[static_cast<size_t>(r)];
      }
      return all;
    });
    result.any_timed_out = timed_out;
    for (int r = 0; r < size; ++r) {
      if (!seen[static_cast<size_t>(r)]) {
        result.missing.push_back(r);
        continue;
      }
      result.reached.push_back(r);
      if (r != rank && !result.any_timed_out) result.any_timed_out = store.get(census_key(seq, r), grace) == kTimedOut;
    }
    result.available = true;
  } catch (const std::exception&) {
    // The census only sharpens the message; the collective's own error stands.
    result = CensusResult{};
  }
  return result;
}

}  // namespace gradmesh::comm::gloo_backend
