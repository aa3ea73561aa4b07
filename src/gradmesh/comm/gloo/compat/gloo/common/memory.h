// Stand-in for <gloo/common/memory.h>, which Debian's libgloo-dev does not
// install although <gloo/transport/tcp/pair.h> includes it. CMake puts this
// folder on the include path of transport_access.cc only, and only when the
// real header is missing.
//
// transport_access.cc reads one member of tcp::Pair (its socket) and never
// creates, copies or calls anything declared here, so declarations suffice.
// Each class holds what the library's holds (one shared_ptr or weak_ptr), so
// the classes that contain them keep the library's size and layout.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr final {
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
  std::weak_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr final {
  std::shared_ptr<T> ptr_;
};

}  // namespace gloo
