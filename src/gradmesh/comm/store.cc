#include "gradmesh/comm/store.h"

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/etcd_store.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/redis_store.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/secret.h"

namespace gradmesh::comm {

PrefixStore::PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix)) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(full(key));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) { inner_->set(full(key), value); }

std::string PrefixStore::get(const std::string& key, Millis timeout) { return inner_->get(full(key), timeout); }

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return inner_->add(full(key), delta); }

std::string PrefixStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) { inner_->wait(full(keys), timeout); }

bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }

bool PrefixStore::remove(const std::string& key) { return inner_->remove(full(key)); }

bool PrefixStore::set_expiring(const std::string& key, const std::string& value, Millis ttl) {
  return inner_->set_expiring(full(key), value, ttl);
}

std::string PrefixStore::describe() const { return inner_->describe() + " (keys under '" + prefix_ + "/')"; }

void wait_by_polling(Store& store, const std::vector<std::string>& keys, Millis timeout) {
  if (poll_until(timeout, [&] { return store.check(keys); })) return;
  std::vector<std::string> missing;
  for (const std::string& key : keys)
    if (!store.check({key})) missing.push_back(key);
  if (missing.empty()) return;  // the last ones arrived after the final poll
  throw_store_timeout(store.describe(), timeout, missing);
}

int64_t add_without_overflow(const std::string& store, const std::string& key, int64_t value, int64_t delta) {
  int64_t result = 0;
  if (__builtin_add_overflow(value, delta, &result))
    throw_error(ErrorKind::kFormat, store,
                "add to key '" + printable_key(key) + "': " + std::to_string(value) + " + " + std::to_string(delta) +
                    " overflows a 64-bit integer");
  return result;
}

std::shared_ptr<Store> open_store(const std::string& endpoint, Millis connect_timeout, std::optional<Millis> retry_window) {
  StoreEndpoint parsed = parse_store_endpoint(endpoint);
  if (parsed.scheme == StoreEndpoint::Scheme::kFile) return std::make_shared<FileStore>(parsed.path);
  if (parsed.scheme == StoreEndpoint::Scheme::kEtcd)
    return std::make_shared<EtcdStore>(
        etcd_options_from_environment(parsed, connect_timeout, retry_window.value_or(env_store_timeout())));
  // A file or the environment keeps the password out of process listings
  // (ps shows argv); a file (a mounted Secret) keeps it out of environment dumps too.
  std::string password = parsed.password.empty() ? env_string("GRADMESH_REDIS_PASSWORD") : parsed.password;
  const std::string password_file = env_string("GRADMESH_REDIS_PASSWORD_FILE");
  if (password.empty() && !password_file.empty())
    password = read_secret_file(password_file, "GRADMESH_REDIS_PASSWORD_FILE");
  return std::make_shared<RedisStore>(parsed.host, parsed.port, password, parsed.db, connect_timeout, parsed.user,
                                      retry_window.value_or(env_store_timeout()));
}

}  // namespace gradmesh::comm
