#include "gradmesh/comm/gloo/failure_census.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::comm::gloo_backend {
namespace {

std::string census_key(int rank) { return "census/" + std::to_string(rank); }

constexpr std::string_view kTimedOut = "timeout";
constexpr std::string_view kFailed = "failed";

struct Record {
  int64_t seq = 0;
  bool timed_out = false;
};

}  // namespace

bool parse_census_record(const std::string& text, int64_t* seq, bool* timed_out) {
  const size_t space = text.find(' ');
  if (space == std::string::npos || space == 0) return false;
  const std::optional<int64_t> value = try_parse_int(std::string_view(text).substr(0, space), 0);
  if (!value) return false;
  const std::string_view kind = std::string_view(text).substr(space + 1);
  if (kind != kTimedOut && kind != kFailed) return false;
  *seq = *value;
  *timed_out = kind == kTimedOut;
  return true;
}

// At least 500 ms: a survivor that is descheduled (a loaded machine) must
// still record its arrival before the others stop looking, or it is named as
// missing. The wait ends early once every rank has a record.
Millis census_grace(Millis timeout) { return std::clamp(timeout / 10, Millis{500}, Millis{1000}); }

CensusResult take_failure_census(Store& store, int64_t seq, int rank, int size, bool timed_out, Millis grace) {
  CensusResult result;
  try {
    store.set(census_key(rank), std::to_string(seq) + " " + std::string(timed_out ? kTimedOut : kFailed));
    std::vector<std::optional<Record>> records(static_cast<size_t>(size));
    records[static_cast<size_t>(rank)] = Record{seq, timed_out};
    poll_until(grace, [&] {
      bool all = true;
      for (int r = 0; r < size; ++r) {
        auto& record = records[static_cast<size_t>(r)];
        if (!record && store.check({census_key(r)})) {
          Record parsed;
          // A record that does not parse counts as none: the census only sharpens the message.
          if (parse_census_record(store.get(census_key(r), grace), &parsed.seq, &parsed.timed_out)) record = parsed;
        }
        all = all && record.has_value();
      }
      return all;
    });
    result.any_timed_out = timed_out;
    for (int r = 0; r < size; ++r) {
      const auto& record = records[static_cast<size_t>(r)];
      if (!record) {
        result.missing.push_back(r);
      } else if (record->seq < seq) {
        result.earlier.push_back({r, record->seq});
      } else {
        result.reached.push_back(r);
        // A later failure says nothing about how this operation ended.
        if (record->seq == seq) result.any_timed_out = result.any_timed_out || record->timed_out;
      }
    }
    result.available = true;
  } catch (const std::exception&) {
    // The census only sharpens the message; the collective's own error stands.
    result = CensusResult{};
  }
  return result;
}

}  // namespace gradmesh::comm::gloo_backend
