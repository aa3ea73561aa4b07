// Starting one worker process, and naming how it ended.
//
// A worker is forked and exec'd with its own environment, stdin from
// /dev/null, and stdout/stderr into pipes the launcher reads. It leads its own
// process group, so one kill(-pgid) reaches whatever it started (a shell and
// its children, data-loader processes), and it gets SIGKILL if the launcher
// dies (PR_SET_PDEATHSIG), so no worker outlives a killed launcher.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "gradmesh/elastic/signal_relay.h"

namespace gradmesh::elastic {

struct WorkerCommand {
  std::string executable;         // a path execve accepts (see find_executable)
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;   // "NAME=value", the whole environment
};

struct SpawnedWorker {
  pid_t pid = -1;      // also the worker's process group id
  int stdout_fd = -1;  // read ends, non-blocking and close-on-exec; the caller closes them
  int stderr_fd = -1;
};

// Forks and execs `command`. `relay` is the launcher's signal relay, whose
// dispositions the child puts back before exec. If exec fails, the child
// prints why on its stderr and exits with 127 (as a shell does).
// Errors: Error(kIo) when pipes or fork fail.
SpawnedWorker spawn_worker(const WorkerCommand& command, const SignalRelay& relay);

// "exited with status 3" or "was killed by signal 9 (SIGKILL)", from a waitpid status.
std::string describe_exit(int wait_status);
// The status a shell reports: the exit status, or 128 + signal number.
int shell_exit_code(int wait_status);
// True when the worker exited with status 0.
bool exited_cleanly(int wait_status);
// "SIGTERM" for SIGTERM; "signal 42" for numbers without a name.
std::string signal_name(int sig);

}  // namespace gradmesh::elastic
