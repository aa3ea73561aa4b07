#include "gradmesh/parallel/rank_agreement.h"

#include <algorithm>
#include <sstream>

#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::parallel {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first line where `a` and `b` differ, quoted from both, with the TOML
// section it sits in ("[optim] 'lr = 0.1' vs 'lr = 0.2'").
std::string first_difference(const std::string& a, const std::string& b) {
  const std::vector<std::string> la = split_lines(a), lb = split_lines(b);
  std::string section;
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string x = i < la.size() ? la[i] : "(nothing)", y = i < lb.size() ? lb[i] : "(nothing)";
    if (x != y) return (section.empty() ? "" : section + " ") + "'" + x + "' vs '" + y + "'";
    if (!x.empty() && x[0] == '[') section = x;
  }
  return "(no line differs)";
}

// Names the ranks whose `field` differs from rank 0's.
void require_equal(const std::vector<std::string>& values, const std::string& what, const std::string& advice) {
  std::vector<int> differing;
  for (size_t r = 1; r < values.size(); ++r)
    if (values[r] != values[0]) differing.push_back(static_cast<int>(r));
  if (differing.empty()) return;
  throw_error(ErrorKind::kConfig, "data-parallel start",
              "the " + what + " of " + rank_list(differing) + " differs from rank 0's: first difference " +
                  first_difference(values[0], values[static_cast<size_t>(differing[0])]) + "; " + advice);
}

}  // namespace

std::vector<std::string> allgather_strings(comm::ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  Tensor length = Tensor::full({1}, static_cast<float>(mine.size()));
  Tensor lengths = Tensor::empty({n});
  group.allgather(length, lengths)->wait_or_throw();
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, static_cast<int64_t>(lengths.data()[r]));
  Tensor bytes = Tensor::zeros({std::max<int64_t>(longest, 1)});
  for (size_t i = 0; i < mine.size(); ++i) bytes.data()[i] = static_cast<float>(static_cast<unsigned char>(mine[i]));
  Tensor all = Tensor::empty({n * bytes.numel()});
  group.allgather(bytes, all)->wait_or_throw();
  std::vector<std::string> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto len = static_cast<size_t>(lengths.data()[r]);
    const float* src = all.data() + r * bytes.numel();
    out[static_cast<size_t>(r)].resize(len);
    for (size_t i = 0; i < len; ++i) out[static_cast<size_t>(r)][i] = static_cast<char>(static_cast<int>(src[i]));
  }
  return out;
}

std::string broadcast_string(comm::ProcessGroup& group, const std::string& text, int root) {
  comm::BroadcastOptions options;
  options.root = root;
  Tensor length = Tensor::full({1}, static_cast<float>(text.size()));
  group.broadcast(length, options)->wait_or_throw();
  const auto len = static_cast<size_t>(length.data()[0]);
  Tensor bytes = Tensor::zeros({static_cast<int64_t>(std::max<size_t>(len, 1))});
  if (group.rank() == root)
    for (size_t i = 0; i < len; ++i) bytes.data()[i] = static_cast<float>(static_cast<unsigned char>(text[i]));
  group.broadcast(bytes, options)->wait_or_throw();
  std::string out(len, '\0');
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<char>(static_cast<int>(bytes.data()[i]));
  return out;
}

std::string parameter_layout(const nn::Model& model) {
  std::string out;
  for (const nn::ParameterInfo& p : model.parameters()) out += p.name + " " + shape_str(p.shape) + "\n";
  return out;
}

void check_start_agreement(comm::ProcessGroup& group, const StartState& mine) {
  const std::vector<std::string> errors = allgather_strings(group, mine.error);
  std::vector<int> failed;
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) failed.push_back(static_cast<int>(r));
  if (!failed.empty())
    throw_error(ErrorKind::kComm, "data-parallel start",
                rank_list(failed) + " could not start: " + errors[static_cast<size_t>(failed[0])]);
  require_equal(allgather_strings(group, mine.config_text), "config",
                "give every rank the same config file and the same --set overrides");
  require_equal(allgather_strings(group, mine.layout), "model's parameter layout",
                "every rank must build the same model");
}

void broadcast_parameters(comm::ProcessGroup& group, nn::Model& model) {
  comm::BroadcastOptions options;
  options.root = 0;
  group.broadcast(model.flat_params(), options)->wait_or_throw();
}

}  // namespace gradmesh::parallel
