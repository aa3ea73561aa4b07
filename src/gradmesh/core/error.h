// Errors that carry where they happened and what to try.
//
// Every failure a user can cause (bad config, malformed file, wrong shape)
// is reported as a gradmesh::Error whose message names the file/key/tensor,
// what was expected and what was found. The CLI maps the kind to the exit
// code: kUsage/kConfig -> 2, everything else -> 1.
#pragma once

#include <stdexcept>
#include <string>

namespace gradmesh {

enum class ErrorKind {
  kUsage,     // wrong command line
  kConfig,    // config key missing, wrong type or out of range
  kFormat,    // malformed input file (IDX, safetensors, ...)
  kIo,        // the OS refused (open, read, write, rename)
  kShape,     // tensors that do not fit together
  kTimeout,   // a wait ran past its deadline (store get, collective)
  kComm,      // a peer, server or link failed (refused, closed, wrong password, broken group)
  kInternal,  // a broken invariant: a bug in gradmesh
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  // The process exit code this error should produce (2 for usage/config).
  int exit_code() const { return kind_ == ErrorKind::kUsage || kind_ == ErrorKind::kConfig ? 2 : 1; }

 private:
  ErrorKind kind_;
};

// Builds "<where>: <what>" messages so call sites stay one line.
[[noreturn]] void throw_error(ErrorKind kind, const std::string& where, const std::string& what);

// Invariant check for conditions that only a bug can break.
#define GRADMESH_CHECK(cond, msg)                                                              \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::gradmesh::throw_error(::gradmesh::ErrorKind::kInternal, __FILE__ ":" + std::to_string(__LINE__), \
                              std::string("check failed: " #cond ": ") + (msg));               \
  } while (0)

}  // namespace gradmesh
