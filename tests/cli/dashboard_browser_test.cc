// The dashboard in a real browser (tests/cli/dashboard_browser.py): headless
// Chromium through Debian's python3-selenium and chromium-driver. Skipped,
// visibly, where they are not installed; CI installs them. The screenshot
// is left in the build tree as dashboard-screenshot.png.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>

#include "cli/run_command.h"
#include "support/temp_dir.h"

namespace gradmesh::testing {
namespace {

TEST(DashboardBrowser, ChartsRenderAndTheStepAdvancesDuringARun) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "Debian's python3 is not installed";
  TempDir dir;
  const std::string screenshot = (std::filesystem::current_path() / "dashboard-screenshot.png").string();
  const CommandResult r = run_shell("/usr/bin/python3 '" GRADMESH_SOURCE_DIR "/tests/cli/dashboard_browser.py' '"
                                    GRADMESH_BINARY "' '" GRADMESH_SOURCE_DIR "' '" + dir.path() + "' '" + screenshot + "'",
                                    dir.path());
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << read_text(dir.path() + "/launch.err");
  EXPECT_TRUE(std::filesystem::exists(screenshot));
}

// The page at a world size no test here can train: 256 ranks in 32 rows of
// 8, the slow rank's group darkest (the page's own logic, fed by a small
// event server in the script). Screenshot: dashboard-wide-screenshot.png.
TEST(DashboardBrowser, TwoHundredFiftySixRanksAreGroupedAndTheStragglerStandsOut) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "Debian's python3 is not installed";
  TempDir dir;
  const std::string screenshot = (std::filesystem::current_path() / "dashboard-wide-screenshot.png").string();
  const CommandResult r = run_shell("/usr/bin/python3 '" GRADMESH_SOURCE_DIR "/tests/cli/dashboard_browser.py' --wide '"
                                    GRADMESH_SOURCE_DIR "' '" + screenshot + "'",
                                    dir.path());
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// Two real runs' comparison page (and one run's report) in the browser:
// each key in its series' colour under the page's own stylesheet, and above
// the data. Screenshots: compare-screenshot.png, report-screenshot.png.
TEST(DashboardBrowser, ReportKeysAreDrawnInTheirSeriesColoursAboveTheData) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "Debian's python3 is not installed";
  TempDir dir;
  for (const char* run : {"a", "b"}) {
    const CommandResult r = run_gradmesh(std::string("train " GRADMESH_SOURCE_DIR "/examples/mlp.toml --set output.dir=runs "
                                                     "--set output.run_id=") + run +
                                             " --set train.threads=1 --set data.limit_train=3200 --set data.limit_test=200 "
                                             "--set train.log_every=5 --set output.trace_steps=0" +
                                             (run[0] == 'b' ? " --set train.epochs=2" : ""),
                                         dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ASSERT_EQ(run_gradmesh("report runs/a runs/b -o compare.html", dir.path()).exit_code, 0);
  for (const auto& [page, shot] : {std::pair{dir.file("compare.html"), "compare-screenshot.png"},
                                   std::pair{dir.file("runs/b/report.html"), "report-screenshot.png"}}) {
    const std::string screenshot = (std::filesystem::current_path() / shot).string();
    const CommandResult r = run_shell("/usr/bin/python3 '" GRADMESH_SOURCE_DIR "/tests/cli/dashboard_browser.py' --keys '" +
                                          page + "' '" + screenshot + "'",
                                      dir.path());
    if (r.exit_code == 77) GTEST_SKIP() << r.out;
    EXPECT_EQ(r.exit_code, 0) << page << "\n" << r.out << r.err;
  }
}

}  // namespace
}  // namespace gradmesh::testing
