// The workers of one node for one generation: start them, pump their output,
// reap them, signal them, and never leave one behind.
//
// A WorkerGroup is single-use: a restart builds a new group (new generation,
// new environment) after the old one has fully exited. The one exception is
// an in-process replacement: respawn() starts a new process in the slot of
// one worker that exited while the others keep running. It does no policy:
// deciding that a failure stops the others, or that a signal is forwarded,
// is the launcher's job (elastic/launcher.cc); this class only provides the
// mechanisms, so restarts and elastic membership can reuse it.
//
// Not thread-safe: one thread owns the group (the launcher's event loop).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/elastic/output_prefixer.h"
#include "gradmesh/elastic/signal_relay.h"
#include "gradmesh/elastic/worker_process.h"

namespace gradmesh::elastic {

struct WorkerSpec {
  int rank = 0;        // global rank: the output prefix and the log file name
  int local_rank = 0;
  WorkerCommand command;
};

struct RunningWorker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
};

struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int wait_status = 0;  // as from waitpid
};

class WorkerGroup {
 public:
  // `log_dir` empty = no log files; else "<log_dir>/rank_<rank>.log" holds each
  // rank's raw output (truncated when `truncate_logs`, appended otherwise, so
  // a restarted generation adds to the same file).
  WorkerGroup(std::vector<WorkerSpec> specs, std::string log_dir, bool truncate_logs);
  // Kills (SIGKILL to each process group) and reaps anything still running.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker. If one cannot be started, the ones already running
  // are killed and the error is rethrown.
  void start(const SignalRelay& relay);

  // Waits up to `timeout` for worker output, a worker exit or `wake_fd`
  // (the signal relay) to become readable; forwards all output that arrived
  // and reaps exited workers (after draining what they wrote). Returns the
  // workers that exited during this call.
  std::vector<WorkerExit> pump(std::chrono::milliseconds timeout, int wake_fd);

  // Sends `sig` to every worker's process group, including groups whose
  // leader already exited (their leftover children belong to this job too).
  void signal_all(int sig);

  // Starts `command` for local rank `local_rank`, whose worker has exited,
  // with the same rank, output prefix and log file (appended to).
  void respawn(int local_rank, WorkerCommand command, const SignalRelay& relay);

  std::vector<RunningWorker> running_workers() const;
  int running() const;
  bool all_exited() const { return running() == 0; }

 private:
  struct Stream {
    int fd = -1;
    std::unique_ptr<LinePrefixer> prefixer;
  };
  struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    bool exited = false;
    int log_fd = -1;
    Stream out, err;
  };

  void open_log(Worker& worker, bool truncate) const;
  void spawn(Worker& worker, const SignalRelay& relay);
  // Reads until the pipe is empty or `max_reads` reads were made; returns
  // false once the stream reached EOF (and closes it).
  static bool read_stream(Stream& stream, int max_reads);
  static void close_stream(Stream& stream);
  void reap(std::vector<WorkerExit>& exits);

  std::vector<Worker> workers_;
  std::string log_dir_;
  bool truncate_logs_;
};

}  // namespace gradmesh::elastic
