#include "gradmesh/parallel/mesh.h"

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {
namespace {

std::string list_text(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? " " : "") + std::to_string(ranks[i]);
  return out + "]";
}

int dim_size(const MeshShape& s, MeshDim dim) {
  switch (dim) {
    case MeshDim::kDp: return s.dp;
    case MeshDim::kPp: return s.pp;
    case MeshDim::kTp: return s.tp;
  }
  return 1;
}

int& dim_index(MeshCoord& c, MeshDim dim) {
  switch (dim) {
    case MeshDim::kDp: return c.dp;
    case MeshDim::kPp: return c.pp;
    case MeshDim::kTp: break;
  }
  return c.tp;
}

}  // namespace

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::kDp: return "dp";
    case MeshDim::kPp: return "pp";
    case MeshDim::kTp: return "tp";
  }
  return "?";
}

MeshShape resolve_mesh_shape(int dp, int pp, int tp, int world, const std::string& key) {
  const std::string given = "{ dp = " + std::to_string(dp) + ", pp = " + std::to_string(pp) +
                            ", tp = " + std::to_string(tp) + " }";
  if (dp < 0 || pp < 1 || tp < 1)
    throw_error(ErrorKind::kConfig, key,
                "expected pp >= 1, tp >= 1 and dp >= 0 (0: the world size over pp x tp), got " + given);
  if (dp == 0) {
    if (world % (pp * tp) != 0)
      throw_error(ErrorKind::kConfig, key,
                  given + ": pp x tp = " + std::to_string(pp * tp) + " does not divide the world size " +
                      std::to_string(world));
    dp = world / (pp * tp);
  }
  const MeshShape shape{dp, pp, tp};
  if (static_cast<int64_t>(dp) * pp * tp != world)
    throw_error(ErrorKind::kConfig, key,
                given + ": dp x pp x tp = " + std::to_string(static_cast<int64_t>(dp) * pp * tp) +
                    " must equal the world size " + std::to_string(world) +
                    " (set dp = 0 to take what pp x tp leave, or start as many workers)");
  return shape;
}

DeviceMesh::DeviceMesh(MeshShape shape) : shape_(shape) {
  GRADMESH_CHECK(shape.dp >= 1 && shape.pp >= 1 && shape.tp >= 1, "a mesh dimension below 1");
}

MeshCoord DeviceMesh::coord(int rank) const {
  GRADMESH_CHECK(rank >= 0 && rank < size(), "rank outside the mesh");
  return {rank / (shape_.pp * shape_.tp), (rank / shape_.tp) % shape_.pp, rank % shape_.tp};
}

int DeviceMesh::rank(const MeshCoord& c) const {
  GRADMESH_CHECK(c.dp >= 0 && c.dp < shape_.dp && c.pp >= 0 && c.pp < shape_.pp && c.tp >= 0 && c.tp < shape_.tp,
                 "coordinate outside the mesh");
  return (c.dp * shape_.pp + c.pp) * shape_.tp + c.tp;
}

std::vector<int> DeviceMesh::group_ranks(MeshDim dim, int member) const {
  MeshCoord c = coord(member);
  std::vector<int> ranks;
  for (int i = 0; i < dim_size(shape_, dim); ++i) {
    dim_index(c, dim) = i;
    ranks.push_back(rank(c));
  }
  return ranks;
}

std::vector<std::vector<int>> DeviceMesh::all_groups(MeshDim dim) const {
  // Each group once, in the order of its lowest rank.
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < size(); ++r) {
    MeshCoord c = coord(r);
    if (dim_index(c, dim) == 0) groups.push_back(group_ranks(dim, r));
  }
  return groups;
}

std::string DeviceMesh::describe() const {
  std::string out = "dp " + std::to_string(shape_.dp) + " x pp " + std::to_string(shape_.pp) + " x tp " +
                    std::to_string(shape_.tp) + " = " + std::to_string(size()) +
                    (size() == 1 ? " rank" : " ranks") + " (tp fastest, then pp, then dp)";
  for (MeshDim dim : {MeshDim::kTp, MeshDim::kPp, MeshDim::kDp}) {
    if (dim_size(shape_, dim) == 1) continue;
    const std::vector<std::vector<int>> groups = all_groups(dim);
    out += std::string("\n  ") + mesh_dim_name(dim) + " groups:";
    // Past a few dozen groups the list says nothing a reader can use; the rule above does.
    const size_t shown = std::min<size_t>(groups.size(), 16);
    for (size_t g = 0; g < shown; ++g) out += " " + list_text(groups[g]);
    if (shown < groups.size()) out += " ... (" + std::to_string(groups.size()) + " groups)";
  }
  return out;
}

const std::shared_ptr<comm::ProcessGroup>& MeshGroups::of(MeshDim dim) const {
  switch (dim) {
    case MeshDim::kDp: return dp;
    case MeshDim::kPp: return pp;
    case MeshDim::kTp: break;
  }
  return tp;
}

MeshGroups create_mesh_groups(const std::shared_ptr<comm::ProcessGroup>& world, const DeviceMesh& mesh) {
  GRADMESH_CHECK(world != nullptr, "create_mesh_groups without a world group");
  if (world->size() != mesh.size())
    throw_error(ErrorKind::kUsage, "device mesh",
                "the mesh has " + std::to_string(mesh.size()) + " ranks, the process group " +
                    std::to_string(world->size()));
  MeshGroups groups;
  for (MeshDim dim : {MeshDim::kTp, MeshDim::kPp, MeshDim::kDp}) {
    std::shared_ptr<comm::ProcessGroup> mine;
    if (dim_size(mesh.shape(), dim) == mesh.size()) {
      mine = world;  // the whole world along this dimension: no new group
    } else {
      // Every rank creates every group of this dimension, in the same order.
      for (const std::vector<int>& ranks : mesh.all_groups(dim))
        if (auto g = world->new_group(ranks)) mine = std::move(g);
    }
    GRADMESH_CHECK(mine != nullptr, std::string("no ") + mesh_dim_name(dim) + " group holds this rank");
    (dim == MeshDim::kDp ? groups.dp : dim == MeshDim::kPp ? groups.pp : groups.tp) = std::move(mine);
  }
  const int replica = mesh.shape().pp * mesh.shape().tp;
  if (replica == mesh.size()) {
    groups.model = world;
  } else if (replica == mesh.shape().tp) {
    groups.model = groups.tp;  // pp = 1
  } else if (replica == mesh.shape().pp) {
    groups.model = groups.pp;  // tp = 1
  } else {
    for (int dp = 0; dp < mesh.shape().dp; ++dp) {
      std::vector<int> ranks(static_cast<size_t>(replica));
      for (int i = 0; i < replica; ++i) ranks[static_cast<size_t>(i)] = dp * replica + i;
      if (auto g = world->new_group(ranks)) groups.model = std::move(g);
    }
  }
  GRADMESH_CHECK(groups.model != nullptr, "no model group holds this rank");
  return groups;
}

}  // namespace gradmesh::parallel
