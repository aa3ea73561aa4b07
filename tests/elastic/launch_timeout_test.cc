// `gradmesh launch`'s timeouts: GRADMESH_COMM_TIMEOUT by the rule the process
// groups use (core/env.h), and the flags in seconds bounded before they are
// converted to milliseconds.
#include <gtest/gtest.h>

#include "launcher_process.h"
#include "support/scoped_env.h"

namespace gradmesh::testing {
namespace {

struct Outcome {
  int code;
  std::string err;
};

Outcome launch_true(const std::vector<std::string>& flags) {
  TempDir dir;
  std::vector<std::string> args = {"launch"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "true"});
  LauncherProcess launch(args, dir.path(), "l");
  const int code = launch.wait();
  return {code, launch.err()};
}

TEST(LaunchTimeout, CommTimeoutFollowsTheProcessGroupsRule) {
  // Before, launch read the variable as any positive double ("inf" passed),
  // the process groups as an integer ("1.5" failed).
  for (const char* bad : {"inf", "nan", "1e300", "", "10s"}) {
    ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", bad);
    const Outcome o = launch_true({});
    EXPECT_EQ(o.code, 2) << "GRADMESH_COMM_TIMEOUT='" << bad << "'\n" << o.err;
    EXPECT_NE(o.err.find("environment variable GRADMESH_COMM_TIMEOUT: expected a finite number in [0.001, 604800], "
                         "got '" + std::string(bad) + "'"),
              std::string::npos)
        << o.err;
  }
  ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", "1.5");
  const Outcome o = launch_true({});
  EXPECT_EQ(o.code, 0) << o.err;
}

TEST(LaunchTimeout, SecondsFlagsAreBoundedAndNamed) {
  ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", nullptr);
  struct Case {
    std::vector<std::string> flags;
    std::string expected;  // part of stderr
  };
  const std::vector<Case> cases = {
      // 1e300 s used to reach a cast to int64 milliseconds; -5 used to mean "unset".
      {{"--join-timeout", "1e300"}, "--join-timeout: expected a finite number in [0.001, 604800], got '1e300'"},
      {{"--join-timeout=-5"}, "--join-timeout: expected a finite number in [0.001, 604800], got '-5'"},
      {{"--join-timeout", "inf"}, "--join-timeout: expected a finite number"},
      {{"--grace-period", "inf"}, "--grace-period: expected a finite number in [0, 3600], got 'inf'"},
      {{"--grace-period", "1e300"}, "--grace-period: expected a finite number in [0, 3600], got '1e300'"},
  };
  for (const Case& c : cases) {
    const Outcome o = launch_true(c.flags);
    EXPECT_EQ(o.code, 2) << c.flags[0] << "\n" << o.err;
    EXPECT_NE(o.err.find(c.expected), std::string::npos) << o.err;
  }
  EXPECT_EQ(launch_true({"--join-timeout", "0.5", "--grace-period", "0"}).code, 0);
}

}  // namespace
}  // namespace gradmesh::testing
