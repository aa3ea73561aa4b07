#include "gradmesh/train/usage_meter.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <sstream>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/traffic_meter.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
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

// The fixed fields of `u`, in kFieldNames' order (const or not, as `u` is).
template <class Usage>
auto fields_of(Usage& u) {
  return std::array{&u.cpu_seconds,      &u.wall_seconds,     &u.peak_rss_bytes,
                    &u.sent_bytes,       &u.received_bytes,   &u.inter_host_bytes,
                    &u.inter_host_received_bytes, &u.dataset_read_bytes, &u.checkpoint_written_bytes};
}
static_assert(std::tuple_size_v<decltype(fields_of(std::declval<RankUsage&>()))> == kFields);

// "process v0 v1 ... v8 backend sent received ..." with 17 digits, so the
// doubles round-trip (a process id and a backend name hold no spaces).
std::string encode(const RankUsage& u) {
  std::ostringstream out;
  out.precision(17);
  out << u.process << ' ';
  for (const double* v : fields_of(u)) out << *v << ' ';
  for (const auto& [name, traffic] : u.backends) out << name << ' ' << traffic.first << ' ' << traffic.second << ' ';
  return out.str();
}

RankUsage decode(const std::string& text) {
  RankUsage u;
  std::istringstream in(text);
  in >> u.process;
  for (double* v : fields_of(u)) in >> *v;
  std::string name;
  double sent = 0, received = 0;
  while (in >> name >> sent >> received) u.backends[name] = {sent, received};
  return u;
}

// Who this process is, for the meter's bookkeeping: host, pid and start time
// (a pid alone is reused).
const std::string& process_id() {
  static const std::string id = [] {
    char host[256] = "host";
    ::gethostname(host, sizeof host - 1);
    std::string name = host;
    for (char& c : name)
      if (c == ' ' || c == ':') c = '_';
    return name + ":" + std::to_string(::getpid()) + ":" +
           std::to_string(unix_millis() - static_cast<int64_t>(process_usage().wall_seconds * 1e3));
  }();
  return id;
}

}  // namespace

RankUsage measure_rank_usage() {
  RankUsage u;
  u.process = process_id();
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
  if (metrics_path.empty() || !std::filesystem::exists(metrics_path, ec)) return;
  std::optional<obs::UsageRecord> earlier;
  try {
    earlier = obs::read_run_log(metrics_path).usage;
  } catch (const Error& e) {
    log_warn(std::string("the run's cost so far starts from zero: ") + e.what());
  }
  if (!earlier) return;
  totals_ = earlier->totals;
  for (const auto& [backend, figures] : earlier->backends) {
    const auto sent = figures.find("sent_bytes"), received = figures.find("received_bytes");
    backend_totals_[backend] = {sent == figures.end() ? 0 : sent->second, received == figures.end() ? 0 : received->second};
  }
  // The processes the last line saw, with their figures then: those still
  // running (survivors of an in-process recovery) are counted from there on.
  for (size_t r = 0; r < earlier->processes.size(); ++r) {
    RankUsage u;
    u.process = earlier->processes[r];
    const auto fields = fields_of(u);
    for (size_t f = 0; f < kFields; ++f) {
      const auto it = earlier->ranks.find(kFieldNames[f]);
      if (it != earlier->ranks.end() && r < it->second.size()) *fields[f] = it->second[r];
    }
    last_seen_[u.process] = u;
  }
}

obs::JsonObject UsageMeter::line(int64_t step, const std::vector<RankUsage>& ranks, double now) {
  const double stored = directory_bytes(checkpoint_dir_);
  totals_["storage_gb_seconds"] += stored / 1e9 * std::max(0.0, now - last_time_);
  last_time_ = now;

  // What each process consumed since the meter last saw it (all of it for a
  // process it never saw). Ranks run side by side: the interval's wall time
  // is the longest rank's; peak memory is the largest ever seen.
  double wall = 0;
  for (const RankUsage& u : ranks) {
    const auto seen = last_seen_.find(u.process);
    static const RankUsage kNeverSeen;
    const RankUsage& previous = seen == last_seen_.end() ? kNeverSeen : seen->second;
    const auto now_fields = fields_of(u), then_fields = fields_of(previous);
    for (size_t f = 0; f < kFields; ++f) {
      const std::string name = kFieldNames[f];
      const double delta = std::max(0.0, *now_fields[f] - *then_fields[f]);
      if (name == "peak_rss_bytes") totals_[name] = std::max(totals_[name], *now_fields[f]);
      else if (name == "wall_seconds") wall = std::max(wall, delta);
      else totals_[name] += delta;
    }
    for (const auto& [backend, t] : u.backends) {
      const auto before = previous.backends.find(backend);
      const std::pair<double, double> then = before == previous.backends.end() ? std::pair(0.0, 0.0) : before->second;
      backend_totals_[backend].first += std::max(0.0, t.first - then.first);
      backend_totals_[backend].second += std::max(0.0, t.second - then.second);
    }
    last_seen_[u.process] = u;
  }
  totals_["wall_seconds"] += wall;
  totals_["checkpoint_stored_bytes"] = stored;

  obs::JsonObject per_rank, totals, backends;
  std::vector<std::string> processes;
  for (const RankUsage& u : ranks) processes.push_back(u.process);
  for (size_t f = 0; f < kFields; ++f) {
    std::vector<double> values;
    for (const RankUsage& u : ranks) values.push_back(*fields_of(u)[f]);
    per_rank.add(kFieldNames[f], values);
  }
  for (const auto& [name, value] : totals_) totals.add(name, value);
  for (const auto& [name, t] : backend_totals_)
    backends.add(name, obs::JsonObject().add("sent_bytes", t.first).add("received_bytes", t.second));

  obs::Consumption used;
  used.cpu_seconds = totals_["cpu_seconds"];
  used.storage_gb_seconds = totals_["storage_gb_seconds"];
  used.inter_host_bytes = totals_["inter_host_bytes"];
  cost_ = obs::cost_of(used, prices_);
  obs::JsonObject line;
  line.add("type", "usage").add("step", step).add("currency", prices_.currency)
      .add("example_prices", prices_.examples)
      .add("prices", obs::JsonObject().add("core_hour", prices_.core_hour)
                         .add("storage_gb_month", prices_.storage_gb_month).add("egress_gb", prices_.egress_gb))
      .add("cost", obs::JsonObject().add("compute", cost_.compute).add("storage", cost_.storage)
                       .add("egress", cost_.egress).add("total", cost_.total()))
      .add("totals", totals).add("ranks", per_rank).add("processes", std::move(processes)).add("backends", backends);
  return line;
}

}  // namespace gradmesh::train
