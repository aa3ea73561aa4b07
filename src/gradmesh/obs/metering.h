// What a run consumed and what that cost, by kind. The figures come from
// the workers (core/resource_usage.h, comm/traffic_meter.h), gathered by
// rank 0 every log interval into metrics.jsonl's "usage" lines; the report,
// `gradmesh report` and the dashboard read them back (obs/run_log.h).
//
// Cost is a model, stated here so it can be checked by hand:
//   compute  CPU core-seconds used (getrusage) / 3600 x price per core-hour
//   storage  checkpoint GB kept on disk, integrated over time, in GB-months
//            of 730 hours, x price per GB-month
//   egress   bytes sent to other hosts / 10^9 x price per GB
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::obs {

struct Prices {
  std::string currency = "USD";
  double core_hour = 0, storage_gb_month = 0, egress_gb = 0;
  bool examples = true;  // the built-in example prices: every display says so
};

// The run's consumption so far, all ranks and processes together.
struct Consumption {
  double cpu_seconds = 0;
  double storage_gb_seconds = 0;  // checkpoint bytes kept x seconds kept, in GB
  double inter_host_bytes = 0;    // sent to another host
};

struct Cost {
  double compute = 0, storage = 0, egress = 0;
  double total() const { return compute + storage + egress; }
};

constexpr double kSecondsPerBillingMonth = 730.0 * 3600.0;

Cost cost_of(const Consumption& used, const Prices& prices);

// Money as a bill shows it, with its currency on every amount: "$1,234.57",
// "$0.42", "< $0.01" below half a cent (a short run's cost), "12.30 CHF"
// where the currency has no symbol here. The pages' charts.js (fmtMoney)
// writes the same; tests/obs/formatting_cases.json holds both to it.
std::string money_text(double amount, const std::string& currency);

// A price, to 4 significant digits with its currency: "$0.0425".
std::string price_text(double amount, const std::string& currency);

// Bytes to 3 significant digits with a decimal unit: "512 B", "1.9 kB",
// "4.38 GB"; `per` follows the unit ("-hours": "1.9 kB-hours"). As
// charts.js's fmtBytes.
std::string bytes_text(double bytes, const std::string& per = "");

}  // namespace gradmesh::obs
