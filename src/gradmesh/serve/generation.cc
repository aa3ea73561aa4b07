#include "gradmesh/serve/generation.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/nn/generate.h"
#include "gradmesh/serve/batcher.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

[[noreturn]] void bad(const std::string& field, const std::string& what) { throw_error(ErrorKind::kUsage, field, what); }

int64_t integer_in(const Json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() || v.get<double>() < static_cast<double>(lo) || v.get<double>() > static_cast<double>(hi))
    bad(field, "is " + v.dump() + "; expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return v.get<int64_t>();
}

}  // namespace

GenerateParams parse_generate_request(const std::string& body, std::string* text) {
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {
    bad("request body", std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad("request body", std::string("is ") + j.type_name() + "; expected an object with \"text_input\"");
  const auto input = j.find("text_input");
  if (input == j.end()) bad("text_input", "is missing");
  if (!input->is_string()) bad("text_input", std::string("is ") + input->type_name() + "; expected a string");
  *text = input->get<std::string>();
  GenerateParams p;
  const auto params = j.find("parameters");
  if (params == j.end()) return p;
  if (!params->is_object()) bad("parameters", std::string("is ") + params->type_name() + "; expected an object");
  for (const auto& [key, v] : params->items()) {
    const std::string field = "parameters." + key;
    if (key == "max_tokens") {
      p.max_tokens = integer_in(v, field, 0, int64_t{1} << 20);
    } else if (key == "temperature") {
      if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 100)
        bad(field, "is " + v.dump() + "; expected a number from 0 to 100");
      p.temperature = v.get<double>();
    } else if (key == "top_k") {
      p.top_k = integer_in(v, field, 0, 1 << 20);
    } else if (key == "seed") {
      if (!v.is_number_unsigned()) bad(field, "is " + v.dump() + "; expected an integer >= 0");
      p.seed = v.get<uint64_t>();
    } else if (key == "stop") {
      const Json list = v.is_string() ? Json::array({v}) : v;
      if (!list.is_array() || list.size() > 16) bad(field, "expected a string or an array of at most 16 strings");
      for (const Json& s : list) {
        if (!s.is_string() || s.get<std::string>().empty() || s.get<std::string>().size() > 256)
          bad(field, "holds " + s.dump() + "; expected non-empty strings of at most 256 bytes");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad(field, "is not a generation parameter (max_tokens, temperature, top_k, seed, stop)");
    }
  }
  return p;
}

struct GenerationScheduler::Sequence {
  std::vector<int64_t> context;  // the last tokens fed or drawn: what a refill restarts from
  std::deque<int64_t> feed;      // tokens to feed before the next draw (the prompt, or a refill)
  int64_t generated = 0;
  int64_t slot = -1;             // its caches in the model; -1 until it first runs
  int64_t length = 0;            // positions fed since the slot (re)started
  GenerateParams params;
  CounterRng rng;
  std::string pending;           // generated text not sent yet (held back while it may start a stop string)
  OnEvent on_event;
  std::function<void(const std::string&)> on_error;
  std::shared_ptr<const std::atomic<bool>> cancelled;
  bool done = false;

  Sequence(const GenerateParams& p, uint64_t seed) : params(p), rng(seed, RngPurpose::kSampling, 0) {}

  // Sends what can no longer become part of a stop string; finishes on one.
  // Text already sent never holds the start of one: each send keeps back the
  // last (longest stop - 1) bytes, so a stop string lies within `pending`.
  void emit(bool last, const char* reason) {
    size_t hold = 0;
    for (const std::string& s : params.stop) {
      const size_t at = pending.find(s);
      if (at != std::string::npos) {
        on_event({pending.substr(0, at), true, "stop", generated});
        done = true;
        return;
      }
      hold = std::max(hold, s.size() - 1);
    }
    if (last) {
      on_event({std::move(pending), true, reason, generated});
      done = true;
    } else if (pending.size() > hold) {
      on_event({pending.substr(0, pending.size() - hold), false, "", generated});
      pending.erase(0, pending.size() - hold);
    }
  }
};

GenerationScheduler::GenerationScheduler(SequenceModel& model, TextCodec codec, GenerationOptions options,
                                         std::function<void(int64_t, double)> on_step)
    : model_(model), codec_(std::move(codec)), options_(options), on_step_(std::move(on_step)) {
  GRADMESH_CHECK(options_.max_streams >= 1 && options_.max_queue >= 1, "generation options out of range");
  thread_ = std::thread([this] { loop(); });
}

GenerationScheduler::~GenerationScheduler() { stop(); }

void GenerationScheduler::submit(const std::string& prompt, const GenerateParams& params, OnEvent on_event,
                                 std::function<void(const std::string&)> on_error,
                                 std::shared_ptr<const std::atomic<bool>> cancelled) {
  const nn::GptSpec& spec = model_.spec();
  std::vector<int64_t> tokens = codec_.encode(prompt);
  if (tokens.empty()) bad("text_input", "is empty: generation needs at least one token");
  if (static_cast<int64_t>(tokens.size()) > spec.block_size)
    bad("text_input", "holds " + std::to_string(tokens.size()) + " tokens, more than the model's context of " +
                          std::to_string(spec.block_size));
  auto s = std::make_unique<Sequence>(params, params.seed);
  s->context = tokens;
  s->feed.assign(tokens.begin(), tokens.end());
  s->on_event = std::move(on_event);
  s->on_error = std::move(on_error);
  s->cancelled = std::move(cancelled);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw QueueFull("the server is shutting down");
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_queue)
      throw QueueFull(std::to_string(waiting_.size()) + " sequences are already waiting (the queue's limit)");
    waiting_.push_back(std::move(s));
  }
  arrived_.notify_all();
}

int64_t GenerationScheduler::active() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(waiting_.size()) + running_count_;
}

void GenerationScheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  arrived_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GenerationScheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      arrived_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_ && waiting_.empty() && running_.empty()) return;
      // Join between steps, up to the batch's size.
      while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_streams) {
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      running_count_ = static_cast<int64_t>(running_.size());
    }
    std::vector<Sequence*> batch;
    for (auto& s : running_) {
      if (s->cancelled && s->cancelled->load()) {
        s->on_event({"", true, "cancelled", s->generated});
        s->done = true;
      } else if (s->params.max_tokens == 0) {
        s->emit(true, "length");
      } else {
        batch.push_back(s.get());
      }
    }
    if (!batch.empty()) step(batch);
    for (auto& s : running_) {
      if (!s->done || s->slot < 0) continue;
      try {
        model_.release(s->slot);
      } catch (const std::exception&) {
        // A split model that stopped or lost a rank: its caches went with it.
      }
    }
    running_.remove_if([](const std::unique_ptr<Sequence>& s) { return s->done; });
    std::lock_guard<std::mutex> lock(mutex_);
    running_count_ = static_cast<int64_t>(running_.size());
  }
}

void GenerationScheduler::step(std::vector<Sequence*>& batch) {
  const nn::GptSpec& spec = model_.spec();
  std::vector<int64_t> tokens, slots, positions;
  for (Sequence* s : batch) {
    if (s->slot < 0) s->slot = next_slot_++;
    tokens.push_back(s->feed.front());
    s->feed.pop_front();
    slots.push_back(s->slot);
    positions.push_back(s->length++);
  }
  const double start = now_seconds();
  Tensor logits;
  try {
    logits = model_.step(tokens, slots, positions);
  } catch (const std::exception& e) {
    for (Sequence* s : batch) {
      s->on_error(e.what());
      s->done = true;
    }
    return;
  }
  if (on_step_) on_step_(static_cast<int64_t>(batch.size()), now_seconds() - start);
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& s = *batch[i];
    if (!s.feed.empty()) continue;  // still reading its prompt (or a refill)
    nn::GenerateOptions o;
    o.temperature = s.params.temperature;
    o.top_k = s.params.top_k;
    const int64_t next = nn::sample_token(logits.data() + static_cast<int64_t>(i) * spec.vocab_size, spec.vocab_size,
                                          o, s.rng.uniform(static_cast<uint64_t>(s.generated)));
    ++s.generated;
    s.context.push_back(next);
    // A refill needs the last block_size / 2 tokens only; trimmed now and then, not per token.
    if (s.context.size() > 2 * static_cast<size_t>(spec.block_size))
      s.context.erase(s.context.begin(), s.context.end() - spec.block_size);
    s.pending += codec_.decode({next});
    const bool last = s.generated >= s.params.max_tokens;
    s.emit(last, "length");
    if (s.done) continue;
    if (s.length < spec.block_size) {
      s.feed.push_back(next);
      continue;
    }
    // The context is full: go on from its last half, as nn::generate does.
    s.length = 0;
    const auto keep = static_cast<size_t>(std::max<int64_t>(1, spec.block_size / 2));
    s.feed.assign(s.context.end() - static_cast<std::ptrdiff_t>(keep), s.context.end());
  }
}

}  // namespace gradmesh::serve
