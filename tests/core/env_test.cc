#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"

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

}  // namespace
}  // namespace gradmesh
