#include "gradmesh/elastic/heartbeat.h"

#include <cmath>
#include <optional>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::elastic {

std::string heartbeat_key(const std::string& run_id, int generation, int rank) {
  return run_id + "/" + std::to_string(generation) + "/heartbeat/" + std::to_string(rank);
}

std::string format_heartbeat(const Heartbeat& b) {
  return std::to_string(b.step) + " " + std::to_string(b.beat) + " " + std::to_string(b.progress);
}

std::optional<Heartbeat> parse_heartbeat(const std::string& text) {
  const size_t first = text.find(' ');
  const size_t second = first == std::string::npos ? first : text.find(' ', first + 1);
  if (second == std::string::npos) return std::nullopt;
  const auto step = try_parse_int(std::string_view(text).substr(0, first), -1);
  const auto beat = try_parse_int(std::string_view(text).substr(first + 1, second - first - 1), 0);
  const auto progress = try_parse_int(std::string_view(text).substr(second + 1), 0);
  if (!step || !beat || !progress) return std::nullopt;
  return Heartbeat{*step, *beat, *progress};
}

HeartbeatPublisher::HeartbeatPublisher(std::shared_ptr<comm::Store> store, std::string run_id, int generation,
                                       int rank, std::chrono::milliseconds interval)
    : store_(std::move(store)), key_(heartbeat_key(run_id, generation, rank)), interval_(interval) {
  GRADMESH_CHECK(store_ != nullptr && interval_.count() > 0, "a heartbeat needs a store and a positive interval");
  publish();
  thread_ = std::thread([this] { run(); });
}

HeartbeatPublisher::~HeartbeatPublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatPublisher::set_step(int64_t step) {
  step_.store(step);
  progress_.fetch_add(1);
}

void HeartbeatPublisher::touch() { progress_.fetch_add(1); }

void HeartbeatPublisher::keep_published(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  kept_.emplace_back(key, value);
}

void HeartbeatPublisher::publish() {
  try {
    store_->set(key_, format_heartbeat(Heartbeat{step_.load(), ++beat_, progress_.load()}));
  } catch (const Error& e) {
    // A store hiccup must not kill training; the launcher judges the silence.
    if (!warned_) log_warn("cannot publish the heartbeat " + key_ + ": " + e.what());
    warned_ = true;
  }
}

void HeartbeatPublisher::run() {
  constexpr int64_t kKeptEvery = 10;  // beats between the checks of the kept keys
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    const std::vector<std::pair<std::string, std::string>> kept = beat_ % kKeptEvery == 0 ? kept_ : decltype(kept_){};
    lock.unlock();
    publish();
    for (const auto& [key, value] : kept) {
      try {
        if (!store_->check({key})) store_->set(key, value);
      } catch (const Error&) {
        // The store is away: the heartbeat's own warning said so; next time.
      }
    }
    lock.lock();
  }
}

std::unique_ptr<HeartbeatPublisher> HeartbeatPublisher::from_environment(std::shared_ptr<comm::Store> store) {
  const std::string run_id = env_string("GRADMESH_RUN_ID");
  if (run_id.empty()) return nullptr;
  const int generation = static_cast<int>(parse_int(env_string("GRADMESH_GENERATION"),
                                                    "environment variable GRADMESH_GENERATION", 0, 1'000'000));
  const std::optional<int64_t> rank = env_int("RANK", 0, 1'000'000);
  if (!rank) return nullptr;
  return std::make_unique<HeartbeatPublisher>(std::move(store), run_id, generation, static_cast<int>(*rank),
                                              heartbeat_interval_from_environment());
}

std::chrono::milliseconds heartbeat_interval_from_environment() {
  const double seconds = parse_double(env_string("GRADMESH_HEARTBEAT_INTERVAL"),
                                      "environment variable GRADMESH_HEARTBEAT_INTERVAL", 0.01, 3600);
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

}  // namespace gradmesh::elastic
