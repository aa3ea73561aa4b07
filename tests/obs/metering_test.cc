// The cost model's arithmetic, checkable by hand, and how amounts are shown.
#include <gtest/gtest.h>

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

TEST(Metering, AmountsKeepThreeSignificantDigitsWithoutExponentsDownToAMillionth) {
  EXPECT_EQ(money_text(0, "USD"), "0 USD");
  EXPECT_EQ(money_text(0.0000401, "USD"), "0.0000401 USD");
  EXPECT_EQ(money_text(0.00123, "EUR"), "0.00123 EUR");
  EXPECT_EQ(money_text(1.5, "USD"), "1.50 USD");
  EXPECT_EQ(money_text(1234.567, "USD"), "1234.57 USD");
  EXPECT_EQ(money_text(5.5e-11, "USD"), "5.50e-11 USD");
}

}  // namespace
}  // namespace gradmesh::obs
