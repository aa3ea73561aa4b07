#include "gradmesh/net/http_listen.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cctype>

#include "gradmesh/core/error.h"
#include "gradmesh/core/secret.h"

namespace gradmesh {

int bind_alone(httplib::Server& server, const std::string& host, int port, const std::string& what) {
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    throw_error(ErrorKind::kIo, what + host + ":" + std::to_string(port),
                "cannot listen there (in use, or not an address of this machine)");
  return bound;
}

bool bearer_token_matches(const std::string& authorization, const std::string& token) {
  // RFC 7235: the scheme is case-insensitive ("bearer", "BEARER") and is
  // followed by one or more spaces.
  const std::string scheme = "bearer";
  if (authorization.size() <= scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
  size_t at = scheme.size();
  if (authorization[at] != ' ') return false;
  while (at < authorization.size() && authorization[at] == ' ') ++at;
  return same_secret(authorization.substr(at), token);
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

}  // namespace gradmesh
