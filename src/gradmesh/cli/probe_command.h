// `gradmesh probe URL [--token-file FILE] [--timeout SECONDS]`: one HTTP GET,
// exit 0 on a 2xx answer and 1 otherwise (the status and body on stderr).
// Kubernetes runs it as an exec probe against the agent's endpoints
// (elastic/agent_http.h) and `gradmesh serve`'s, which listen on 127.0.0.1
// inside the pod; the slim image has no curl.
#pragma once

#include <string>

namespace gradmesh::cli {

struct ProbeArgs {
  std::string url;         // http://host:port/path
  std::string token_file;  // sent as "Authorization: Bearer <token>"
  std::string timeout = "5";
};

int run_probe(const ProbeArgs& args);

}  // namespace gradmesh::cli
