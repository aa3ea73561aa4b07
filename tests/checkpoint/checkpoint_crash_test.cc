// Real processes killed in the middle of a save, and a save that runs out of
// file size: the previous checkpoint must stay loadable in every case.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

namespace fs = std::filesystem;
using gradmesh::testing::read_file;
using gradmesh::testing::TempDir;
using testing::expect_checkpoint_holds;
using testing::snapshot_at;

// Forks a child that saves step 2 into `dir` with
// GRADMESH_CHECKPOINT_PAUSE=<point>:30 and its stderr on a pipe; returns once
// the child reports (the writer's "paused after" line) that it sleeps at
// `point`, and leaves it sleeping.
pid_t start_paused_save(const std::string& dir, const std::string& point) {
  int fds[2];
  if (::pipe(fds) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::setenv("GRADMESH_CHECKPOINT_PAUSE", (point + ":30").c_str(), 1);
    CheckpointWriter writer({dir, 0});
    writer.save(snapshot_at(2));
    ::_exit(0);
  }
  ::close(fds[1]);
  const std::string wanted = "paused after '" + point + "'";
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // a hang guard, not a timing check
  while (seen.find(wanted) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buffer[512];
    const ssize_t got = ::read(fds[0], buffer, sizeof buffer);
    if (got <= 0) break;  // the child exited without pausing
    seen.append(buffer, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  EXPECT_NE(seen.find(wanted), std::string::npos) << "the child never paused at " << point << "; it wrote: " << seen;
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
}

class CheckpointKillTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckpointKillTest, KilledSaveLeavesALoadableCheckpoint) {
  const std::string point = GetParam();
  TempDir tmp;
  const std::string dir = tmp.file("checkpoints");
  ASSERT_TRUE(CheckpointWriter({dir, 0}).save(snapshot_at(1)).ok);

  kill_and_reap(start_paused_save(dir, point));

  const bool committed = point == "rename" || point == "latest";
  const std::optional<LoadedCheckpoint> loaded = load_latest(dir);
  ASSERT_TRUE(loaded.has_value());
  // Killed before the rename: step-2 must not exist at all, step-1 is used.
  // Killed after it: step-2 is complete (a kill does not undo a rename).
  expect_checkpoint_holds(*loaded, snapshot_at(committed ? 2 : 1));
  EXPECT_TRUE(loaded->skipped.empty()) << loaded->skipped[0];
  EXPECT_EQ(fs::exists(dir + "/step-2.tmp"), !committed);
  EXPECT_EQ(read_file(dir + "/latest"), point == "latest" ? "step-2\n" : "step-1\n");

  // The next writer clears what the killed one left, and saving again works.
  CheckpointWriter writer({dir, 0});
  EXPECT_FALSE(fs::exists(dir + "/step-2.tmp"));
  ASSERT_TRUE(writer.save(snapshot_at(2)).ok);
  expect_checkpoint_holds(*load_latest(dir), snapshot_at(2));
}

INSTANTIATE_TEST_SUITE_P(Points, CheckpointKillTest, ::testing::Values("files", "manifest", "rename", "latest"));

// What the child found, as its exit code (gtest assertions do not cross fork).
enum FullDiskOutcome {
  kAsExpected = 0,
  kSaveSucceeded = 10,
  kErrorNamesNoFile,
  kErrorLacksErrno,
  kTmpLeftBehind,
  kStepDirCreated,
  kOldCheckpointLost,
  kLatestChanged,
  kThrew,
};

int save_under_file_size_limit(const std::string& dir) {
  rlimit limit{64 * 1024, 64 * 1024};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  ::signal(SIGXFSZ, SIG_IGN);  // so write() fails with EFBIG instead of killing the process
  try {
    CheckpointWriter writer({dir, 0});
    const SaveResult result = writer.save(snapshot_at(2, 50'000));  // 200 KB of model
    if (result.ok) return kSaveSucceeded;
    if (result.error.find(dir + "/step-2.tmp/model.safetensors") == std::string::npos) return kErrorNamesNoFile;
    if (result.error.find(std::strerror(EFBIG)) == std::string::npos) return kErrorLacksErrno;
    if (fs::exists(dir + "/step-2.tmp")) return kTmpLeftBehind;
    if (fs::exists(dir + "/step-2")) return kStepDirCreated;
    const std::optional<LoadedCheckpoint> loaded = load_latest(dir);
    if (!loaded || loaded->step != 1 || !loaded->skipped.empty()) return kOldCheckpointLost;
    if (read_file(dir + "/latest") != "step-1\n") return kLatestChanged;
    return kAsExpected;
  } catch (...) {
    return kThrew;
  }
}

TEST(CheckpointFullDisk, FailedWriteKeepsTheOldCheckpointAndALaterSaveWorks) {
  TempDir tmp;
  const std::string dir = tmp.file("checkpoints");
  CheckpointWriter writer({dir, 0});
  ASSERT_TRUE(writer.save(snapshot_at(1)).ok);

  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(save_under_file_size_limit(dir));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with status " << status;
  EXPECT_EQ(WEXITSTATUS(status), kAsExpected) << "see FullDiskOutcome for the code";

  const Snapshot big = snapshot_at(2, 50'000);
  const SaveResult result = writer.save(big);
  ASSERT_TRUE(result.ok) << result.error;
  expect_checkpoint_holds(*load_latest(dir), big);
}

}  // namespace
}  // namespace gradmesh::checkpoint
