// DeviceMesh: the world's ranks laid out as dp x pp x tp (data, pipeline and
// tensor parallelism), and the process groups of each dimension.
//
// Ranks are numbered with tp fastest, then pp, then dp, as Megatron-LM does:
//
//   rank = (dp_index * pp + pp_index) * tp + tp_index
//
// so the ranks of one tensor-parallel group (the chattiest: two all-reduces
// per layer) are neighbours, which puts them on one host whenever a host's
// ranks are consecutive, as `gradmesh launch` numbers them. A rank's groups:
//
//   tp group: same (dp, pp), every tp index   -> the split layers' all-reduces
//   pp group: same (dp, tp), every pp index   -> activations between stages
//   dp group: same (pp, tp), every dp index   -> gradient reduction, ZeRO
//
// With pp = tp = 1 the dp group is the whole world: data parallelism as before.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::parallel {

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;
  int size() const { return dp * pp * tp; }
  bool operator==(const MeshShape&) const = default;
};

struct MeshCoord {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

enum class MeshDim { kDp, kPp, kTp };
const char* mesh_dim_name(MeshDim dim);  // "dp", "pp", "tp"

// The shape for `world` ranks from the configured sizes; 0 for dp means "the
// world divided by pp x tp". Error(kConfig) naming `key` (e.g. "parallel.mesh")
// when a size is negative, pp or tp is 0, or the product is not the world size.
MeshShape resolve_mesh_shape(int dp, int pp, int tp, int world, const std::string& key);

class DeviceMesh {
 public:
  explicit DeviceMesh(MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int size() const { return shape_.size(); }
  MeshCoord coord(int rank) const;
  int rank(const MeshCoord& coord) const;

  // The world ranks of `rank`'s group along `dim`, ascending (their position
  // is the rank's index along `dim`).
  std::vector<int> group_ranks(MeshDim dim, int rank) const;
  // Every group along `dim`, in a fixed order (what each rank creates).
  std::vector<std::vector<int>> all_groups(MeshDim dim) const;

  // "dp 2 x pp 2 x tp 1 = 4 ranks (tp fastest, then pp, then dp)" and one line
  // per dimension with more than one index listing its groups.
  std::string describe() const;

 private:
  MeshShape shape_;
};

// The groups `rank` belongs to; a dimension of size 1 still gets a group (of
// one rank), so callers never branch on the layout.
struct MeshGroups {
  std::shared_ptr<comm::ProcessGroup> dp, pp, tp;
  // Same dp index, every (pp, tp): the ranks that together hold one replica
  // of the model (Megatron's model-parallel group). With pp = tp = 1 it is
  // the rank alone; when it spans the world it is the world.
  std::shared_ptr<comm::ProcessGroup> model;
  const std::shared_ptr<comm::ProcessGroup>& of(MeshDim dim) const;
};

// Collective over `world`: every rank creates every group of every dimension
// in the same order (comm::ProcessGroup::new_group) and keeps its own. When
// the mesh is the world along one dimension, that group is `world` itself.
MeshGroups create_mesh_groups(const std::shared_ptr<comm::ProcessGroup>& world, const DeviceMesh& mesh);

}  // namespace gradmesh::parallel
