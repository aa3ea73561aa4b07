// Training progress for a person watching: a redrawn bar on a terminal,
// plain periodic lines otherwise (logs, CI), or nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gradmesh::obs {

enum class ProgressMode { kBar, kLines, kOff };

// GRADMESH_PROGRESS=auto|bar|lines|off; auto picks a bar when `stream` is a terminal.
ProgressMode progress_mode_from_env(std::FILE* stream);

struct ProgressState {
  int64_t epoch = 0, epochs = 1;      // epoch is 0-based
  int64_t step = 0, steps = 0;        // step within the epoch (done so far), steps per epoch
  double loss = 0;
  double samples_per_s = 0;
  double eta_s = 0;                   // seconds left in the whole run
};

class Progress {
 public:
  Progress(ProgressMode mode, std::FILE* stream, int64_t line_every);
  // Redraws the bar (throttled to ~10 per second) or prints a line every `line_every` steps.
  void update(const ProgressState& state);
  // Ends the bar's line so the next output starts on a fresh one.
  void finish();
  // Prints a line of its own, keeping the bar intact below it.
  void message(const std::string& line);
  // What a user must see whatever GRADMESH_PROGRESS says: a warning goes to
  // the logger (WARN), another notice to the progress output, or to the
  // logger (INFO) when progress is off.
  void notice(const std::string& line, bool warning);

 private:
  std::string render(const ProgressState& s) const;
  ProgressMode mode_;
  std::FILE* stream_;
  int64_t line_every_;
  double last_draw_ = 0;
  bool bar_open_ = false;
};

std::string format_duration(double seconds);  // "1:05", "1:02:03"

}  // namespace gradmesh::obs
