#include "gradmesh/core/error.h"

namespace gradmesh {

void throw_error(ErrorKind kind, const std::string& where, const std::string& what) {
  throw Error(kind, where.empty() ? what : where + ": " + what);
}

}  // namespace gradmesh
