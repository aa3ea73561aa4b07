#include "gradmesh/pytorch/group_factory.h"

#include <unistd.h>

#include <algorithm>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/pytorch/process_group.h"
#include "gradmesh/pytorch/store_bridge.h"

namespace gradmesh::pytorch {
namespace {

std::string this_host() {
  const std::optional<int64_t> node = env_int("GROUP_RANK", 0, 1'000'000);
  if (node) return "node " + std::to_string(*node);
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return std::string("host ") + name;
}

struct Placement {
  int local_rank = 0, local_size = 1;
  bool one_host = true;
  bool host_major = true;  // every host holds local_size consecutive ranks
};

Placement place(comm::Store& store, int rank, int size, comm::Millis timeout) {
  const std::string mine = this_host();
  store.set("gradmesh/host/" + std::to_string(rank), mine);
  std::vector<std::string> hosts(size);
  for (int r = 0; r < size; ++r) hosts[r] = store.get("gradmesh/host/" + std::to_string(r), timeout);
  Placement p;
  p.local_size = static_cast<int>(std::count(hosts.begin(), hosts.end(), mine));
  p.local_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + rank, mine));
  p.one_host = p.local_size == size;
  // From the whole list, which every rank sees alike, so all choose alike:
  // every host holds local_size consecutive ranks.
  for (int r = 0; r < size; ++r) {
    const auto on_host = static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[r]));
    if (on_host != p.local_size || size % p.local_size != 0 || hosts[r] != hosts[r - r % p.local_size])
      p.host_major = false;
  }
  return p;
}

std::string pick_backend(const Placement& p) {
  const std::string requested = env_string("GRADMESH_BACKEND");
  if (requested == "mpi")
    throw_error(ErrorKind::kUsage, "GRADMESH_BACKEND=mpi",
                "is not offered to torch.distributed (MPI's world cannot follow torch's subgroups); use shm, gloo "
                "or hier");
  if (!requested.empty() && requested != "auto") return requested;
  if (p.one_host) return "shm";
  return p.local_size > 1 && p.host_major ? "hier" : "gloo";
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> make_group(const GroupRequest& request) {
  auto store = std::make_shared<comm::PrefixStore>(bridge_store(request.store), "gradmesh");
  const comm::Millis timeout(request.timeout.count());
  const Placement placement = place(*store, request.rank, request.size, timeout);
  comm::ProcessGroupOptions options;
  options.backend = pick_backend(placement);
  options.timeout = timeout;
  options.check = request.check;
  options.local_rank = placement.local_rank;
  options.local_size = placement.local_size;
  auto group = comm::create_process_group(store, request.rank, request.size, options);
  std::shared_ptr<comm::ProcessGroup> messages = group;
  if (options.backend == "shm") {  // shm's messages queue behind its collectives (process_group.h)
    comm::ProcessGroupOptions gloo = options;
    gloo.backend = "gloo";
    gloo.check = false;
    gloo.lazy_connections = true;
    messages = comm::create_process_group(std::make_shared<comm::PrefixStore>(store, "messages"), request.rank,
                                          request.size, gloo);
  }
  std::vector<int> world = request.world_ranks;
  if (world.empty())
    for (int r = 0; r < request.size; ++r) world.push_back(r);
  return c10::make_intrusive<GradmeshProcessGroup>(std::move(group), std::move(messages), std::move(world));
}

}  // namespace gradmesh::pytorch
