// The image's package lists (deploy/Containerfile), checked without building
// the image: its build stage installs every build package the machine setup
// (scripts/install-deps.sh) names, so the image compiles what `make` does;
// its runtime stage installs the package of every shared library this
// binary names, so what it compiled starts. Skipped, saying why, where dpkg
// or objdump are missing (not a Debian machine).
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_command.h"

namespace gradmesh::testing {
namespace {

const std::string kSource = GRADMESH_SOURCE_DIR;

// The packages of the first `apt-get install` after `stage_marker`.
std::set<std::string> apt_installs(const std::string& containerfile, const std::string& stage_marker) {
  const size_t stage = containerfile.find(stage_marker);
  if (stage == std::string::npos) return {};
  const std::string flag = "--no-install-recommends";
  const size_t from = containerfile.find(flag, stage);
  if (from == std::string::npos) return {};
  const size_t to = containerfile.find("&&", from);
  std::istringstream words(containerfile.substr(from + flag.size(), to - from - flag.size()));
  std::set<std::string> out;
  for (std::string w; words >> w;)
    if (w != "\\") out.insert(w);
  return out;
}

// install-deps.sh's first `packages=(...)` list, comments dropped.
std::vector<std::string> setup_packages(const std::string& script) {
  const size_t from = script.find("packages=(");
  const size_t to = script.find("\n)", from);
  std::vector<std::string> out;
  std::istringstream lines(script.substr(from + 10, to - from - 10));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line.substr(0, line.find('#')));
    for (std::string w; words >> w;) out.push_back(w);
  }
  return out;
}

// The package holding the host's copy of `lib`: under the multiarch
// directory (or below it: OpenBLAS's variants), else in /usr/lib itself
// (Gloo); never another architecture's (/lib32, i386).
std::string owning_package(const std::string& lib, const std::string& multiarch) {
  const CommandResult r = run_shell("dpkg -S '*/" + lib + "' 2>/dev/null", "/tmp");
  std::istringstream lines(r.out);
  std::string fallback;
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':'), path = line.find(": /");
    if (colon == std::string::npos || path == std::string::npos) continue;
    const std::string package = line.substr(0, colon), file = line.substr(path + 2);
    if (file.find("/" + multiarch + "/") != std::string::npos) return package;
    if (file == "/usr/lib/" + lib || file == "/lib/" + lib) fallback = package;
  }
  return fallback;
}

TEST(ContainerImage, TheBuildStageInstallsEveryBuildPackageOfTheSetup) {
  const std::string containerfile = read_file(kSource + "/deploy/Containerfile");
  const std::set<std::string> build = apt_installs(containerfile, "AS build");
  ASSERT_FALSE(build.empty()) << "no apt-get install in the build stage";
  const std::vector<std::string> setup = setup_packages(read_file(kSource + "/scripts/install-deps.sh"));
  ASSERT_GT(setup.size(), 10u);
  const std::set<std::string> tests_only = {"libgtest-dev", "libgmock-dev"};
  const std::set<std::string> tools = {"cmake", "ninja-build", "g++", "make", "pkg-config"};
  for (const std::string& p : setup) {
    const bool needed = tools.count(p) || (p.size() > 4 && p.ends_with("-dev") && !tests_only.count(p));
    if (!needed) continue;
    EXPECT_TRUE(build.count(p)) << "scripts/install-deps.sh builds with " << p << "; the image's build stage lacks it";
  }
}

TEST(ContainerImage, TheRuntimeStageInstallsThePackageOfEveryLibraryTheBinaryNames) {
  const CommandResult tools = run_shell("command -v dpkg && command -v objdump && gcc -print-multiarch", "/tmp");
  if (tools.exit_code != 0) GTEST_SKIP() << "skipped: dpkg, objdump or gcc is missing (not a Debian machine)";
  std::string multiarch = tools.out.substr(0, tools.out.find_last_not_of('\n') + 1);
  multiarch = multiarch.substr(multiarch.rfind('\n') + 1);  // the last line: x86_64-linux-gnu
  const std::set<std::string> runtime = apt_installs(read_file(kSource + "/deploy/Containerfile"), "AS runtime");
  ASSERT_FALSE(runtime.empty()) << "no apt-get install in the runtime stage";
  // In debian:*-slim already.
  const std::set<std::string> base = {"libc6", "libstdc++6", "libgcc-s1"};
  const CommandResult needed = run_shell("objdump -p '" GRADMESH_BINARY "' | awk '/NEEDED/ {print $2}'", "/tmp");
  ASSERT_EQ(needed.exit_code, 0) << needed.err;
  std::istringstream libs(needed.out);
  int checked = 0;
  for (std::string lib; std::getline(libs, lib); ++checked) {
    const std::string package = owning_package(lib, multiarch);
    ASSERT_FALSE(package.empty()) << "no package holds " << lib;
    EXPECT_TRUE(runtime.count(package) || base.count(package))
        << "the binary needs " << lib << " (package " << package << "); the image's runtime stage does not install it";
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace gradmesh::testing
