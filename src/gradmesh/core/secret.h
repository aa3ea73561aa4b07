// Secrets: bearer tokens and store passwords, read from files and compared
// without leaking their bytes through timing.
//
// Files are how secrets reach a process without appearing in its command
// line (ps shows argv to every user) or its environment (/proc/PID/environ,
// `kubectl describe`, crash dumps): a Kubernetes Secret mounted as a file, a
// file of mode 0600. Nothing in gradmesh prints a secret: endpoints are shown
// as redis://:***@host (comm/endpoint.h), tokens never.
#pragma once

#include <string>

namespace gradmesh {

// The secret in `path`, trailing whitespace (a final newline) removed.
// Error(kIo) naming `what` and the path when unreadable; Error(kUsage) when
// empty or holding spaces or control characters.
std::string read_secret_file(const std::string& path, const std::string& what);

// Whether `given` equals `secret`, in time that depends only on their lengths.
bool same_secret(const std::string& given, const std::string& secret);

}  // namespace gradmesh
