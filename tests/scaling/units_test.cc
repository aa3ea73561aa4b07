#include "gradmesh/scaling/units.h"

#include <gtest/gtest.h>

#include "gradmesh/core/error.h"

namespace gradmesh::scaling {
namespace {

TEST(Units, RatesAndLatenciesInTcsSpelling) {
  EXPECT_DOUBLE_EQ(parse_rate("10gbit", "--bandwidth"), 10e9);
  EXPECT_DOUBLE_EQ(parse_rate("200mbit", "--bandwidth"), 200e6);
  EXPECT_DOUBLE_EQ(parse_rate("1.5gbit", "--bandwidth"), 1.5e9);
  EXPECT_DOUBLE_EQ(parse_rate("800kbit", "--bandwidth"), 800e3);
  EXPECT_DOUBLE_EQ(parse_rate("1000bit", "--bandwidth"), 1000);
  EXPECT_DOUBLE_EQ(parse_latency("50us", "--latency"), 50e-6);
  EXPECT_DOUBLE_EQ(parse_latency("0.2ms", "--latency"), 0.2e-3);
  EXPECT_DOUBLE_EQ(parse_latency("1s", "--latency"), 1.0);
  EXPECT_DOUBLE_EQ(parse_latency("0us", "--latency"), 0.0);
}

TEST(Units, AnythingElseIsRefusedNamingTheFlag) {
  for (const char* bad : {"", "10", "gbit", "10 gbit", "10gb", "-1gbit", "0mbit", "1e30gbit", "nangbit"}) {
    try {
      parse_rate(bad, "--bandwidth");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--bandwidth"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"", "50", "us", "5 ms", "-1ms", "61s", "1h"})
    EXPECT_THROW(parse_latency(bad, "--latency"), Error) << "'" << bad << "'";
}

}  // namespace
}  // namespace gradmesh::scaling
