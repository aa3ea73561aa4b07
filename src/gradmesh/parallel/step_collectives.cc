#include "gradmesh/parallel/step_collectives.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {

void wait_for_collective(comm::Work& work, const std::optional<comm::Millis>& timeout,
                         const std::string& what_expired) {
  bool done = timeout ? work.wait(*timeout) : false;
  // No timeout of the reducer's own: the group's applies, and the group fails the Work when it expires.
  while (!timeout && !done) done = work.wait(comm::kDefaultTimeout);
  if (!done) throw_error(ErrorKind::kTimeout, work.description(), what_expired);
}

std::vector<float> gather_step_losses(comm::ProcessGroup& group, double loss,
                                      const std::optional<comm::Millis>& timeout) {
  constexpr float kMax = std::numeric_limits<float>::max();
  const float mine =
      std::isfinite(loss) ? static_cast<float>(std::clamp<double>(loss, -kMax, kMax)) : static_cast<float>(loss);
  Tensor in = Tensor::from_vector({1}, {mine});
  Tensor out = Tensor::empty({group.size()}, DType::kF32);
  comm::CollectiveOptions options;
  options.timeout = timeout;
  wait_for_collective(*group.allgather(in, out, options), timeout,
                      "the step losses were not gathered within the timeout");
  return out.to_vector();
}

}  // namespace gradmesh::parallel
