#include "gradmesh/obs/chrome_trace.h"

#include <algorithm>
#include <cmath>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/obs/json_dump.h"

namespace gradmesh::obs {
namespace {

// Microseconds to the nanosecond: keeps sub-us spans visible without
// printing float noise ("1000.0000000000227").
double to_ns_precision(double us) { return std::round(us * 1e3) / 1e3; }

}  // namespace

ChromeTrace::ChromeTrace(int rank, double origin_s) : rank_(rank), origin_s_(origin_s) {}

int ChromeTrace::track_id(const std::string& track) {
  auto it = std::find(tracks_.begin(), tracks_.end(), track);
  if (it != tracks_.end()) return static_cast<int>(it - tracks_.begin());
  tracks_.push_back(track);
  return static_cast<int>(tracks_.size() - 1);
}

void ChromeTrace::span(const std::string& track, const std::string& name, double start_s, double end_s,
                       const JsonObject& args) {
  // Microseconds, as the format wants.
  events_.push_back({name, track_id(track), (start_s - origin_s_) * 1e6, std::max(0.0, end_s - start_s) * 1e6, args});
}

void ChromeTrace::write(const std::string& path) const {
  Json events = Json::array();
  // Metadata events name the process and its tracks in the viewer.
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (size_t t = 0; t < tracks_.size(); ++t)
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", t}, {"args", {{"name", tracks_[t]}}}});
  for (const Span& span : events_) {
    Json event = {{"name", span.name}, {"ph", "X"}, {"pid", rank_}, {"tid", span.track},
                  {"ts", to_ns_precision(span.start_us)}, {"dur", to_ns_precision(span.duration_us)}};
    if (!span.args.empty()) event["args"] = to_json(span.args);
    events.push_back(std::move(event));
  }
  const Json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(events)}};
  const std::string out = dump_json(trace) + "\n";
  write_file_atomically(path, out);
}

}  // namespace gradmesh::obs
