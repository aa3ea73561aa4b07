// What every gradmesh HTTP server (`gradmesh serve`, the agent's endpoints)
// does the same way with cpp-httplib: bind its port alone, and check a
// bearer token. Kept out of httplib.h's reach: the header only names the class.
#pragma once

#include <string>

namespace httplib {
class Server;
}

namespace gradmesh {

// Binds `server` to host:port (port 0: any free port) and returns the port.
// Only SO_REUSEADDR is set: httplib's default also sets SO_REUSEPORT, with
// which a second server on the same port would bind too and take half the
// connections. Error(kIo) naming `what` host:port when it cannot bind.
int bind_alone(httplib::Server& server, const std::string& host, int port, const std::string& what);

// Whether an Authorization header carries `token` as "Bearer <token>", the
// scheme in any case (compared in constant time, core/secret.h).
bool bearer_token_matches(const std::string& authorization, const std::string& token);

// Whether `host` (a listen address) is reachable from this machine only:
// 127.0.0.0/8, ::1 or "localhost".
bool is_loopback_host(const std::string& host);

}  // namespace gradmesh
