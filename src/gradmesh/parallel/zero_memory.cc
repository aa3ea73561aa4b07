#include "gradmesh/parallel/zero_memory.h"

#include <cstdio>

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {

namespace {

constexpr int64_t kValueBytes = 4;  // float32

// X / N rounded up: the elements of X one rank holds when X is sharded.
int64_t per_rank(int64_t elements, int world_size) { return (elements + world_size - 1) / world_size; }

}  // namespace

std::string mib_text(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

int optimizer_state_per_param(const std::string& optimizer, double momentum) {
  if (optimizer == "sgd") return momentum != 0 ? 1 : 0;
  if (optimizer == "adamw") return 2;
  throw_error(ErrorKind::kConfig, "optim.name",
              "unknown optimizer '" + optimizer + "' for the memory estimate; expected \"sgd\" or \"adamw\"");
}

ZeroMemory zero_memory_per_rank(int stage, int64_t num_params, int world_size, int state_per_param) {
  if (stage < 0 || stage > 3)
    throw_error(ErrorKind::kConfig, "parallel.zero", "must be 0, 1, 2 or 3, got " + std::to_string(stage));
  if (num_params < 0 || world_size < 1 || state_per_param < 0)
    throw_error(ErrorKind::kConfig, "zero_memory_per_rank",
                "needs num_params >= 0, world_size >= 1 and state_per_param >= 0, got " +
                    std::to_string(num_params) + ", " + std::to_string(world_size) + " and " +
                    std::to_string(state_per_param));
  const int64_t sharded = per_rank(num_params, world_size);
  ZeroMemory m;
  m.params_bytes = (stage >= 3 ? sharded : num_params) * kValueBytes;
  m.grads_bytes = (stage >= 2 ? sharded : num_params) * kValueBytes;
  m.optimizer_bytes = (stage >= 1 ? sharded : num_params) * state_per_param * kValueBytes;
  return m;
}

std::string describe_zero_memory(const ZeroMemory& memory, int stage, int world_size) {
  return "params " + mib_text(memory.params_bytes) + " + grads " + mib_text(memory.grads_bytes) + " + optimizer " +
         mib_text(memory.optimizer_bytes) + " = " + mib_text(memory.total_bytes()) + " per rank (ZeRO stage " +
         std::to_string(stage) + ", " + std::to_string(world_size) + (world_size == 1 ? " rank)" : " ranks)");
}

}  // namespace gradmesh::parallel
