// Behaviour shared by every optimizer: group validation and determinism
// across compute-pool sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/core/thread_pool.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::optim {
namespace {

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

std::vector<std::pair<const char*, Factory>> factories() {
  return {
      {"sgd", [](std::vector<ParamGroup> g) { return make_sgd(std::move(g), {0.9f, 0.0f, true}); }},
      {"adamw", [](std::vector<ParamGroup> g) { return make_adamw(std::move(g), {}); }},
  };
}

void expect_group_error(const Factory& make, std::vector<ParamGroup> groups, const char* fragment) {
  try {
    make(std::move(groups));
    ADD_FAILURE() << "expected an error mentioning " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Optimizer, InvalidGroupsRejected) {
  for (const auto& [name, make] : factories()) {
    SCOPED_TRACE(name);
    expect_group_error(make, {{-1, 4, 0.0f}}, "offset and count");
    expect_group_error(make, {{0, -4, 0.0f}}, "offset and count");
    expect_group_error(make, {{0, 4, -0.1f}}, "weight_decay");
    expect_group_error(make, {{0, 4, NAN}}, "weight_decay");
    expect_group_error(make, {{0, 4, 0.0f}, {10, 2, 0.0f}, {3, 2, 0.0f}}, "overlaps");
    // An empty group between two overlapping ones must not hide the overlap.
    expect_group_error(make, {{0, 4, 0.0f}, {2, 0, 0.0f}, {3, 2, 0.0f}}, "overlaps");
  }
}

TEST(Optimizer, AdjacentAndEmptyGroupsAccepted) {
  for (const auto& [name, make] : factories()) {
    SCOPED_TRACE(name);
    auto opt = make({{4, 4, 0.0f}, {0, 4, 0.1f}, {2, 0, 0.0f}});
    EXPECT_EQ(opt->state_numel(), 8);
    EXPECT_EQ(opt->span_end(), 8);
    std::vector<float> p(8, 1.0f), g(8, 0.5f);
    opt->step(p.data(), g.data(), 0.1f);
    for (float v : p) EXPECT_LT(v, 1.0f);

    auto none = make({});
    EXPECT_EQ(none->state_numel(), 0);
    none->step(nullptr, nullptr, 0.1f);
    EXPECT_EQ(none->steps_taken(), 1);
  }
}

// Runs `steps` updates over a buffer large enough to be split across the pool.
std::vector<float> run_with_threads(const Factory& make, int threads) {
  resize_compute_pool(threads);
  const int64_t n = 300'001;  // odd, so chunks end mid-vector
  std::vector<float> p(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.001 * i));
  auto opt = make({{7, n - 20, 0.01f}});
  for (int s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = static_cast<float>(std::cos(0.0007 * i + s));
    clip_grad_norm(g.data(), n, 10.0f);
    opt->step(p.data(), g.data(), 0.01f);
  }
  return p;
}

TEST(Optimizer, BitIdenticalAcrossThreadCounts) {
  for (const auto& [name, make] : factories()) {
    SCOPED_TRACE(name);
    const std::vector<float> one = run_with_threads(make, 1);
    const std::vector<float> four = run_with_threads(make, 4);
    const std::vector<float> three = run_with_threads(make, 3);
    EXPECT_EQ(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
  }
  resize_compute_pool(1);
}

}  // namespace
}  // namespace gradmesh::optim
