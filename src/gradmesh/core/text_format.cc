#include "gradmesh/core/text_format.h"

#include <cstdio>

namespace gradmesh {

std::string comma_list(const std::vector<int>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text;
}

std::string rank_list(const std::vector<int>& ranks) {
  return rank_list(ranks, [](int rank) { return std::to_string(rank); });
}

std::string rank_list(const std::vector<int>& ranks, const std::function<std::string(int)>& name) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + name(ranks[i]);
  return text;
}

std::string dtype_label(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
  }
  return "dtype " + std::to_string(static_cast<int>(dtype));
}

std::string seconds_text(std::chrono::milliseconds duration) {
  char text[48];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

std::string duration_text(std::chrono::milliseconds duration) {
  if (duration < std::chrono::milliseconds{1000}) return std::to_string(duration.count()) + " ms";
  return seconds_text(duration);
}

}  // namespace gradmesh
