#include "gradmesh/cli/probe_command.h"

#include <httplib.h>

#include <cstdio>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/secret.h"

namespace gradmesh::cli {
namespace {

struct Target {
  std::string host;
  int port = 80;
  std::string path;
};

Target parse_url(const std::string& url) {
  const auto bad = [&](const std::string& why) {
    throw_error(ErrorKind::kUsage, "probe URL '" + url + "'", why + "; expected http://host:port/path");
  };
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) bad("only http:// is probed (the endpoints listen on the pod's loopback)");
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  Target t;
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  size_t colon = authority.rfind(':');
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) bad("unclosed '['");
    t.host = authority.substr(1, close - 1);
    colon = authority.find(':', close);
  } else {
    t.host = authority.substr(0, colon);
  }
  if (t.host.empty()) bad("no host");
  if (colon != std::string::npos) {
    const std::optional<int64_t> port = try_parse_int(authority.substr(colon + 1), 1, 65535);
    if (!port) bad("the port is not a number from 1 to 65535");
    t.port = static_cast<int>(*port);
  }
  return t;
}

}  // namespace

int run_probe(const ProbeArgs& args) {
  const Target target = parse_url(args.url);
  const double timeout = parse_double(args.timeout, "--timeout", 0.001, 3600, ErrorKind::kUsage);
  httplib::Client client(target.host, target.port);
  const auto micros = static_cast<long>(timeout * 1e6);
  client.set_connection_timeout(micros / 1000000, micros % 1000000);
  client.set_read_timeout(micros / 1000000, micros % 1000000);
  httplib::Headers headers;
  if (!args.token_file.empty())
    headers.emplace("Authorization", "Bearer " + read_secret_file(args.token_file, "--token-file"));
  const httplib::Result result = client.Get(target.path.c_str(), headers);
  if (!result) {
    std::fprintf(stderr, "gradmesh probe: %s: no answer (%s)\n", args.url.c_str(),
                 httplib::to_string(result.error()).c_str());
    return 1;
  }
  const bool ok = result->status >= 200 && result->status < 300;
  std::fprintf(ok ? stdout : stderr, "%s%d %s", ok ? "" : "gradmesh probe: ", result->status, result->body.c_str());
  if (result->body.empty() || result->body.back() != '\n') std::fputc('\n', ok ? stdout : stderr);
  return ok ? 0 : 1;
}

}  // namespace gradmesh::cli
