// The small collectives both gradient reducers (plain and ZeRO) run around a
// step, in one place so their timeouts and messages agree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::parallel {

// Waits for `work`: up to `timeout` when set; otherwise until it completes
// or the group fails it (the group's own timeout applies). Error(kTimeout)
// naming the operation and saying `what_expired` when `timeout` runs out.
void wait_for_collective(comm::Work& work, const std::optional<comm::Millis>& timeout,
                         const std::string& what_expired);

// Collective: every rank's step loss in rank order, non-finite ones as NaN
// or +-inf, finite ones clamped to the float range.
std::vector<float> gather_step_losses(comm::ProcessGroup& group, double loss,
                                      const std::optional<comm::Millis>& timeout);

}  // namespace gradmesh::parallel
