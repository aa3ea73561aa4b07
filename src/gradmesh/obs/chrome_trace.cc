#include "gradmesh/obs/chrome_trace.h"

#include <algorithm>
#include <cstdio>

#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/core/atomic_file.h"

namespace gradmesh::obs {

ChromeTrace::ChromeTrace(int rank, double origin_s) : rank_(rank), origin_s_(origin_s) {}

int ChromeTrace::track_id(const std::string& track) {
  auto it = std::find(tracks_.begin(), tracks_.end(), track);
  if (it != tracks_.end()) return static_cast<int>(it - tracks_.begin());
  tracks_.push_back(track);
  return static_cast<int>(tracks_.size() - 1);
}

void ChromeTrace::span(const std::string& track, const std::string& name, double start_s, double end_s,
                       const std::string& args) {
  const int tid = track_id(track);
  char times[96];
  // Microseconds, as the format wants; fractional digits keep sub-us spans visible.
  std::snprintf(times, sizeof times, "\"ts\":%.3f,\"dur\":%.3f", (start_s - origin_s_) * 1e6,
                std::max(0.0, end_s - start_s) * 1e6);
  events_.push_back("{\"name\":\"" + json_escape(name) + "\",\"ph\":\"X\",\"pid\":" + std::to_string(rank_) +
                    ",\"tid\":" + std::to_string(tid) + "," + times + (args.empty() ? "" : ",\"args\":{" + args + "}") +
                    "}");
}

void ChromeTrace::write(const std::string& path) const {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  // Metadata events name the process and its tracks in the viewer.
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
         ",\"args\":{\"name\":\"rank " + std::to_string(rank_) + "\"}}";
  for (size_t t = 0; t < tracks_.size(); ++t)
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) + ",\"tid\":" +
           std::to_string(t) + ",\"args\":{\"name\":\"" + json_escape(tracks_[t]) + "\"}}";
  for (const std::string& e : events_) out += ",\n" + e;
  out += "\n]}\n";
  write_file_atomically(path, out);
}

}  // namespace gradmesh::obs
