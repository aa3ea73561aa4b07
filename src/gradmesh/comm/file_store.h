// FileStore: a Store in a directory, for ranks on one machine (no server).
//
// Each key is one file, named "k_" + the key percent-encoded (bytes outside
// [A-Za-z0-9._-] become %XX, so '/', ':' and ".." can never leave the
// directory or collide); keys whose encoding would pass the file-name limit
// end in a hash of the whole key instead. A value is written to a temporary
// file and renamed over the key's file, so a reader sees the old or the new
// value, never part of one. Nothing is fsynced: the keys only matter while
// the job's processes on this machine live, and a machine crash ends them
// too (a restart uses a new generation prefix), whereas an fsync per add
// costs milliseconds on every rendezvous step. add, compare_set, set and remove take an
// exclusive flock on "<dir>/.lock" around their read-modify-write (a fresh
// open per call, so threads of one process and forked children exclude each
// other too). get and wait poll with a 1 ms to 50 ms backoff.
//
// The directory must be on a local file system (flock and rename are atomic
// there; over NFS they may not be). Thread-safe.
#pragma once

#include <optional>
#include <string>

#include "gradmesh/comm/store.h"

namespace gradmesh::comm {

class FileStore : public Store {
 public:
  // Creates `dir` (and parents) if missing. An unusable directory (cannot be
  // created, not a directory, not writable) is Error(kIo) naming it.
  explicit FileStore(const std::string& dir);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout = kDefaultTimeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = kDefaultTimeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::string describe() const override { return "file://" + dir_; }

  // The file that holds `key` (for tests and debugging).
  std::string key_path(const std::string& key) const;

 private:
  std::optional<std::string> read_key(const std::string& key) const;
  // Writes the value to a temporary file; rename_into() publishes it.
  std::string write_temp(const std::string& key, const std::string& value) const;
  void rename_into(const std::string& temp, const std::string& key) const;
  std::string dir_;
};

}  // namespace gradmesh::comm
