#include "gradmesh/core/secret.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "gradmesh/core/error.h"

namespace gradmesh {

std::string read_secret_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kIo, what + " file " + path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) secret.pop_back();
  if (secret.empty()) throw_error(ErrorKind::kUsage, what + " file " + path, "is empty");
  for (char c : secret)
    if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c)))
      throw_error(ErrorKind::kUsage, what + " file " + path, "may not contain spaces or control characters");
  return secret;
}

bool same_secret(const std::string& given, const std::string& secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  const size_t n = std::max<size_t>(secret.size(), 1);
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ (secret.empty() ? 0 : secret[i % n]));
  return diff == 0;
}

}  // namespace gradmesh
