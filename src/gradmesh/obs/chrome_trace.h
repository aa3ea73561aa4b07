// A timeline in the Chrome trace event format ("X" complete events), which
// Perfetto (ui.perfetto.dev) and chrome://tracing open as they are.
//
// Each rank writes its own file; the process id is the rank and each track a
// thread id ("compute", "comm"), so several ranks' files can be loaded
// together and line up on the shared clock (now_seconds, relative to `origin`).
#pragma once

#include <string>
#include <vector>

#include "gradmesh/obs/json_object.h"

namespace gradmesh::obs {

class ChromeTrace {
 public:
  ChromeTrace(int rank, double origin_s);
  // A span on `track` ("compute" or "comm"; new names get new rows), times on
  // the now_seconds() clock; `args` shows in the viewer's details pane.
  void span(const std::string& track, const std::string& name, double start_s, double end_s,
            const JsonObject& args = {});
  size_t size() const { return events_.size(); }
  // Writes {"traceEvents": [...]} atomically (write_file_atomically);
  // Error(kIo) naming the path.
  void write(const std::string& path) const;

 private:
  struct Span {
    std::string name;
    int track;
    double start_us, duration_us;
    JsonObject args;
  };
  int track_id(const std::string& track);
  int rank_;
  double origin_s_;
  std::vector<std::string> tracks_;
  std::vector<Span> events_;
};

}  // namespace gradmesh::obs
