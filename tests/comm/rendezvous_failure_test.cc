// The hint a failed Gloo rendezvous carries: what ran out, with the numbers.
#include <gtest/gtest.h>

#include <fstream>

#include "gradmesh/comm/gloo/rendezvous_failure.h"
#include "support/temp_dir.h"

namespace gradmesh::comm::gloo_backend {
namespace {

TEST(RendezvousFailureHint, PortExhaustionNamesTheConnectionsAndTheRange) {
  gradmesh::testing::TempDir dir;
  const std::string range = dir.file("ip_local_port_range");
  std::ofstream(range) << "32768\t60999\n";
  const std::string hint = rendezvous_failure_hint("[tcp/pair.cc:1] bind: Address already in use", 128, 2, range);
  EXPECT_NE(hint.find("ran out of local TCP ports"), std::string::npos) << hint;
  EXPECT_NE(hint.find("other 127 ranks (2 meshes)"), std::string::npos) << hint;
  EXPECT_NE(hint.find("16256 connections"), std::string::npos) << hint;  // 128 * 127 / 2 * 2
  EXPECT_NE(hint.find("28232 ephemeral ports (net.ipv4.ip_local_port_range 32768-60999)"), std::string::npos) << hint;
  EXPECT_NE(hint.find("hier backend"), std::string::npos) << hint;
  EXPECT_NE(hint.find("GRADMESH_GLOO_LAZY=1"), std::string::npos) << hint;
  // connect() can fail the same way; an unreadable range is said so.
  const std::string other = rendezvous_failure_hint("connect: Cannot assign requested address", 4, 1, dir.file("none"));
  EXPECT_NE(other.find("6 connections"), std::string::npos) << other;
  EXPECT_NE(other.find("did not report"), std::string::npos) << other;
}

TEST(RendezvousFailureHint, DescriptorExhaustionNamesTheLimit) {
  const std::string hint = rendezvous_failure_hint("socket: Too many open files", 300, 1);
  EXPECT_NE(hint.find("file descriptors (RLIMIT_NOFILE"), std::string::npos) << hint;
  EXPECT_NE(hint.find("299 here"), std::string::npos) << hint;
}

TEST(RendezvousFailureHint, OtherFailuresPointAtReachability) {
  const std::string hint = rendezvous_failure_hint("connect: Connection refused", 2, 2);
  EXPECT_NE(hint.find("GRADMESH_HOSTNAME"), std::string::npos) << hint;
  EXPECT_EQ(hint.find("ran out"), std::string::npos) << hint;
}

}  // namespace
}  // namespace gradmesh::comm::gloo_backend
