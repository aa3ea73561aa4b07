#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "support/scoped_env.h"

namespace gradmesh {
namespace {

TEST(Env, DocsListEveryVariable) {
  std::ifstream in(GRADMESH_SOURCE_DIR "/docs/env.md");
  ASSERT_TRUE(in) << "docs/env.md missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(env_markdown()), std::string::npos)
      << "docs/env.md is out of date: regenerate the table with `gradmesh docs env`";
}

TEST(Env, DefaultsAndFlags) {
  unsetenv("GRADMESH_ALLOC_CACHE");
  EXPECT_EQ(env_string("GRADMESH_ALLOC_CACHE"), "1");
  setenv("GRADMESH_ALLOC_CACHE", "off", 1);
  EXPECT_FALSE(env_flag("GRADMESH_ALLOC_CACHE", true));
  setenv("GRADMESH_ALLOC_CACHE", "maybe", 1);
  EXPECT_THROW(env_flag("GRADMESH_ALLOC_CACHE", true), Error);
  unsetenv("GRADMESH_ALLOC_CACHE");
  EXPECT_THROW(env_string("GRADMESH_NOT_DECLARED"), Error);
}

using ::gradmesh::testing::ScopedEnv;

TEST(Env, CommTimeoutIsSecondsWithFractions) {
  {
    ScopedEnv unset("GRADMESH_COMM_TIMEOUT", nullptr);
    EXPECT_EQ(env_comm_timeout(), std::chrono::milliseconds(300'000));
  }
  for (const auto& [text, ms] : {std::pair<const char*, int64_t>{"1.5", 1500}, {"300", 300'000}, {"0.001", 1},
                                 {"604800", int64_t{604'800'000}}, {"2e1", 20'000}}) {
    ScopedEnv set("GRADMESH_COMM_TIMEOUT", text);
    EXPECT_EQ(env_comm_timeout().count(), ms) << text;
  }
}

TEST(Env, CommTimeoutRefusesWhatIsNotAFiniteBoundedNumber) {
  for (const char* bad : {"inf", "nan", "1e300", "", "10s", "0", "-1", "0.0001", "604801", " 5", "0x10"}) {
    ScopedEnv set("GRADMESH_COMM_TIMEOUT", bad);
    try {
      env_comm_timeout();
      ADD_FAILURE() << "GRADMESH_COMM_TIMEOUT='" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      EXPECT_EQ(std::string(e.what()),
                "environment variable GRADMESH_COMM_TIMEOUT: expected a finite number in [0.001, 604800], got '" +
                    std::string(bad) + "'");
    }
  }
}

TEST(Env, IntegersNameTheVariable) {
  {
    ScopedEnv unset("LOCAL_WORLD_SIZE", nullptr);
    EXPECT_EQ(env_int("LOCAL_WORLD_SIZE", 1, 100), std::nullopt);
  }
  {
    ScopedEnv empty("LOCAL_WORLD_SIZE", "");
    EXPECT_EQ(env_int("LOCAL_WORLD_SIZE", 1, 100), std::nullopt);
  }
  {
    ScopedEnv set("LOCAL_WORLD_SIZE", "4");
    EXPECT_EQ(env_int("LOCAL_WORLD_SIZE", 1, 100), 4);
  }
  ScopedEnv zero("LOCAL_WORLD_SIZE", "0");
  try {
    env_int("LOCAL_WORLD_SIZE", 1, 100);
    FAIL() << "LOCAL_WORLD_SIZE=0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_STREQ(e.what(), "environment variable LOCAL_WORLD_SIZE: expected a decimal integer in [1, 100], got '0'");
  }
  EXPECT_THROW(env_int("GRADMESH_NOT_DECLARED", 0, 1), Error);
}

}  // namespace
}  // namespace gradmesh
