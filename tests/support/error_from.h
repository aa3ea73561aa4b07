// Test support: the gradmesh::Error a call throws, for checking its kind and
// message; the test fails when it throws none.
#pragma once

#include <gtest/gtest.h>

#include "gradmesh/core/error.h"

namespace gradmesh::testing {

template <typename Body>
Error error_from(Body body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a gradmesh::Error";
  return Error(ErrorKind::kInternal, "no error");
}

}  // namespace gradmesh::testing
