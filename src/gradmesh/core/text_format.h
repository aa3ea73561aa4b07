// How error messages and logs spell ranks, dtypes and durations, written once
// so every layer reads the same ("ranks 1, 3", "f32 x 100", "timed out after
// 2.0 s").
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "gradmesh/core/tensor.h"

namespace gradmesh {

// "0, 1, 4" (empty for no values).
std::string comma_list(const std::vector<int>& values);

// "rank 3" or "ranks 0, 1, 4"; `name` spells one rank ("1 (global rank 3)").
std::string rank_list(const std::vector<int>& ranks);
std::string rank_list(const std::vector<int>& ranks, const std::function<std::string(int)>& name);

// "f32", "bf16" (dtype_name gives the safetensors spelling, "F32"); an
// out-of-range value, as a corrupt peer message could carry, is "dtype 7".
std::string dtype_label(DType dtype);

// "2.5 s": one decimal, whatever the size.
std::string seconds_text(std::chrono::milliseconds duration);
// "300 ms" below a second, else as seconds_text.
std::string duration_text(std::chrono::milliseconds duration);

}  // namespace gradmesh
