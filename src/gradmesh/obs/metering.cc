#include "gradmesh/obs/metering.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gradmesh::obs {

Cost cost_of(const Consumption& used, const Prices& prices) {
  Cost c;
  c.compute = used.cpu_seconds / 3600.0 * prices.core_hour;
  c.storage = used.storage_gb_seconds / kSecondsPerBillingMonth * prices.storage_gb_month;
  c.egress = used.inter_host_bytes / 1e9 * prices.egress_gb;
  return c;
}

std::string money_text(double amount, const std::string& currency) {
  // Plain decimals with three significant digits (0.0000401, not 4.01e-05)
  // down to a millionth; below that the exponent is the readable form.
  char text[64];
  const double a = std::abs(amount);
  if (a == 0)
    std::snprintf(text, sizeof text, "0");
  else if (a >= 100)
    std::snprintf(text, sizeof text, "%.2f", amount);
  else if (a >= 1e-6)
    std::snprintf(text, sizeof text, "%.*f", std::max(0, 2 - static_cast<int>(std::floor(std::log10(a)))), amount);
  else
    std::snprintf(text, sizeof text, "%.2e", amount);
  return std::string(text) + " " + currency;
}

}  // namespace gradmesh::obs
