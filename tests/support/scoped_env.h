// Test support: an environment variable set (or unset) for one scope.
#pragma once

#include <stdlib.h>

#include <optional>
#include <string>

namespace gradmesh::testing {

// Sets `name` to `value` (nullptr: unsets it) and restores the old value on
// destruction. The environment is process-wide: use it on the test's thread
// only, before starting threads that read the variable.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace gradmesh::testing
