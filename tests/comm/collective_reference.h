// Test support for every ProcessGroup backend: a serial reference of each
// collective, and runners that execute one body per rank as threads or as
// forked processes.
//
// A CollectiveCase names one call (collective, world size, dtype, element
// count, reduce op, root) and a deterministic per-rank input generator, so
// any rank can build its own input and the output it must end with, without
// talking to the others:
//
//   CollectiveCase c{Collective::kAllreduce, world, DType::kBF16, 1'000'003, ReduceOp::kAvg};
//   Tensor input = make_input(c, rank), output = make_output(c, input);
//   launch(group, c, input, output)->wait();
//   EXPECT_EQ(compare_output(c, rank, output), "");
//
// The reference computes in float32 in rank order from the dtype-rounded
// inputs and rounds once to the dtype (the contract of comm/reduce.h). The
// default inputs are integers in [-30, 30], so sum, max and min are exact in
// both dtypes for up to 8 ranks and compare bit for bit; avg is allowed one
// unit in the last place (a backend may multiply by 1/n instead of dividing).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh::comm::testing {

enum class Collective { kAllreduce, kBroadcast, kAllgather, kReduceScatter };

inline const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllgather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
  }
  return "?";
}

// Element i of rank r's input: a well-mixed integer in [-30, 30], different per rank.
inline float default_input(int rank, int64_t i) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(rank) * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 29;
  return static_cast<float>(static_cast<int64_t>(x % 61) - 30);
}

using InputFn = float (*)(int rank, int64_t i);

struct CollectiveCase {
  Collective collective = Collective::kAllreduce;
  int world = 1;
  DType dtype = DType::kF32;
  int64_t count = 1;  // allreduce/broadcast: the tensor; allgather: each input; reduce_scatter: each output
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  InputFn input = default_input;

  std::string describe() const {
    std::string text = std::string(collective_name(collective)) + "(" + (dtype == DType::kF32 ? "f32" : "bf16") +
                       " x " + std::to_string(count);
    if (collective == Collective::kAllreduce || collective == Collective::kReduceScatter)
      text += std::string(", ") + reduce_op_name(op);
    if (collective == Collective::kBroadcast) text += ", root " + std::to_string(root);
    return text + ") on " + std::to_string(world) + " ranks";
  }
  int64_t input_numel() const { return collective == Collective::kReduceScatter ? world * count : count; }
  int64_t output_numel() const { return collective == Collective::kAllgather ? world * count : count; }
};

// What rank r's input element holds once stored in the case's dtype.
inline float stored_input(const CollectiveCase& c, int rank, int64_t i) {
  const float value = c.input(rank, i);
  return c.dtype == DType::kBF16 ? bf16_to_float(float_to_bf16(value)) : value;
}

inline Tensor make_input(const CollectiveCase& c, int rank) {
  std::vector<float> values(c.input_numel());
  for (int64_t i = 0; i < c.input_numel(); ++i) values[i] = c.input(rank, i);
  Tensor input = Tensor::from_vector({c.input_numel()}, values);
  return c.dtype == DType::kF32 ? input : input.to(c.dtype);
}

// The output tensor to pass: the input itself for the in-place collectives.
inline Tensor make_output(const CollectiveCase& c, const Tensor& input) {
  if (c.collective == Collective::kAllreduce || c.collective == Collective::kBroadcast) return input;
  return Tensor::zeros({c.output_numel()}, c.dtype);
}

inline std::shared_ptr<Work> launch(ProcessGroup& group, const CollectiveCase& c, Tensor& input, Tensor& output,
                                    Millis timeout = Millis(20'000)) {
  switch (c.collective) {
    case Collective::kAllreduce: {
      AllreduceOptions options;
      options.op = c.op;
      options.timeout = timeout;
      return group.allreduce(input, options);
    }
    case Collective::kBroadcast: {
      BroadcastOptions options;
      options.root = c.root;
      options.timeout = timeout;
      return group.broadcast(input, options);
    }
    case Collective::kAllgather: {
      CollectiveOptions options;
      options.timeout = timeout;
      return group.allgather(input, output, options);
    }
    case Collective::kReduceScatter: {
      AllreduceOptions options;
      options.op = c.op;
      options.timeout = timeout;
      return group.reduce_scatter(input, output, options);
    }
  }
  return nullptr;
}

inline float round_to(DType dtype, float value) {
  return dtype == DType::kBF16 ? bf16_to_float(float_to_bf16(value)) : value;
}

// Reduces element i of every rank's input (rank order, float32), rounded once.
inline float reduce_reference(const CollectiveCase& c, int64_t i) {
  float acc = stored_input(c, 0, i);
  for (int r = 1; r < c.world; ++r) {
    const float v = stored_input(c, r, i);
    if (c.op == ReduceOp::kMax) acc = std::max(acc, v);
    else if (c.op == ReduceOp::kMin) acc = std::min(acc, v);
    else acc += v;
  }
  if (c.op == ReduceOp::kAvg) acc /= static_cast<float>(c.world);
  return round_to(c.dtype, acc);
}

// The output rank `rank` must end with.
inline std::vector<float> expected_output(const CollectiveCase& c, int rank) {
  std::vector<float> out(c.output_numel());
  for (int64_t i = 0; i < c.output_numel(); ++i) {
    switch (c.collective) {
      case Collective::kAllreduce: out[i] = reduce_reference(c, i); break;
      case Collective::kBroadcast: out[i] = stored_input(c, c.root, i); break;
      case Collective::kAllgather: out[i] = stored_input(c, static_cast<int>(i / c.count), i % c.count); break;
      case Collective::kReduceScatter: out[i] = reduce_reference(c, rank * c.count + i); break;
    }
  }
  return out;
}

// "" when `actual` is rank's expected output, else the first difference.
inline std::string compare_output(const CollectiveCase& c, int rank, const Tensor& actual) {
  if (actual.numel() != c.output_numel() || actual.dtype() != c.dtype)
    return c.describe() + ": rank " + std::to_string(rank) + " output has the wrong numel or dtype";
  const std::vector<float> want = expected_output(c, rank);
  const std::vector<float> got = actual.to_vector();
  // avg may differ by rounding: one unit in the last place of the dtype.
  const float ulp = c.dtype == DType::kBF16 ? 1.0f / 128 : 1.0f / (1 << 23);
  const bool exact = c.op != ReduceOp::kAvg ||
                     (c.collective != Collective::kAllreduce && c.collective != Collective::kReduceScatter);
  for (int64_t i = 0; i < c.output_numel(); ++i) {
    const float tolerance = exact ? 0.0f : std::fabs(want[i]) * ulp;
    if (!(std::fabs(got[i] - want[i]) <= tolerance))
      return c.describe() + ": rank " + std::to_string(rank) + " element " + std::to_string(i) + " is " +
             std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
  }
  return "";
}

// Runs one case on this rank: "" when the output is right, else why not.
inline std::string run_case(ProcessGroup& group, const CollectiveCase& c) {
  Tensor input = make_input(c, group.rank());
  Tensor output = make_output(c, input);
  try {
    launch(group, c, input, output)->wait();
  } catch (const std::exception& e) {
    return c.describe() + ": rank " + std::to_string(group.rank()) + " failed: " + e.what();
  }
  return compare_output(c, group.rank(), output);
}

// Every collective, dtype and reduce op at each count; broadcasts from the
// first and the last rank.
// Three rounds of: an all-reduce of `big_count` floats queued on the
// communication thread (large enough for shm to queue it anyway, and issued
// with `background` so every backend does), then a small all-reduce, an
// allgather and a barrier issued right behind it, which must queue behind it
// rather than run inline ahead of it; the last rounds find the group idle.
// Two ranks. Returns "" or the first mismatch.
inline std::string check_queued_then_inline_order(ProcessGroup& group, int rank, int64_t big_count) {
  const CollectiveCase big{Collective::kAllreduce, 2, DType::kF32, big_count, ReduceOp::kSum};
  const CollectiveCase small{Collective::kAllreduce, 2, DType::kF32, 5, ReduceOp::kMax};
  const CollectiveCase gather{Collective::kAllgather, 2, DType::kBF16, 9};
  for (int round = 0; round < 3; ++round) {
    Tensor a = make_input(big, rank), b = make_input(small, rank);
    Tensor c_in = make_input(gather, rank), c_out = make_output(gather, c_in);
    AllreduceOptions queued;
    queued.op = big.op;
    queued.background = true;
    auto w1 = group.allreduce(a, queued);
    auto w2 = launch(group, small, b, b);
    auto w3 = launch(group, gather, c_in, c_out);
    auto w4 = group.barrier();
    for (auto& w : {w1, w2, w3, w4}) w->wait();
    for (const auto& [c, out] : {std::pair{big, a}, std::pair{small, b}, std::pair{gather, c_out}}) {
      const std::string failure = compare_output(c, rank, out);
      if (!failure.empty()) return failure;
    }
  }
  return "";
}

inline std::vector<CollectiveCase> all_cases(int world, const std::vector<int64_t>& counts) {
  std::vector<CollectiveCase> cases;
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int64_t count : counts) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        cases.push_back({Collective::kAllreduce, world, dtype, count, op});
        cases.push_back({Collective::kReduceScatter, world, dtype, count, op});
      }
      cases.push_back({Collective::kBroadcast, world, dtype, count, ReduceOp::kSum, world - 1});
      if (world > 1) cases.push_back({Collective::kBroadcast, world, dtype, count, ReduceOp::kSum, 0});
      cases.push_back({Collective::kAllgather, world, dtype, count});
    }
  return cases;
}

// Bytes the calling process's network namespace has sent (/proc/net/dev,
// which shows the namespace of the process reading it): on its loopback
// device when `loopback`, else on all its other devices together.
inline uint64_t namespace_tx_bytes(bool loopback) {
  std::FILE* file = std::fopen("/proc/net/dev", "r");
  if (file == nullptr) throw std::runtime_error("cannot read /proc/net/dev");
  uint64_t total = 0;
  char line[512];
  while (std::fgets(line, sizeof line, file)) {
    char name[64];
    unsigned long long field[9];  // receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes
    if (std::sscanf(line, " %63[^:]: %llu %llu %llu %llu %llu %llu %llu %llu %llu", name, &field[0], &field[1],
                    &field[2], &field[3], &field[4], &field[5], &field[6], &field[7], &field[8]) != 10)
      continue;
    if ((std::string(name) == "lo") == loopback) total += field[8];
  }
  std::fclose(file);
  return total;
}

// "rank r: message" lines for the ranks that reported an error ("" when none did).
inline std::string join_errors(const std::vector<std::string>& errors) {
  std::string text;
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) text += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  return text;
}

// Runs body(rank) on `world` threads; returns each rank's exception message ("" = none).
inline std::vector<std::string> run_rank_threads(int world, const std::function<void(int rank)>& body) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

struct RankOutcome {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that killed it, or 0
  std::string message; // what the body threw, if anything
};

// Forks `world` processes running body(rank); a body that throws exits 1 and
// reports the message. Processes still running after `timeout` are killed
// (SIGKILL) and reported with that signal and "timed out". Call it while the
// test process runs no other threads.
inline std::vector<RankOutcome> run_rank_processes(int world, const std::function<void(int rank)>& body,
                                                   std::chrono::seconds timeout = std::chrono::seconds(30)) {
  std::vector<pid_t> pids(world, -1);
  std::vector<int> pipes(world, -1);
  std::vector<RankOutcome> outcomes(world);
  std::fflush(nullptr);
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      std::string message;
      try {
        body(r);
      } catch (const std::exception& e) {
        message = e.what();
        code = 1;
      }
      if (!message.empty() && ::write(fds[1], message.data(), message.size()) < 0) code = 2;
      ::_exit(code);
    }
    ::close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int running = world;
  std::vector<bool> done(world, false);
  while (running > 0) {
    for (int r = 0; r < world; ++r) {
      char buffer[4096];
      ssize_t n;
      while ((n = ::read(pipes[r], buffer, sizeof buffer)) > 0) outcomes[r].message.append(buffer, n);
      if (done[r]) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --running;
        if (WIFEXITED(status)) outcomes[r].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) outcomes[r].signal = WTERMSIG(status);
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r)
        if (!done[r]) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
          done[r] = true;
          outcomes[r].signal = SIGKILL;
          outcomes[r].message += " (timed out: killed by the test)";
        }
      running = 0;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < world; ++r) {
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(pipes[r], buffer, sizeof buffer)) > 0) outcomes[r].message.append(buffer, n);
    ::close(pipes[r]);
  }
  return outcomes;
}

}  // namespace gradmesh::comm::testing
