// Small text helpers shared by the gloo backend's error messages.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "gradmesh/comm/store.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh::comm::gloo_backend {

// "f32 x 1000003".
inline std::string tensor_text(const Tensor& tensor) {
  std::string dtype = dtype_name(tensor.dtype());
  std::transform(dtype.begin(), dtype.end(), dtype.begin(), [](unsigned char c) { return std::tolower(c); });
  return dtype + " x " + std::to_string(tensor.numel());
}

// "300 ms", "2.0 s".
inline std::string duration_text(Millis duration) {
  char text[32];
  if (duration < Millis{1000})
    std::snprintf(text, sizeof text, "%lld ms", static_cast<long long>(duration.count()));
  else
    std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

// Gloo prefixes its messages with the source location ("[./gloo/transport/tcp/pair.cc:598] ").
inline std::string without_source_location(const std::string& text) {
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("] ");
    if (close != std::string::npos) return text.substr(close + 2);
  }
  return text;
}

// Whether a Gloo message reports a timeout ("Timed out waiting ...", "Read timeout ...").
inline bool mentions_timeout(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text.find("timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

}  // namespace gradmesh::comm::gloo_backend
