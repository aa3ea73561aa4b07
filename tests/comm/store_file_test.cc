// FileStore across real processes, and its on-disk layout and failures.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/comm/file_store.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using gradmesh::testing::TempDir;

constexpr Millis kPayloadWait{5000};

// Forks one child per index running body(index); a child exits 0 when the
// body returns and 1 when it throws. Waits up to `deadline`, then kills the
// stragglers (so a hang fails the test instead of blocking it). Returns each
// child's raw wait status.
std::vector<int> run_children(int count, const std::function<void(int)>& body,
                              std::chrono::seconds deadline = std::chrono::seconds(20)) {
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        body(i);
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> statuses(pids.size(), -1);
  auto until = std::chrono::steady_clock::now() + deadline;
  size_t left = pids.size();
  while (left > 0 && std::chrono::steady_clock::now() < until) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (statuses[i] != -1 || pids[i] < 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        statuses[i] = status;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (statuses[i] != -1 || pids[i] < 0) continue;
    ::kill(pids[i], SIGKILL);
    ::waitpid(pids[i], &statuses[i], 0);
    ADD_FAILURE() << "child " << i << " did not finish within the deadline";
  }
  return statuses;
}

bool exited_cleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

TEST(FileStore, ForkedProcessesAddAtomically) {
  TempDir dir;
  FileStore inherited(dir.path());
  std::vector<int> statuses = run_children(4, [&](int child) {
    // Half the children use the object inherited through fork, half open
    // their own: both must exclude each other.
    FileStore own(dir.path());
    Store& store = child % 2 == 0 ? static_cast<Store&>(inherited) : own;
    for (int i = 0; i < 250; ++i) store.add("workers/arrived", 1);
  });
  for (size_t i = 0; i < statuses.size(); ++i) EXPECT_TRUE(exited_cleanly(statuses[i])) << "child " << i;
  EXPECT_EQ(inherited.get("workers/arrived", kPayloadWait), "1000");
}

TEST(FileStore, GetSeesAKeySetByAnotherProcess) {
  TempDir dir;
  FileStore store(dir.path());
  std::vector<int> statuses = run_children(1, [&](int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    FileStore(dir.path()).set("rank/1/addr", "10.0.0.2:29500");
  });
  EXPECT_EQ(store.get("rank/1/addr", kPayloadWait), "10.0.0.2:29500");
  EXPECT_TRUE(exited_cleanly(statuses[0]));
}

TEST(FileStore, AConcurrentReaderNeverSeesATornValue) {
  TempDir dir;
  FileStore store(dir.path());
  const std::string a(1 << 16, 'A');
  const std::string b(1 << 16, 'B');
  store.set("payload", a);
  pid_t writer = ::fork();
  if (writer == 0) {
    try {
      FileStore own(dir.path());
      for (int i = 0; i < 150; ++i) own.set("payload", i % 2 ? a : b);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int reads = 0;
  int torn = 0;
  int status = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (::waitpid(writer, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < until) {
    std::string value = store.get("payload", kPayloadWait);
    ++reads;
    bool whole = value.size() == a.size() && (value == a || value == b);
    torn += !whole;
  }
  if (std::chrono::steady_clock::now() >= until) {
    ::kill(writer, SIGKILL);
    ::waitpid(writer, &status, 0);
    FAIL() << "the writer did not finish";
  }
  EXPECT_TRUE(exited_cleanly(status));
  EXPECT_GT(reads, 0);
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
}

TEST(FileStore, KeysNeverLeaveTheDirectory) {
  TempDir outer;
  std::string dir = outer.file("store");
  FileStore store(dir);
  store.set("../escape", "x");
  store.set("/etc/absolute", "y");
  store.set(std::string(5000, '/'), "z");
  std::vector<std::string> outside;
  for (const auto& entry : std::filesystem::directory_iterator(outer.path())) outside.push_back(entry.path().filename());
  EXPECT_EQ(outside, std::vector<std::string>{"store"});
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename();
    EXPECT_TRUE(name == ".lock" || name.rfind("k_", 0) == 0) << name;
    EXPECT_LE(name.size(), 255u) << name;
  }
  EXPECT_EQ(store.get(std::string(5000, '/'), kPayloadWait), "z");
}

TEST(FileStore, DescribeIsTheFileEndpoint) {
  TempDir dir;
  FileStore store(dir.path() + "/sub/");
  EXPECT_EQ(store.describe(), "file://" + dir.path() + "/sub");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/sub"));
}

TEST(FileStore, AnUnusableDirectoryIsAnIoErrorNamingIt) {
  TempDir dir;
  dir.write("plain-file", "not a directory");
  for (const std::string& path : {dir.file("plain-file"), dir.file("plain-file/below")}) {
    try {
      FileStore store(path);
      ADD_FAILURE() << "expected an error for " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

TEST(FileStore, TimeoutMessageNamesStoreAndKeys) {
  TempDir dir;
  FileStore store(dir.path());
  try {
    store.wait({"rank/3", "rank/4"}, Millis{40});
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    std::string expected = "file://" + dir.path() + ": timed out after 40 ms waiting for keys: rank/3, rank/4";
    EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::comm
