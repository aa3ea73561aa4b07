#include "gradmesh/elastic/metrics_feed.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "gradmesh/comm/store.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/obs/run_exposition.h"
#include "gradmesh/obs/run_log.h"

namespace gradmesh::elastic {
namespace {

// A very long run logs a line every few seconds for weeks; past this many
// events the dashboard keeps the first ones and says so, rather than growing.
constexpr size_t kMaxEvents = 1'000'000;

std::string agent_event_json(const AgentSnapshot& s) {
  nlohmann::json j = {{"time", s.time},         {"kind", agent_phase_name(s.phase)}, {"generation", s.generation},
                      {"workers", s.workers},   {"restarts", s.restarts},            {"node_rank", s.node_rank},
                      {"message", s.message}};
  if (s.phase == AgentPhase::kFinished) j["exit_code"] = s.exit_code;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string metrics_path_key(const std::string& run_id) { return run_id + "/metrics_path"; }

void publish_metrics_path(comm::Store& store, const std::string& run_id, const std::string& path) {
  store.set(metrics_path_key(run_id), path);
}

MetricsFeed::MetricsFeed(std::string store_endpoint, std::string run_id, std::shared_ptr<const AgentStatus> status,
                         std::chrono::milliseconds interval)
    : endpoint_(std::move(store_endpoint)), run_id_(std::move(run_id)), status_(std::move(status)),
      interval_(interval), reader_(std::make_unique<obs::RunLogReader>("metrics.jsonl")),
      thread_([this] { loop(); }) {}

MetricsFeed::~MetricsFeed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool MetricsFeed::stopping() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

void MetricsFeed::loop() {
  for (;;) {
    try {
      poll();
    } catch (const std::exception& e) {
      // The store may be briefly unreachable; the dashboard is not worth failing the job for.
      if (!warned_) log_warn(std::string("dashboard: ") + e.what());
      warned_ = true;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (changed_.wait_for(lock, interval_, [this] { return stopping_; })) return;
  }
}

void MetricsFeed::poll() {
  for (const AgentSnapshot& s : status_->history(agent_seen_)) {
    ++agent_seen_;
    std::lock_guard<std::mutex> lock(mutex_);
    append({"agent", agent_event_json(s)});
  }
  if (!store_) store_ = comm::open_store(endpoint_);
  // Rank 0 publishes the path once per process: a restarted run may name a new file.
  const std::string key = metrics_path_key(run_id_);
  if (store_->check({key})) {
    const std::string path = store_->get(key, std::chrono::milliseconds(1000));
    if (path != path_) {
      path_ = path, offset_ = 0, partial_.clear();
      std::lock_guard<std::mutex> lock(mutex_);
      reader_ = std::make_unique<obs::RunLogReader>(path_);
    }
  }
  if (!path_.empty()) follow_file();
}

void MetricsFeed::follow_file() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;  // on another host, or not created yet
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < offset_) offset_ = 0, partial_.clear();  // the file was replaced
  if (size == offset_) return;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk(size - offset_, '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(in.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  size_t start = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t end; (end = partial_.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = partial_.substr(start, end - start);
    try {
      reader_->add_line(line);
    } catch (const Error& e) {
      if (!warned_) log_warn(std::string("dashboard: ") + e.what());
      warned_ = true;
      continue;  // the page would fail to parse it too
    }
    if (line.find_first_not_of(" \t\r") != std::string::npos) append({"metrics", std::move(line)});
  }
  partial_.erase(0, start);
}

void MetricsFeed::append(Event event) {
  if (events_.size() >= kMaxEvents) return;
  events_.push_back(std::move(event));
  changed_.notify_all();
}

std::vector<MetricsFeed::Event> MetricsFeed::events_since(size_t& next, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return stopping_ || next < events_.size(); });
  if (next >= events_.size()) return {};
  std::vector<Event> out(events_.begin() + static_cast<std::ptrdiff_t>(next), events_.end());
  next = events_.size();
  return out;
}

std::string MetricsFeed::prometheus_text() const {
  const AgentSnapshot agent = status_->snapshot();
  std::lock_guard<std::mutex> lock(mutex_);
  return obs::render_run_exposition(reader_->log(), run_id_, agent.generation, agent.restarts, agent.workers,
                                    agent_phase_name(agent.phase));
}

}  // namespace gradmesh::elastic
