#include "gradmesh/comm/arrival_report.h"

namespace gradmesh::comm {

std::string ranks_list(const std::vector<int>& ranks, const RankName& name) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + name(ranks[i]);
  return text;
}

std::string arrival_report(const std::vector<int>& missing, const std::vector<int>& arrived, const RankName& name,
                           const std::string& also) {
  return ranks_list(missing, name) + " did not arrive (" + ranks_list(arrived, name) + " did" +
         (also.empty() ? "" : "; " + also) + "): check whether " +
         (missing.size() == 1 ? "it" : "they") + " exited (see its log), hung, or issued different collectives";
}

}  // namespace gradmesh::comm
