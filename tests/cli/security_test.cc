// What a run exposes on a shared machine (docs/security.md): the store's
// password never reaches a file the run leaves or a line it prints, whether
// it came from a file (GRADMESH_REDIS_PASSWORD_FILE) or the command line;
// every file and directory a run writes is the owner's only; and loading
// never executes code: a Python pickle where weights are expected is refused
// as not safetensors, and the sources hold no dynamic loader or shell call
// beyond the launcher's own.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "comm/redis_server.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/core/private_files.h"
#include "support/temp_dir.h"

namespace gradmesh::testing {
namespace {

namespace fs = std::filesystem;

std::string fresh_secret() {
  std::random_device device;
  char text[40];
  std::snprintf(text, sizeof text, "s3cret-%08x%08x", device(), device());
  return text;
}

// A short two-worker run that writes everything a run can: checkpoints,
// metrics, the report, a trace and per-rank logs.
std::string short_run(const std::string& run_id) {
  return "'" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set train.threads=1 --set output.dir=runs"
         " --set data.limit_train=2048 --set data.limit_test=256 --set train.epochs=1 --set train.log_every=4"
         " --set checkpoint.every_steps=8 --set output.trace_steps=4 --set output.run_id=" + run_id;
}

// Files under `dir` (recursively) whose bytes contain `secret`.
std::vector<std::string> files_holding(const std::string& dir, const std::string& secret) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    if (read_file(entry.path().string()).find(secret) != std::string::npos) found.push_back(entry.path().string());
  }
  return found;
}

std::string join_paths(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) out += p + "\n";
  return out;
}

class StorePassword : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!redis_server_installed()) GTEST_SKIP() << redis_missing_message();
    if (!have_dataset()) GTEST_SKIP() << "skipped: the Fashion-MNIST dataset is not installed";
  }
};

TEST_F(StorePassword, FromAFileReachesNoFileAndNoLogLine) {
  TempDir dir;
  const std::string secret = fresh_secret();
  RedisServer server(secret);
  {
    std::ofstream(dir.file("redis-password")) << secret << "\n";
  }
  const std::string endpoint = "redis://127.0.0.1:" + std::to_string(server.port()) + "/0";
  const CommandResult r = run_shell("GRADMESH_REDIS_PASSWORD_FILE='" + dir.file("redis-password") + "' '" GRADMESH_BINARY
                                    "' launch --nproc-per-node 2 --rdzv-endpoint " + endpoint +
                                    " --rdzv-id sec1 --log-dir logs -- '" GRADMESH_BINARY "' train " + short_run("sec1"),
                                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find(secret), std::string::npos);
  EXPECT_EQ(r.err.find(secret), std::string::npos);
  ASSERT_TRUE(fs::exists(dir.file("runs/sec1/metrics.jsonl")));
  std::vector<std::string> leaked = files_holding(dir.path(), secret);
  std::erase(leaked, dir.file("redis-password"));
  EXPECT_EQ(join_paths(leaked), "") << "files holding the password";
}

TEST_F(StorePassword, OnTheCommandLineIsShownAsStarsAndKeptOutOfTheFiles) {
  TempDir dir;
  const std::string secret = fresh_secret();
  RedisServer server(secret);
  // INFO: the launcher's line that names the store (ctest runs at WARN).
  const CommandResult r = run_shell("GRADMESH_DEBUG=INFO '" GRADMESH_BINARY "' launch --nproc-per-node 2 --rdzv-endpoint " +
                                        server.endpoint() + " --rdzv-id sec2 --log-dir logs -- '" GRADMESH_BINARY
                                        "' train " + short_run("sec2"),
                                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find(secret), std::string::npos);
  EXPECT_EQ(r.err.find(secret), std::string::npos);
  EXPECT_NE(r.err.find("redis://:***@127.0.0.1"), std::string::npos) << "the launcher names the store, redacted:\n"
                                                                     << r.err;
  EXPECT_EQ(join_paths(files_holding(dir.path(), secret)), "") << "files holding the password";
}

TEST_F(StorePassword, AnUnreadablePasswordFileIsNamed) {
  TempDir dir;
  RedisServer server(fresh_secret());
  const CommandResult r =
      run_shell("GRADMESH_REDIS_PASSWORD_FILE=/nonexistent/password '" GRADMESH_BINARY
                "' launch --nproc-per-node 1 --rdzv-endpoint redis://127.0.0.1:" + std::to_string(server.port()) +
                    " --rdzv-id sec3 -- /bin/true",
                dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("GRADMESH_REDIS_PASSWORD_FILE file /nonexistent/password"), std::string::npos) << r.err;
}

// Mode bits for group and others.
std::string shared_entries(const std::string& dir) {
  std::string out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || S_ISLNK(st.st_mode)) continue;
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
      out += entry.path().string() + " " + mode + "\n";
    }
  }
  return out;
}

TEST(FileModes, EverythingARunWritesIsTheOwnersOnly) {
  if (!have_dataset()) GTEST_SKIP() << "skipped: the Fashion-MNIST dataset is not installed";
  TempDir dir;
  // The shell's umask is the usual 022: the modes come from gradmesh.
  const CommandResult r = run_shell("umask 022 && '" GRADMESH_BINARY
                                    "' launch --nproc-per-node 2 --rdzv-endpoint file://" + dir.file("store") +
                                    " --rdzv-id modes --log-dir logs -- '" GRADMESH_BINARY "' train " +
                                    short_run("modes"),
                                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(dir.file("runs/modes/checkpoints")));
  for (const char* written : {"runs", "logs", "store"}) {
    ASSERT_TRUE(fs::exists(dir.file(written))) << written;
    EXPECT_EQ(shared_entries(dir.file(written)), "") << "readable or writable by others under " << written;
  }
}

// The library's own modes, without gradmesh's umask (an embedding program's 022).
TEST(FileModes, TheLibraryAsksForOwnerOnlyModesItself) {
  TempDir dir;
  const mode_t old = ::umask(022);
  std::error_code ec;
  create_private_directories(dir.file("a/b/c"), ec);
  EXPECT_FALSE(ec) << ec.message();
  {
    comm::FileStore store(dir.file("store"));
    store.set("key", "value");
  }
  ::umask(old);
  EXPECT_EQ(shared_entries(dir.path()), "");
}

TEST(LoadingExecutesNoCode, APickleWhereWeightsAreExpectedIsRefused) {
  TempDir dir;
  // Python's classic pickle exploit: unpickling it would run `touch MARKER`.
  {
    std::ofstream(dir.file("model.pt"), std::ios::binary) << "cos\nsystem\n(S'touch " + dir.file("MARKER") + "'\ntR.";
  }
  const CommandResult r = run_gradmesh("inspect model.pt", dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("model.pt"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("MARKER")));
}

// Every format gradmesh reads is parsed by its own code (TOML, IDX, safetensors,
// JSON, token files): nothing loads code at run time. The only process
// starts are the launcher's workers and the tools a few commands run on
// purpose; a new one has to be added here, which a review then sees.
TEST(LoadingExecutesNoCode, TheSourcesHoldNoLoaderAndOnlyTheKnownProcessStarts) {
  const std::regex loader(R"(\b(dlopen|dlsym|popen|system|execl|execlp|execv|execvp|execve|posix_spawnp?)\s*\()");
  const std::vector<std::string> allowed = {
      "core/shell.cc",                 // the emulated cluster's set-up (ip, tc), as root, on request
      "elastic/worker_process.cc",     // the launcher's workers
      "cli/bench_scaling_command.cc",  // the probes: gradmesh launch
  };
  std::string found;
  for (const auto& entry : fs::recursive_directory_iterator(GRADMESH_SOURCE_DIR "/src/gradmesh")) {
    if (!entry.is_regular_file()) continue;
    const std::string path = entry.path().string();
    const std::string relative = path.substr(std::string(GRADMESH_SOURCE_DIR "/src/gradmesh/").size());
    if (std::find(allowed.begin(), allowed.end(), relative) != allowed.end()) continue;
    std::ifstream in(path);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const std::string code = line.substr(0, line.find("//"));
      if (std::regex_search(code, loader)) found += relative + ":" + std::to_string(n) + ": " + line + "\n";
    }
  }
  EXPECT_EQ(found, "") << "a dynamic loader or a process start outside the known places";
}

}  // namespace
}  // namespace gradmesh::testing
