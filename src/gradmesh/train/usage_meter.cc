#include "gradmesh/train/usage_meter.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <sstream>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/traffic_meter.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/resource_usage.h"
#include "gradmesh/obs/run_log.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {
namespace {

// The fixed fields in the order they travel, and their names in the usage line.
constexpr const char* kFieldNames[] = {"cpu_seconds",      "wall_seconds",       "peak_rss_bytes",
                                       "sent_bytes",       "received_bytes",     "inter_host_bytes",
                                       "inter_host_received_bytes", "dataset_read_bytes", "checkpoint_written_bytes"};
constexpr size_t kFields = std::size(kFieldNames);

std::array<double*, kFields> fields_of(RankUsage& u) {
  return {&u.cpu_seconds,      &u.wall_seconds,     &u.peak_rss_bytes,
          &u.sent_bytes,       &u.received_bytes,   &u.inter_host_bytes,
          &u.inter_host_received_bytes, &u.dataset_read_bytes, &u.checkpoint_written_bytes};
}

// "v0 v1 ... v8 backend sent received ..." with %.17g, so the doubles round-trip.
std::string encode(RankUsage u) {
  std::ostringstream out;
  out.precision(17);
  for (double* v : fields_of(u)) out << *v << ' ';
  for (const auto& [name, traffic] : u.backends) out << name << ' ' << traffic.first << ' ' << traffic.second << ' ';
  return out.str();
}

RankUsage decode(const std::string& text) {
  RankUsage u;
  std::istringstream in(text);
  for (double* v : fields_of(u)) in >> *v;
  std::string name;
  double sent = 0, received = 0;
  while (in >> name >> sent >> received) u.backends[name] = {sent, received};
  return u;
}

}  // namespace

RankUsage measure_rank_usage() {
  RankUsage u;
  const ProcessUsage p = process_usage();
  u.cpu_seconds = p.cpu_seconds, u.wall_seconds = p.wall_seconds;
  u.peak_rss_bytes = static_cast<double>(p.peak_rss_bytes);
  for (const auto& [name, t] : comm::traffic_by_backend()) {
    u.sent_bytes += static_cast<double>(t.sent), u.received_bytes += static_cast<double>(t.received);
    u.inter_host_bytes += static_cast<double>(t.inter_host_sent);
    u.inter_host_received_bytes += static_cast<double>(t.inter_host_received);
    u.backends[name] = {static_cast<double>(t.sent), static_cast<double>(t.received)};
  }
  u.dataset_read_bytes = static_cast<double>(io_bytes(IoCounter::kDatasetRead));
  u.checkpoint_written_bytes = static_cast<double>(io_bytes(IoCounter::kCheckpointWritten));
  return u;
}

std::vector<RankUsage> gather_rank_usage(comm::ProcessGroup* group, const RankUsage& mine) {
  if (group == nullptr || group->size() == 1) return {mine};
  std::vector<RankUsage> all;
  for (const std::string& text : parallel::allgather_strings(*group, encode(mine))) all.push_back(decode(text));
  return all;
}

obs::Prices prices_of(const MeteringConfig& config) {
  obs::Prices p;
  p.currency = config.currency;
  p.core_hour = config.price_per_core_hour;
  p.storage_gb_month = config.price_per_gb_month;
  p.egress_gb = config.price_per_gb_egress;
  p.examples = config.example_prices;
  return p;
}

double directory_bytes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  double total = 0;
  // A checkpoint being pruned can vanish mid-walk: count what is there.
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_error;
    if (it->is_regular_file(size_error)) {
      const auto size = it->file_size(size_error);
      if (!size_error) total += static_cast<double>(size);
    }
  }
  return total;
}

UsageMeter::UsageMeter(obs::Prices prices, std::string checkpoint_dir, const std::string& metrics_path, double now)
    : prices_(std::move(prices)), checkpoint_dir_(std::move(checkpoint_dir)), last_time_(now) {
  std::error_code ec;
  if (!std::filesystem::exists(metrics_path, ec)) return;
  try {
    const obs::RunLog earlier = obs::read_run_log(metrics_path);
    if (earlier.usage) base_ = earlier.usage->totals;
  } catch (const Error& e) {
    log_warn(std::string("the run's cost so far starts from zero: ") + e.what());
  }
  storage_gb_seconds_ = base_["storage_gb_seconds"];
}

obs::JsonObject UsageMeter::line(int64_t step, const std::vector<RankUsage>& ranks, double now) {
  const double stored = directory_bytes(checkpoint_dir_);
  storage_gb_seconds_ += stored / 1e9 * std::max(0.0, now - last_time_);
  last_time_ = now;

  obs::JsonObject per_rank, totals, backends;
  std::map<std::string, double> sums;
  for (size_t f = 0; f < kFields; ++f) {
    std::vector<double> values;
    for (RankUsage u : ranks) values.push_back(*fields_of(u)[f]);
    const std::string name = kFieldNames[f];
    per_rank.add(name, values);
    // Ranks run side by side: their wall time and peak memory are the
    // longest and the largest, not sums. Earlier processes ran before this
    // one: their wall time adds up, their peak memory does not.
    const bool side_by_side = name == "wall_seconds" || name == "peak_rss_bytes";
    double value = 0;
    for (double v : values) value = side_by_side ? std::max(value, v) : value + v;
    sums[name] = name == "peak_rss_bytes" ? std::max(value, base_[name]) : value + base_[name];
  }
  sums["checkpoint_stored_bytes"] = stored;
  sums["storage_gb_seconds"] = storage_gb_seconds_;
  for (const auto& [name, value] : sums) totals.add(name, value);
  std::map<std::string, std::pair<double, double>> by_backend;
  for (const RankUsage& u : ranks)
    for (const auto& [name, t] : u.backends) by_backend[name].first += t.first, by_backend[name].second += t.second;
  for (const auto& [name, t] : by_backend)
    backends.add(name, obs::JsonObject().add("sent_bytes", t.first).add("received_bytes", t.second));

  obs::Consumption used;
  used.cpu_seconds = sums["cpu_seconds"];
  used.storage_gb_seconds = storage_gb_seconds_;
  used.inter_host_bytes = sums["inter_host_bytes"];
  cost_ = obs::cost_of(used, prices_);
  obs::JsonObject line;
  line.add("type", "usage").add("step", step).add("currency", prices_.currency)
      .add("example_prices", prices_.examples)
      .add("prices", obs::JsonObject().add("core_hour", prices_.core_hour)
                         .add("storage_gb_month", prices_.storage_gb_month).add("egress_gb", prices_.egress_gb))
      .add("cost", obs::JsonObject().add("compute", cost_.compute).add("storage", cost_.storage)
                       .add("egress", cost_.egress).add("total", cost_.total()))
      .add("totals", totals).add("ranks", per_rank).add("backends", backends);
  return line;
}

}  // namespace gradmesh::train
