// Test support for the gloo tests: process group options for ranks that all
// run on this host and connect over 127.0.0.1.
#pragma once

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm::testing {

inline ProcessGroupOptions loopback(Millis timeout = Millis(20'000)) {
  ProcessGroupOptions options;
  options.backend = "gloo";
  options.hostname = "127.0.0.1";
  options.timeout = timeout;
  return options;
}

}  // namespace gradmesh::comm::testing
