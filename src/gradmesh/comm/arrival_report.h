// The sentence every backend ends a timed-out collective's error with, once it
// knows which ranks reached the operation (gloo from its store census, mpi
// from the reports its ranks exchange), so users read one wording everywhere:
//   "rank 2 did not arrive (ranks 0, 1 did): check whether it exited (see its
//    log), hung, or issued different collectives"
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gradmesh::comm {

// How a backend names one rank in messages ("3", or "1 (global rank 3)").
using RankName = std::function<std::string(int)>;

// "rank 3" or "ranks 0, 1, 4".
std::string ranks_list(const std::vector<int>& ranks, const RankName& name);

// REQUIRES: `missing` is not empty. `also`, when not empty, is added inside
// the parentheses after the arrived ranks (gloo: "rank 1 failed earlier, in
// #6").
std::string arrival_report(const std::vector<int>& missing, const std::vector<int>& arrived, const RankName& name,
                           const std::string& also = "");

}  // namespace gradmesh::comm
