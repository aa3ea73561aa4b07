// Text generation for the server, with continuous batching: every sequence
// has its own key/value cache (a slot of the SequenceModel, preallocated to
// the model's context, since a sequence never outgrows it), and one scheduler
// thread advances all running sequences by one token per step with a single
// batched forward pass (SequenceModel::step, in this process or through the
// stages and shards of a split model). Sequences join between steps, feeding
// their prompt one token per step alongside the others' new tokens, and
// leave when they finish, so a long generation never holds a short one back.
//
// Sampling is nn::generate's: token i of a sequence is drawn with
// CounterRng(seed, kSampling, 0).uniform(i), so a request gets the text
// `gradmesh generate` would give with the same seed. When the context is
// full, generation goes on from its last block_size / 2 tokens, as there.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/serve/sequence_model.h"

namespace gradmesh::serve {

// Text <-> token ids (the model's vocabulary). Decoding is per token: the
// text of a sequence is the concatenation of its tokens' texts (true of the
// byte and character vocabularies of data/token_file.h), so generated text
// is decoded one token at a time as it is drawn.
struct TextCodec {
  // Error(kUsage) naming a character the vocabulary does not hold.
  std::function<std::vector<int64_t>(const std::string& text)> encode;
  std::function<std::string(const std::vector<int64_t>& tokens)> decode;
};

struct GenerateParams {
  int64_t max_tokens = 64;         // new tokens, 0 .. 2^20
  double temperature = 1.0;        // 0 = always the most likely token
  int64_t top_k = 0;               // 0 = all
  uint64_t seed = 0;
  std::vector<std::string> stop;   // generation ends before the first of these
};

// {"text_input": "...", "parameters": {"max_tokens": 64, "temperature": 0.8,
// "top_k": 0, "seed": 1, "stop": ["\n"]}} (parameters optional). Strict:
// Error(kUsage) naming the field for anything malformed or out of range.
GenerateParams parse_generate_request(const std::string& body, std::string* text);

struct GenerationEvent {
  std::string text;           // new text since the last event (may be empty on the final one)
  bool done = false;
  std::string finish_reason;  // on the final event: "length" (max_tokens), "stop" (a stop string) or "cancelled"
  int64_t tokens = 0;         // tokens generated so far
};

struct GenerationOptions {
  int max_streams = 16;     // sequences in the running batch
  int64_t max_queue = 256;  // sequences waiting to join; more are refused (QueueFull)
};

class GenerationScheduler {
 public:
  using OnEvent = std::function<void(const GenerationEvent&)>;
  // `on_step` (may be empty) sees each step's batch size and seconds.
  GenerationScheduler(SequenceModel& model, TextCodec codec, GenerationOptions options,
                      std::function<void(int64_t streams, double seconds)> on_step = {});
  ~GenerationScheduler();  // stop()
  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Queues a sequence. `on_event` is called from the scheduler thread with
  // the text as it is generated, and once with done = true (or, if the
  // model fails, `on_error`). Error(kUsage) for an empty prompt, one longer
  // than the context, or an unknown character; QueueFull (batcher.h) when
  // the queue is full or the scheduler is stopping.
  // `cancelled` (may be null): once it reads true, the sequence leaves the
  // batch at the next step with a final event whose finish_reason is
  // "cancelled" (a streaming client that went away).
  void submit(const std::string& prompt, const GenerateParams& params, OnEvent on_event,
              std::function<void(const std::string& error)> on_error,
              std::shared_ptr<const std::atomic<bool>> cancelled = nullptr);
  // Sequences running or waiting.
  int64_t active() const;
  // Refuses new sequences, finishes every queued and running one, joins the thread.
  void stop();

 private:
  struct Sequence;
  void loop();
  void step(std::vector<Sequence*>& running);

  SequenceModel& model_;
  TextCodec codec_;
  int64_t next_slot_ = 0;  // the scheduler thread's
  GenerationOptions options_;
  std::function<void(int64_t, double)> on_step_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::list<std::unique_ptr<Sequence>> running_;  // touched by the scheduler thread only
  int64_t running_count_ = 0;                      // running_.size(), readable under mutex_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gradmesh::serve
