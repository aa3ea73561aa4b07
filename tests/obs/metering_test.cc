// The cost model's arithmetic, checkable by hand, and how amounts are shown.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "gradmesh/obs/metering.h"

namespace gradmesh::obs {
namespace {

TEST(Metering, CostIsUsageTimesPriceInTheDocumentedUnits) {
  Prices p;
  p.core_hour = 0.04, p.storage_gb_month = 0.02, p.egress_gb = 0.01;
  Consumption used;
  used.cpu_seconds = 7200;                                  // 2 core-hours
  used.storage_gb_seconds = 3 * kSecondsPerBillingMonth;    // 3 GB for a 730-hour month
  used.inter_host_bytes = 5e9;                              // 5 GB
  const Cost c = cost_of(used, p);
  EXPECT_DOUBLE_EQ(c.compute, 0.08);
  EXPECT_DOUBLE_EQ(c.storage, 0.06);
  EXPECT_DOUBLE_EQ(c.egress, 0.05);
  EXPECT_DOUBLE_EQ(c.total(), 0.19);
  EXPECT_EQ(cost_of(Consumption{}, p).total(), 0.0);
}

// The cases charts.js is held to as well (charts_test.js), so a report
// written here and a page drawn in the browser read the same.
TEST(Metering, MoneyAndBytesReadAsThePagesShowThem) {
  std::ifstream in(GRADMESH_SOURCE_DIR "/tests/obs/formatting_cases.json");
  ASSERT_TRUE(in);
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases["money"].size(), 10u);
  for (const auto& c : cases["money"]) EXPECT_EQ(money_text(c[0], c[1]), c[2]) << c.dump();
  for (const auto& c : cases["bytes"]) EXPECT_EQ(bytes_text(c[0], c[1]), c[2]) << c.dump();
  EXPECT_EQ(price_text(0.0425, "USD"), "$0.0425");
  EXPECT_EQ(price_text(0.02, "CHF"), "0.02 CHF");
  EXPECT_EQ(money_text(std::nan(""), "USD"), "\u2014");
}

}  // namespace
}  // namespace gradmesh::obs
