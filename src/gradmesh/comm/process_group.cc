#include "gradmesh/comm/process_group.h"

#include "gradmesh/core/env.h"

namespace gradmesh::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

Millis group_timeout(const ProcessGroupOptions& options) {
  return options.timeout ? *options.timeout : env_comm_timeout();
}

}  // namespace gradmesh::comm
