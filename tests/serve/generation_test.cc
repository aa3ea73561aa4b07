// Generation with continuous batching: one sequence gives nn::generate's
// tokens for the same seed (also past a full context), concurrent
// sequences are advanced together and each gets the text it would get
// alone, stop strings end the text before them even across tokens,
// malformed requests or prompts are named, and a stopped scheduler refuses.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/nn/generate.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/serve/batcher.h"
#include "gradmesh/serve/generation.h"
#include "serve/tiny_gpt.h"

namespace gradmesh::serve {
namespace {

using testing::letters;
using testing::tiny_gpt_spec;

std::unique_ptr<nn::Model> tiny_gpt() {
  auto m = std::make_unique<nn::Model>(nn::build_gpt(tiny_gpt_spec()), 5);
  m->set_training(false);
  return m;
}

// Runs one request to its end: the text and the final event.
struct Outcome {
  std::string text;
  GenerationEvent last;
  std::vector<std::string> pieces;
};

std::future<Outcome> run(GenerationScheduler& scheduler, const std::string& prompt, const GenerateParams& p) {
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto outcome = std::make_shared<Outcome>();
  scheduler.submit(
      prompt, p,
      [promise, outcome](const GenerationEvent& e) {
        outcome->text += e.text;
        outcome->pieces.push_back(e.text);
        if (e.done) {
          outcome->last = e;
          promise->set_value(*outcome);
        }
      },
      [promise](const std::string& error) { promise->set_exception(std::make_exception_ptr(std::runtime_error(error))); });
  return promise->get_future();
}

std::string alone(nn::Gpt& gpt, const std::string& prompt, const GenerateParams& p) {
  nn::GenerateOptions o;
  o.max_tokens = p.max_tokens;
  o.temperature = p.temperature;
  o.top_k = p.top_k;
  o.seed = p.seed;
  return letters().decode(nn::generate(gpt, letters().encode(prompt), o));
}

TEST(Generation, OneSequenceGivesTheTokensOfGenerateForItsSeed) {
  auto model = tiny_gpt();
  auto& gpt = static_cast<nn::Gpt&>(model->root());
  LocalSequenceModel sequences(gpt);
  GenerationScheduler scheduler(sequences, letters(), {});
  for (uint64_t seed : {1u, 2u}) {
    GenerateParams p;
    p.max_tokens = 20;  // past the context of 8: the refill path too
    p.temperature = 0.9;
    p.top_k = 5;
    p.seed = seed;
    const Outcome o = run(scheduler, "abc", p).get();
    EXPECT_EQ(o.text, alone(gpt, "abc", p)) << "seed " << seed;
    EXPECT_EQ(o.last.finish_reason, "length");
    EXPECT_EQ(o.last.tokens, 20);
  }
}

TEST(Generation, ConcurrentSequencesShareStepsAndEachGetsItsOwnText) {
  auto model = tiny_gpt();
  auto& gpt = static_cast<nn::Gpt&>(model->root());
  std::mutex mutex;
  int64_t widest = 0;
  GenerationOptions options;
  options.max_streams = 8;
  LocalSequenceModel sequences(gpt);
  // The first step waits until every request is queued: a tiny model on a
  // busy machine could otherwise finish each sequence before the next one
  // arrives, and the batch would never be wider than one.
  std::promise<void> all_queued;
  const std::shared_future<void> queued = all_queued.get_future().share();
  GenerationScheduler scheduler(sequences, letters(), options, [&](int64_t streams, double) {
    queued.wait();
    std::lock_guard<std::mutex> lock(mutex);
    widest = std::max(widest, streams);
  });
  const std::vector<std::string> prompts = {"a", "bcd", "kkk", "abcdefg", "e", "jj", "hi", "cab"};
  // What each gives alone, on a copy of the model (the scheduler's thread owns the other).
  auto copy = tiny_gpt();
  std::vector<std::string> expected;
  std::vector<GenerateParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateParams p;
    p.max_tokens = 3 + static_cast<int64_t>(i);  // sequences leave at different steps
    p.temperature = 0;
    params.push_back(p);
    expected.push_back(alone(static_cast<nn::Gpt&>(copy->root()), prompts[i], p));
  }
  std::vector<std::future<Outcome>> results;
  for (size_t i = 0; i < prompts.size(); ++i) results.push_back(run(scheduler, prompts[i], params[i]));
  all_queued.set_value();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(results[i].get().text, expected[i]) << i;
  EXPECT_GT(widest, 1) << "sequences were advanced together";
  // Finished sequences leave the batch just after their last event.
  for (int i = 0; i < 1000 && scheduler.active() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(scheduler.active(), 0);
}

TEST(Generation, StopStringsEndTheTextBeforeThemEvenAcrossTokens) {
  auto model = tiny_gpt();
  auto& gpt = static_cast<nn::Gpt&>(model->root());
  LocalSequenceModel sequences(gpt);
  GenerationScheduler scheduler(sequences, letters(), {});
  GenerateParams p;
  p.max_tokens = 12;
  p.temperature = 0;
  const std::string full = alone(gpt, "ab", p);
  ASSERT_GE(full.size(), 6u);
  const std::string stop = full.substr(3, 2);  // two tokens long
  GenerateParams with_stop = p;
  with_stop.stop = {stop, "zz"};
  const Outcome o = run(scheduler, "ab", with_stop).get();
  EXPECT_EQ(o.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(o.last.finish_reason, "stop");
  for (const std::string& piece : o.pieces) EXPECT_EQ(piece.find(stop), std::string::npos);
  GenerateParams none = p;
  none.max_tokens = 0;
  const Outcome empty = run(scheduler, "ab", none).get();
  EXPECT_EQ(empty.text, "");
  EXPECT_EQ(empty.last.finish_reason, "length");
}

TEST(Generation, ACancelledSequenceLeavesAtTheNextStep) {
  auto model = tiny_gpt();
  auto& gpt = static_cast<nn::Gpt&>(model->root());
  LocalSequenceModel sequences(gpt);
  GenerationScheduler scheduler(sequences, letters(), {});
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  std::promise<GenerationEvent> last;
  GenerateParams p;
  p.max_tokens = 1 << 20;  // would run for a long time
  scheduler.submit(
      "abc", p,
      [&](const GenerationEvent& e) {
        if (e.tokens >= 5) *cancelled = true;  // the client goes away after a few tokens
        if (e.done) last.set_value(e);
      },
      [](const std::string&) {}, cancelled);
  const GenerationEvent e = last.get_future().get();
  EXPECT_EQ(e.finish_reason, "cancelled");
  EXPECT_LT(e.tokens, 20);
}

TEST(Generation, BadPromptsAreNamedAndAStoppedSchedulerRefuses) {
  auto model = tiny_gpt();
  auto& gpt = static_cast<nn::Gpt&>(model->root());
  LocalSequenceModel sequences(gpt);
  GenerationScheduler scheduler(sequences, letters(), {});
  auto ignore = [](const GenerationEvent&) {};
  auto fail = [](const std::string&) {};
  EXPECT_THROW(scheduler.submit("", {}, ignore, fail), Error);
  EXPECT_THROW(scheduler.submit("abcdefghi", {}, ignore, fail), Error);  // 9 tokens, context 8
  EXPECT_THROW(scheduler.submit("xyz", {}, ignore, fail), Error);
  scheduler.stop();
  EXPECT_THROW(scheduler.submit("abc", {}, ignore, fail), QueueFull);
}

TEST(Generation, RequestsParseStrictly) {
  std::string text;
  const GenerateParams p = parse_generate_request(
      R"({"text_input": "abc", "parameters": {"max_tokens": 5, "temperature": 0.5, "top_k": 3, "seed": 9, "stop": "x"}})",
      &text);
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_EQ(p.temperature, 0.5);
  EXPECT_EQ(p.top_k, 3);
  EXPECT_EQ(p.seed, 9u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"x"}));
  for (const auto& [body, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{", "request body: is not valid JSON"},
           {"{}", "text_input: is missing"},
           {R"({"text_input": 3})", "text_input: is number"},
           {R"({"text_input": "a", "parameters": []})", "parameters: is array"},
           {R"({"text_input": "a", "parameters": {"max_tokens": -1}})", "parameters.max_tokens: is -1"},
           {R"({"text_input": "a", "parameters": {"max_tokens": 1.5}})", "parameters.max_tokens: is 1.5"},
           {R"({"text_input": "a", "parameters": {"temperature": -0.1}})", "parameters.temperature"},
           {R"({"text_input": "a", "parameters": {"seed": -3}})", "parameters.seed: is -3"},
           {R"({"text_input": "a", "parameters": {"stop": [""]}})", "parameters.stop: holds \"\""},
           {R"({"text_input": "a", "parameters": {"beam": 2}})", "parameters.beam: is not a generation parameter"}}) {
    try {
      parse_generate_request(body, &text);
      ADD_FAILURE() << "accepted " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << body << " -> " << e.what();
    }
  }
}

}  // namespace
}  // namespace gradmesh::serve
