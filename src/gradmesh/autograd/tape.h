// The tape: ops in the order they ran, replayed backwards.
//
// Each recorded op holds its inputs, its output and a backward closure that
// reads the output's gradient and writes its inputs' gradients. Running the
// closures in reverse order is a valid topological order because an op can
// only read Variables that existed before it ran.
//
// "Gradient final" events: every parameter counts the recorded ops that read
// it. When the last of them has run backward, the parameter's gradient can
// no longer change, and backward() calls the hook with its index at once —
// while earlier layers are still being differentiated. The data-parallel
// reducer starts the all-reduce of a bucket from this event.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "gradmesh/autograd/variable.h"

namespace gradmesh::autograd {

using GradReadyHook = std::function<void(int param_index)>;

class Tape {
 public:
  // Records an op. `inputs` are the Variables whose gradients `backward` may write.
  void record(std::vector<std::shared_ptr<VariableState>> inputs, std::shared_ptr<VariableState> output,
              std::function<void()> backward);

  // d(loss)/d(loss) = 1, then every recorded op backwards. `hook` (may be empty)
  // fires once per parameter whose gradient became final. Clears the tape.
  // REQUIRES: loss is a scalar recorded on this tape.
  void backward(const Variable& loss, const GradReadyHook& hook = {});

  // Records `hook` to run when backward reaches this point of the tape,
  // whether or not any gradient flows there (unit hooks of ZeRO stage 3).
  void record_hook(std::function<void()> hook);

  // Backpropagates from a non-scalar `output` recorded on this tape whose
  // gradient is `grad` (a recomputed piece of a larger graph: see
  // checkpoint.h). Parameter use counts go down as in backward(), without
  // firing any hook, so the enclosing tape still sees its own uses. Clears the tape.
  void backward_from(const Variable& output, const Tensor& grad);

  void clear();
  size_t size() const { return ops_.size(); }

 private:
  struct Op {
    std::vector<std::shared_ptr<VariableState>> inputs;
    std::shared_ptr<VariableState> output;
    std::function<void()> backward;
    bool always = false;  // a hook: runs even when no gradient reached `output`
  };
  void run_backward(const GradReadyHook& hook);
  std::vector<Op> ops_;
};

// The tape ops record on (thread-local; one per training thread).
Tape& current_tape();

// Makes `tape` the current tape of this thread until destroyed.
class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

// Whether ops record at all (false inside a NoGradGuard: evaluation).
bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when an op with these inputs must record (grad enabled and any input requires grad).
bool should_record(std::initializer_list<const Variable*> inputs);

}  // namespace gradmesh::autograd
