#include "gradmesh/elastic/metrics_feed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "gradmesh/comm/store.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/obs/run_exposition.h"
#include "gradmesh/obs/run_log.h"

namespace gradmesh::elastic {
namespace {

// The history a launcher keeps grows with the run: past every thinning step
// (32 MiB) of it, half as many step (and usage) lines as before are kept, so
// a run of weeks, or of thousands of ranks, holds tens of MiB, not
// gigabytes, and its curves keep their shape.
// At most this much of the file is read per poll, so one poll never stalls.
constexpr size_t kMaxReadPerPoll = 4u << 20;
// A new connection gets the history in pieces of this many events: the lock
// is held for one piece at a time.
constexpr size_t kMaxEventsPerRead = 2000;

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

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
                         std::chrono::milliseconds interval, size_t thinning_step)
    : endpoint_(std::move(store_endpoint)), run_id_(std::move(run_id)), status_(std::move(status)),
      interval_(interval), thinning_step_(std::max<size_t>(thinning_step, 1)), reader_(std::make_unique<obs::RunLogReader>("metrics.jsonl", /*keep_steps=*/false)),
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
    bool finishing = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finishing = finish_requested_;
    }
    try {
      if (finishing) drain();
      else poll();
    } catch (const std::exception& e) {
      // The store may be briefly unreachable; the dashboard is not worth failing the job for.
      if (!warned_) log_warn(std::string("dashboard: ") + e.what());
      warned_ = true;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (finishing) {
      ended_ = true;
      changed_.notify_all();
      return;
    }
    if (changed_.wait_for(lock, interval_, [this] { return stopping_ || finish_requested_; }) && stopping_) return;
  }
}

void MetricsFeed::append_agent_states() {
  for (const AgentSnapshot& s : status_->history(agent_seen_)) {
    ++agent_seen_;
    std::lock_guard<std::mutex> lock(mutex_);
    append({"agent", agent_event_json(s)});
  }
}

void MetricsFeed::poll() {
  append_agent_states();
  // Rank 0 publishes the path once per process: a restarted run may name a
  // new file. The store is asked every second until the path is known, then
  // every 5 s (one launcher per node asks: a large job's store must not pay
  // for the dashboard at the file's 4 reads a second).
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_path_check_) {
    next_path_check_ = now + (path_.empty() ? std::chrono::seconds(1) : std::chrono::seconds(5));
    read_published_path();
  }
  if (!path_.empty()) follow_file();
}

void MetricsFeed::drain() {
  // The workers have exited: whatever they wrote is in the file, however
  // close to their exit they wrote it. The path may have changed since the
  // last look (a restart) or never have been seen (a run shorter than a poll).
  try {
    read_published_path();
  } catch (const std::exception& e) {
    if (!warned_) log_warn(std::string("dashboard: the last look for the run's metrics failed: ") + e.what());
    warned_ = true;
  }
  // A bound, in case something else still writes to the file.
  for (int reads = 0; !path_.empty() && !follow_file() && reads < 256; ++reads) {
  }
  append_agent_states();  // last: the launcher's `finished` closes the history
}

bool MetricsFeed::finish(std::chrono::milliseconds budget) {
  std::unique_lock<std::mutex> lock(mutex_);
  finish_requested_ = true;
  changed_.notify_all();
  return changed_.wait_for(lock, budget, [this] { return ended_; });
}

bool MetricsFeed::ended() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

void MetricsFeed::read_published_path() {
  // Fails fast: the feed asks again at its next poll, and a call waiting out
  // an outage would hold up the launcher's exit.
  if (!store_) store_ = comm::open_store(endpoint_, std::chrono::milliseconds{2000}, std::chrono::milliseconds{0});
  const std::string key = metrics_path_key(run_id_);
  if (store_->check({key})) {
    const std::string path = store_->get(key, std::chrono::milliseconds(1000));
    if (path != path_) {
      path_ = path, offset_ = 0, partial_.clear();
      std::lock_guard<std::mutex> lock(mutex_);
      reader_ = std::make_unique<obs::RunLogReader>(path_, /*keep_steps=*/false);
    }
  }
}

bool MetricsFeed::follow_file() {
  // The store says where the file is; the feed only ever reads a regular
  // file named metrics.jsonl, without blocking (a FIFO there would hang it).
  if (std::filesystem::path(path_).filename() != "metrics.jsonl") return true;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return true;  // on another host, or not created yet
  struct stat st {};
  std::string chunk;
  bool to_the_end = true;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size < offset_) {  // the file was replaced: start over
      offset_ = 0, partial_.clear();
      std::lock_guard<std::mutex> lock(mutex_);
      reader_ = std::make_unique<obs::RunLogReader>(path_, /*keep_steps=*/false);
    }
    chunk.resize(static_cast<size_t>(std::min<uint64_t>(size - offset_, kMaxReadPerPoll)));
    to_the_end = size - offset_ <= kMaxReadPerPoll;
    const ssize_t got = chunk.empty() ? 0 : ::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(offset_));
    chunk.resize(got > 0 ? static_cast<size_t>(got) : 0);
  }
  ::close(fd);
  offset_ += chunk.size();
  partial_ += chunk;
  size_t start = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t end; (end = partial_.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = partial_.substr(start, end - start);
    try {
      reader_->add_line(line);
    } catch (const std::exception& e) {
      if (!warned_) log_warn(std::string("dashboard: ") + e.what());
      warned_ = true;
      continue;  // the page would fail to parse it too
    }
    if (line.front() == '{' && line.back() == '}') append({"metrics", std::move(line)});
  }
  partial_.erase(0, start);
  return to_the_end;
}

void MetricsFeed::append(Event event) {
  // Thinning: the step lines (with their usage lines) kept are every
  // `stride`-th, the stride doubling with each thinning step of history.
  const bool thinnable = event.name == "metrics" &&
                         (starts_with(event.data, "{\"type\":\"step\"") || starts_with(event.data, "{\"type\":\"usage\""));
  if (thinnable) {
    const size_t stride = size_t{1} << std::min<size_t>(bytes_ / thinning_step_, 20);
    if (starts_with(event.data, "{\"type\":\"step\"")) keep_interval_ = steps_seen_++ % stride == 0;
    if (!keep_interval_) return;
  }
  bytes_ += event.data.size() + event.name.size();
  events_.push_back(std::move(event));
  changed_.notify_all();
}

std::vector<MetricsFeed::Event> MetricsFeed::events_since(size_t& next, std::chrono::milliseconds timeout, bool* over) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return stopping_ || ended_ || next < events_.size(); });
  if (over) *over = ended_ && next >= events_.size();
  if (next >= events_.size()) return {};
  const size_t end = std::min(events_.size(), next + kMaxEventsPerRead);
  std::vector<Event> out(events_.begin() + static_cast<std::ptrdiff_t>(next),
                         events_.begin() + static_cast<std::ptrdiff_t>(end));
  next = end;
  return out;
}

std::string MetricsFeed::prometheus_text() const {
  const AgentSnapshot agent = status_->snapshot();
  std::lock_guard<std::mutex> lock(mutex_);
  return obs::render_run_exposition(reader_->log(), run_id_, agent.generation, agent.restarts, agent.workers,
                                    agent_phase_name(agent.phase));
}

}  // namespace gradmesh::elastic
