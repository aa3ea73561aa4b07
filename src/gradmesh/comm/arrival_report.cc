#include "gradmesh/comm/arrival_report.h"

#include "gradmesh/core/text_format.h"

namespace gradmesh::comm {

std::string ranks_list(const std::vector<int>& ranks, const RankName& name) { return rank_list(ranks, name); }

std::string arrival_report(const std::vector<int>& missing, const std::vector<int>& arrived, const RankName& name,
                           const std::string& also) {
  return ranks_list(missing, name) + " did not arrive (" + ranks_list(arrived, name) + " did" +
         (also.empty() ? "" : "; " + also) + "): check whether " +
         (missing.size() == 1 ? "it" : "they") + " exited (see its log), hung, or issued different collectives";
}

}  // namespace gradmesh::comm
