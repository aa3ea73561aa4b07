#include "gradmesh/cli/report_command.h"

#include <cstdio>
#include <filesystem>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/error.h"
#include "gradmesh/obs/run_log.h"
#include "gradmesh/obs/run_report_page.h"

namespace gradmesh::cli {
namespace {

namespace fs = std::filesystem;

// The metrics file a command-line path names: the file itself, or a run
// directory's metrics.jsonl. A path that is neither is a usage error.
std::string metrics_file_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (!fs::is_directory(path, ec))
    throw_error(ErrorKind::kUsage, path, "no such run directory (expected a directory holding metrics.jsonl)");
  const std::string file = (fs::path(path) / "metrics.jsonl").string();
  if (!fs::is_regular_file(file, ec))
    throw_error(ErrorKind::kUsage, path, "has no metrics.jsonl: not a gradmesh run directory");
  return file;
}

std::string run_directory_of(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
}

std::string label_of(const std::string& path) {
  const fs::path p = fs::path(run_directory_of(path)).lexically_normal();
  return p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
}

}  // namespace

int run_report(const ReportArgs& args) {
  if (args.runs.empty() || args.runs.size() > 2)
    throw_error(ErrorKind::kUsage, "report", "expected one run directory (regenerate its report) or two (compare them)");
  if (args.runs.size() == 1) {
    const obs::RunLog log = obs::read_run_log(metrics_file_of(args.runs[0]));
    std::string output = args.output;
    if (output.empty()) {
      const std::string dir = run_directory_of(args.runs[0]);
      output = ((dir.empty() ? fs::path(".") : fs::path(dir)) / "report.html").string();
    }
    write_file_atomically(output, obs::render_report_html(obs::report_content(log)));
    std::printf("report: %s (%zu log intervals, %zu epochs, %zu events%s)\n", output.c_str(), log.steps.size(),
                log.epochs.size(), log.events.size(), log.cut_off_lines > 0 ? "; cut-off lines left out" : "");
    return 0;
  }
  const obs::RunLog a = obs::read_run_log(metrics_file_of(args.runs[0]));
  const obs::RunLog b = obs::read_run_log(metrics_file_of(args.runs[1]));
  const std::string output = args.output.empty() ? "compare.html" : args.output;
  write_file_atomically(output, obs::render_report_html(obs::comparison_content(a, label_of(args.runs[0]), b,
                                                                                  label_of(args.runs[1]))));
  std::printf("comparison: %s (A = %s, B = %s)\n", output.c_str(), args.runs[0].c_str(), args.runs[1].c_str());
  return 0;
}

}  // namespace gradmesh::cli
