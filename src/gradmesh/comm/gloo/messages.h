// Small text helpers shared by the gloo backend's error messages.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "gradmesh/comm/store.h"
#include "gradmesh/core/tensor.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm::gloo_backend {

// "f32 x 1000003".
inline std::string tensor_text(const Tensor& tensor) {
  return dtype_label(tensor.dtype()) + " x " + std::to_string(tensor.numel());
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
