#include "gradmesh/serve/sharded_gpt.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/tensor_parallel.h"

namespace gradmesh::serve {
namespace {

enum Op : int32_t { kForward = 1, kStep = 2, kRelease = 3, kStop = 4, kKeepAlive = 5 };
constexpr int kHeaderWords = 4;  // op, n, T, payload words

// Integers travel as the bits of float32 elements: point-to-point messages
// copy bytes and never add, so every int32 arrives exactly.
Tensor pack(const std::vector<int32_t>& words) {
  Tensor t = Tensor::empty({static_cast<int64_t>(std::max<size_t>(words.size(), 1))});
  std::memcpy(t.data(), words.data(), words.size() * sizeof(int32_t));
  return t;
}
std::vector<int32_t> unpack(const Tensor& t, int64_t words) {
  std::vector<int32_t> out(static_cast<size_t>(words));
  std::memcpy(out.data(), t.data(), out.size() * sizeof(int32_t));
  return out;
}

// Waiting for rank 0's next command has no deadline a server could meet (it
// may sit idle for days); rank 0 sends a keep-alive well inside this one.
constexpr comm::Millis kCommandTimeout{static_cast<int64_t>(kMaxCommTimeoutSeconds * 1000)};

}  // namespace

struct ShardedGpt::Command {
  int32_t op = kForward;  // an Op, held as its wire value (Op is local to this file)
  int64_t n = 0, t = 1;
  std::vector<int32_t> payload;  // forward: n * T tokens; step: tokens, slots, positions (n each); release: slots
};

ShardedGpt::ShardedGpt(nn::Gpt& part, ShardGroups groups) : part_(part), spec_(part.spec()), groups_(std::move(groups)) {
  spec_.stage = nn::GptStage{};
  spec_.split = nullptr;
  GRADMESH_CHECK(groups_.control != nullptr && groups_.pp >= 1 && groups_.tp >= 1, "shard groups");
  rank_ = groups_.control->rank();
  world_ = groups_.control->size();
  GRADMESH_CHECK(world_ == groups_.pp * groups_.tp, "the world is pp x tp ranks");
  stage_ = rank_ / groups_.tp;
  shard_ = rank_ % groups_.tp;
  GRADMESH_CHECK(groups_.pp == 1 || (groups_.down && groups_.up && groups_.down->rank() == stage_), "pipeline groups");
  GRADMESH_CHECK(groups_.tp == 1 || (groups_.tp_group && groups_.tp_group->rank() == shard_), "tensor-parallel group");
  if (rank_ == 0 && world_ > 1) keepalive_ = std::thread([this] { keep_alive(); });
}

ShardedGpt::~ShardedGpt() {
  try {
    stop();
  } catch (...) {
    // A broken group has already failed the other ranks.
  }
}

void ShardedGpt::keep_alive() {
  std::unique_lock<std::mutex> lock(keepalive_mutex_);
  while (!keepalive_stop_) {
    if (keepalive_wake_.wait_for(lock, std::chrono::hours(1), [&] { return keepalive_stop_; })) return;
    lock.unlock();
    try {
      Command c;
      c.op = kKeepAlive;
      issue(c);
    } catch (...) {
      return;  // the group is broken: requests fail with its error
    }
    lock.lock();
  }
}

Tensor ShardedGpt::forward(const Tensor& rows) {
  GRADMESH_CHECK(rows.ndim() == 2, "token rows [n, T]");
  Command c;
  c.op = kForward;
  c.n = rows.dim(0);
  c.t = rows.dim(1);
  c.payload.resize(static_cast<size_t>(rows.numel()));
  for (int64_t i = 0; i < rows.numel(); ++i) c.payload[static_cast<size_t>(i)] = static_cast<int32_t>(rows.data()[i]);
  return issue(c);
}

Tensor ShardedGpt::step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& slots,
                        const std::vector<int64_t>& positions) {
  GRADMESH_CHECK(tokens.size() == slots.size() && slots.size() == positions.size() && !tokens.empty(),
                 "one slot and position per token");
  Command c;
  c.op = kStep;
  c.n = static_cast<int64_t>(tokens.size());
  for (const auto* list : {&tokens, &slots, &positions})
    for (int64_t v : *list) c.payload.push_back(static_cast<int32_t>(v));
  return issue(c);
}

void ShardedGpt::release(int64_t slot) {
  Command c;
  c.op = kRelease;
  c.n = 1;
  c.payload = {static_cast<int32_t>(slot)};
  issue(c);
}

void ShardedGpt::stop() {
  if (rank_ != 0) return;
  {
    std::lock_guard<std::mutex> lock(keepalive_mutex_);
    keepalive_stop_ = true;
  }
  keepalive_wake_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  std::lock_guard<std::mutex> lock(issue_mutex_);
  if (stopped_) return;
  stopped_ = true;
  const Tensor header = pack({kStop, 0, 0, 0});
  std::vector<std::shared_ptr<comm::Work>> sends;
  for (int r = 1; r < world_; ++r) sends.push_back(groups_.control->send(header, r, 0));
  for (auto& w : sends) w->wait_or_throw();
  leave_together();
}

// After the stop command every rank meets once more before it leaves: a rank
// that left (destroying its groups) while another still waited for its stop
// command would fail that wait, and the server's clean exit with it.
void ShardedGpt::leave_together() {
  groups_.control->barrier()->wait_or_throw();
}

Tensor ShardedGpt::issue(const Command& c) {
  GRADMESH_CHECK(rank_ == 0, "commands are issued by rank 0");
  std::unique_lock<std::mutex> lock(issue_mutex_);
  if (stopped_) throw_error(ErrorKind::kUsage, "sharded model", "has stopped");
  const Tensor header = pack({c.op, static_cast<int32_t>(c.n), static_cast<int32_t>(c.t),
                              static_cast<int32_t>(c.payload.size())});
  const Tensor payload = pack(c.payload);
  std::vector<std::shared_ptr<comm::Work>> sends;
  for (int r = 1; r < world_; ++r) {
    sends.push_back(groups_.control->send(header, r, 0));
    if (!c.payload.empty()) sends.push_back(groups_.control->send(payload, r, 0));
  }
  Tensor result = execute(c);
  std::shared_ptr<comm::Work> back;
  if (groups_.pp > 1 && (c.op == kForward || c.op == kStep)) {
    // Posted before the next command can be issued, so results come back
    // to their callers in issue order; waited for outside the lock.
    result = Tensor::empty({c.n, spec_.vocab_size});
    comm::CollectiveOptions queued;
    queued.background = true;  // on the group's thread even when small: never inline, holding the lock
    back = groups_.up->recv(result, groups_.pp - 1, 0, queued);
  }
  for (auto& w : sends) w->wait_or_throw();
  lock.unlock();
  if (back) back->wait_or_throw();
  return result;
}

void ShardedGpt::follow() {
  GRADMESH_CHECK(rank_ != 0, "rank 0 leads");
  for (;;) {
    Tensor header = Tensor::empty({kHeaderWords});
    comm::CollectiveOptions wait_long;
    wait_long.timeout = kCommandTimeout;
    groups_.control->recv(header, 0, 0, wait_long)->wait_or_throw(kCommandTimeout);
    const std::vector<int32_t> h = unpack(header, kHeaderWords);
    Command c;
    c.op = h[0];
    c.n = h[1];
    c.t = h[2];
    if (c.op == kStop) return leave_together();
    if (h[3] > 0) {
      Tensor payload = Tensor::empty({h[3]});
      groups_.control->recv(payload, 0, 0)->wait_or_throw();
      c.payload = unpack(payload, h[3]);
    }
    execute(c);
  }
}

Tensor ShardedGpt::execute(const Command& c) {
  if (c.op == kKeepAlive) return {};
  if (c.op == kRelease) {
    for (int32_t slot : c.payload) caches_.erase(slot);
    return {};
  }
  GRADMESH_CHECK(c.op == kForward || c.op == kStep, "a known command");
  const bool first = stage_ == 0, last = stage_ == groups_.pp - 1;
  const int64_t n = c.n, t = c.t, width = spec_.n_embd;
  autograd::NoGradGuard no_grad;
  Tensor input;
  if (first) {
    const int64_t tokens = c.op == kForward ? n * t : n;
    input = Tensor::empty(c.op == kForward ? Shape{n, t} : Shape{n});
    for (int64_t i = 0; i < tokens; ++i) input.data()[i] = static_cast<float>(c.payload[static_cast<size_t>(i)]);
  } else {
    input = Tensor::empty(c.op == kForward ? Shape{n, t, width} : Shape{n, width});
    groups_.down->recv(input, stage_ - 1, 0)->wait_or_throw();
  }
  Tensor out;
  if (c.op == kForward) {
    out = part_.forward(autograd::Variable(input)).value();
  } else {
    std::vector<int64_t> slots(c.payload.begin() + n, c.payload.begin() + 2 * n);
    std::vector<int64_t> positions(c.payload.begin() + 2 * n, c.payload.begin() + 3 * n);
    out = part_.decode_stage(input, caches_at(part_, caches_, slots, positions));
  }
  if (!last) {
    comm::CollectiveOptions queued;
    queued.background = true;
    groups_.down->send(out, stage_ + 1, 0, queued)->wait_or_throw();
    return {};
  }
  Tensor logits = whole_logits(c.op == kForward ? nn::last_positions(out, n, t) : out);
  if (groups_.pp > 1 && shard_ == 0) groups_.up->send(logits, 0, 0)->wait_or_throw();
  return logits;
}

Tensor ShardedGpt::whole_logits(const Tensor& local) {
  if (groups_.tp == 1) return local;
  // The vocabulary is split in balanced parts (the first vocab % tp one
  // column wider): each shard pads its part to the widest for the all-gather.
  const int64_t n = local.dim(0), vocab = spec_.vocab_size, tp = groups_.tp;
  const int64_t widest = parallel::balanced_part(vocab, groups_.tp, 0).second;
  Tensor padded = Tensor::zeros({n, widest});
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(padded.data() + i * widest, local.data() + i * local.dim(1), static_cast<size_t>(local.dim(1)) * sizeof(float));
  Tensor all = Tensor::empty({tp * n * widest});
  groups_.tp_group->allgather(padded, all)->wait_or_throw();
  Tensor whole = Tensor::empty({n, vocab});
  for (int s = 0; s < groups_.tp; ++s) {
    const auto [begin, end] = parallel::balanced_part(vocab, groups_.tp, s);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(whole.data() + i * vocab + begin, all.data() + (s * n + i) * widest,
                  static_cast<size_t>(end - begin) * sizeof(float));
  }
  return whole;
}

}  // namespace gradmesh::serve
