// The dashboard in a real browser (tests/cli/dashboard_browser.py): headless
// Chromium through Debian's python3-selenium and chromium-driver. Skipped,
// visibly, where they are not installed; CI installs them. The screenshot
// is left in the build tree as dashboard-screenshot.png.
#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace gradmesh::testing
