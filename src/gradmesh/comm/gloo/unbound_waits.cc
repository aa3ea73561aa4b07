#include "gradmesh/comm/gloo/unbound_waits.h"

#include <mutex>
#include <vector>

namespace gradmesh::comm::gloo_backend {

void park_for_process_lifetime(std::initializer_list<std::unique_ptr<gloo::transport::UnboundBuffer>*> buffers) {
  static std::mutex mutex;
  // Never destroyed: not even at exit, when the loop thread may still run.
  static auto* parked = new std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>();
  std::lock_guard<std::mutex> lock(mutex);
  for (auto* buffer : buffers)
    if (*buffer) parked->push_back(std::move(*buffer));
}

}  // namespace gradmesh::comm::gloo_backend
