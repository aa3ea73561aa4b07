#include "gradmesh/obs/progress.h"

#include <unistd.h>

#include <cmath>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"

namespace gradmesh::obs {

ProgressMode progress_mode_from_env(std::FILE* stream) {
  const std::string value = env_string("GRADMESH_PROGRESS");
  if (value == "bar") return ProgressMode::kBar;
  if (value == "lines") return ProgressMode::kLines;
  if (value == "off") return ProgressMode::kOff;
  if (value != "auto")
    throw_error(ErrorKind::kUsage, "GRADMESH_PROGRESS", "expected auto, bar, lines or off, got '" + value + "'");
  return isatty(fileno(stream)) ? ProgressMode::kBar : ProgressMode::kLines;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                  static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(total / 60), static_cast<long long>(total % 60));
  return buf;
}

Progress::Progress(ProgressMode mode, std::FILE* stream, int64_t line_every)
    : mode_(mode), stream_(stream), line_every_(line_every < 1 ? 1 : line_every) {}

std::string Progress::render(const ProgressState& s) const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s ETA %s",
                static_cast<long long>(s.epoch + 1), static_cast<long long>(s.epochs), static_cast<long long>(s.step),
                static_cast<long long>(s.steps), s.loss, s.samples_per_s, format_duration(s.eta_s).c_str());
  return buf;
}

void Progress::update(const ProgressState& s) {
  if (mode_ == ProgressMode::kOff) return;
  if (mode_ == ProgressMode::kLines) {
    if (s.step % line_every_ == 0 || s.step == s.steps) std::fprintf(stream_, "%s\n", render(s).c_str());
    return;
  }
  const double now = now_seconds();
  if (now - last_draw_ < 0.1 && s.step != s.steps) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  const int filled = s.steps > 0 ? static_cast<int>(kWidth * s.step / s.steps) : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stream_, "\r\033[K[%s] %s", bar.c_str(), render(s).c_str());
  std::fflush(stream_);
  bar_open_ = true;
}

void Progress::finish() {
  if (bar_open_) std::fprintf(stream_, "\n");
  bar_open_ = false;
}

void Progress::message(const std::string& line) {
  if (mode_ == ProgressMode::kOff) return;
  if (bar_open_) std::fprintf(stream_, "\r\033[K");
  std::fprintf(stream_, "%s\n", line.c_str());
  bar_open_ = false;
  last_draw_ = 0;
}

void Progress::notice(const std::string& line, bool warning) {
  if (!warning && mode_ != ProgressMode::kOff) return message(line);
  if (bar_open_) std::fprintf(stream_, "\r\033[K");  // the log line starts on a clean line
  bar_open_ = false;
  last_draw_ = 0;
  if (warning) return log_warn(line.rfind("warning: ", 0) == 0 ? line.substr(9) : line);
  log_info(line);
}

}  // namespace gradmesh::obs
