// DeviceMesh: Megatron's rank order (tp fastest, then pp, then dp), the
// groups of each dimension, the shape check, and real groups created over
// shm and gloo (ranks as threads): an all-reduce on each group sums exactly
// its members, and point-to-point along the pipeline reaches the next stage.
#include <gtest/gtest.h>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/parallel/mesh.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

TEST(DeviceMesh, TensorParallelIsFastestThenPipelineThenData) {
  const DeviceMesh mesh(MeshShape{2, 2, 2});
  EXPECT_EQ(mesh.coord(0), (MeshCoord{0, 0, 0}));
  EXPECT_EQ(mesh.coord(1), (MeshCoord{0, 0, 1}));
  EXPECT_EQ(mesh.coord(2), (MeshCoord{0, 1, 0}));
  EXPECT_EQ(mesh.coord(5), (MeshCoord{1, 0, 1}));
  EXPECT_EQ(mesh.coord(7), (MeshCoord{1, 1, 1}));
  for (int r = 0; r < mesh.size(); ++r) EXPECT_EQ(mesh.rank(mesh.coord(r)), r);
  EXPECT_EQ(mesh.group_ranks(MeshDim::kTp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.group_ranks(MeshDim::kPp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.group_ranks(MeshDim::kDp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(mesh.all_groups(MeshDim::kDp),
            (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh.all_groups(MeshDim::kPp), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh.all_groups(MeshDim::kTp), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_THROW(mesh.coord(8), Error);
}

TEST(DeviceMesh, EveryRankIsInExactlyOneGroupOfEachDimension) {
  for (const MeshShape shape : {MeshShape{1, 1, 1}, MeshShape{4, 1, 1}, MeshShape{1, 3, 2}, MeshShape{3, 2, 2}}) {
    const DeviceMesh mesh(shape);
    for (MeshDim dim : {MeshDim::kDp, MeshDim::kPp, MeshDim::kTp}) {
      std::vector<int> seen(mesh.size(), 0);
      for (const auto& group : mesh.all_groups(dim))
        for (int r : group) ++seen[r];
      EXPECT_EQ(seen, std::vector<int>(mesh.size(), 1)) << mesh.describe() << " " << mesh_dim_name(dim);
    }
  }
}

TEST(DeviceMesh, DescribeNamesTheShapeAndTheGroups) {
  const std::string text = DeviceMesh(MeshShape{2, 2, 1}).describe();
  EXPECT_NE(text.find("dp 2 x pp 2 x tp 1 = 4 ranks (tp fastest, then pp, then dp)"), std::string::npos) << text;
  EXPECT_NE(text.find("pp groups: [0 1] [2 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("dp groups: [0 2] [1 3]"), std::string::npos) << text;
  EXPECT_EQ(text.find("tp groups"), std::string::npos) << text;  // a dimension of 1 is not listed
}

TEST(MeshShapeCheck, DataParallelTakesWhatIsLeftAndAWrongProductIsNamed) {
  EXPECT_EQ(resolve_mesh_shape(0, 2, 1, 4, "parallel.mesh"), (MeshShape{2, 2, 1}));
  EXPECT_EQ(resolve_mesh_shape(0, 1, 1, 3, "parallel.mesh"), (MeshShape{3, 1, 1}));
  EXPECT_EQ(resolve_mesh_shape(1, 2, 2, 4, "parallel.mesh"), (MeshShape{1, 2, 2}));
  auto message = [](int dp, int pp, int tp, int world) {
    try {
      resolve_mesh_shape(dp, pp, tp, world, "parallel.mesh");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(2, 2, 2, 4).find("dp x pp x tp = 8 must equal the world size 4"), std::string::npos);
  EXPECT_NE(message(0, 3, 1, 4).find("pp x tp = 3 does not divide the world size 4"), std::string::npos);
  EXPECT_NE(message(1, 0, 1, 1).find("expected pp >= 1, tp >= 1 and dp >= 0"), std::string::npos);
  EXPECT_NE(message(-1, 1, 1, 1).find("parallel.mesh"), std::string::npos);
}

using GroupFactory = std::function<std::shared_ptr<comm::ProcessGroup>(std::shared_ptr<comm::Store>, int, int)>;

// Every shape of 4 ranks: each rank all-reduces its world rank over each of
// its groups (the sum names exactly the members) and passes a tensor to the
// next pipeline stage.
std::string check_mesh_groups(const GroupFactory& make_world,
                              const std::vector<MeshShape>& shapes = {
                                  {4, 1, 1}, {1, 4, 1}, {1, 1, 4}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}}) {
  const int size = shapes.front().size();
  ::gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<std::string> failures(static_cast<size_t>(size));
  const auto errors = comm::testing::run_rank_threads(size, [&](int rank) {
    auto world = make_world(store, rank, size);
    for (const MeshShape& shape : shapes) {
      const DeviceMesh mesh(shape);
      const MeshGroups groups = create_mesh_groups(world, mesh);
      for (MeshDim dim : {MeshDim::kDp, MeshDim::kPp, MeshDim::kTp}) {
        const std::vector<int> members = mesh.group_ranks(dim, rank);
        const auto& group = groups.of(dim);
        float expected = 0;
        for (int m : members) expected += static_cast<float>(m);
        Tensor t = Tensor::full({3}, static_cast<float>(rank));
        group->allreduce(t)->wait_or_throw();
        if (group->size() != static_cast<int>(members.size()) || t.to_vector()[2] != expected)
          failures[rank] = mesh.describe() + ": " + mesh_dim_name(dim) + " group of rank " + std::to_string(rank) +
                           " summed " + std::to_string(t.to_vector()[2]) + ", expected " + std::to_string(expected);
      }
      {
        // The model group: every (pp, tp) of this rank's dp index.
        const int replica = shape.pp * shape.tp, first = mesh.coord(rank).dp * replica;
        const float expected = static_cast<float>(replica * first + replica * (replica - 1) / 2);
        Tensor t = Tensor::full({2}, static_cast<float>(rank));
        groups.model->allreduce(t)->wait_or_throw();
        if (groups.model->size() != replica || t.to_vector()[1] != expected)
          failures[rank] = mesh.describe() + ": model group of rank " + std::to_string(rank) + " summed " +
                           std::to_string(t.to_vector()[1]) + ", expected " + std::to_string(expected);
      }
      // Along the pipeline: stage s sends its world rank to stage s + 1.
      const int stage = mesh.coord(rank).pp, stages = shape.pp;
      if (stages > 1) {
        Tensor out = Tensor::full({5}, static_cast<float>(rank)), in = Tensor::zeros({5});
        if (stage + 1 < stages) groups.pp->send(out, stage + 1, /*tag=*/stage)->wait_or_throw();
        if (stage > 0) {
          groups.pp->recv(in, stage - 1, /*tag=*/stage - 1)->wait_or_throw();
          const int sender = mesh.group_ranks(MeshDim::kPp, rank)[static_cast<size_t>(stage - 1)];
          if (in.to_vector()[4] != static_cast<float>(sender))
            failures[rank] = mesh.describe() + ": stage " + std::to_string(stage) + " received " +
                             std::to_string(in.to_vector()[4]) + " from rank " + std::to_string(sender);
        }
      }
      world->barrier()->wait_or_throw();
    }
  });
  return comm::testing::join_errors(errors) + comm::testing::join_errors(failures);
}

TEST(MeshGroups, ShmGroupsOfEveryShapeOfFourRanks) {
  EXPECT_EQ(check_mesh_groups([](std::shared_ptr<comm::Store> store, int rank, int world) {
              return comm::make_shm_process_group(std::move(store), rank, world, comm::Millis(20'000));
            }),
            "");
}

// Eight ranks as dp 2 x pp 2 x tp 2: the one shape whose model groups are
// neither the world nor a tp or pp group.
TEST(MeshGroups, ShmGroupsOfEightRanksInThreeDimensions) {
  EXPECT_EQ(check_mesh_groups(
                [](std::shared_ptr<comm::Store> store, int rank, int world) {
                  return comm::make_shm_process_group(std::move(store), rank, world, comm::Millis(20'000));
                },
                {{2, 2, 2}}),
            "");
}

TEST(MeshGroups, GlooGroupsOfEveryShapeOfFourRanks) {
  EXPECT_EQ(check_mesh_groups([](std::shared_ptr<comm::Store> store, int rank, int world) {
              comm::ProcessGroupOptions o;
              o.timeout = comm::Millis(20'000);
              o.backend = "gloo";
              o.hostname = "127.0.0.1";
              return comm::make_gloo_process_group(std::move(store), rank, world, o);
            }),
            "");
}

}  // namespace
}  // namespace gradmesh::parallel
