#include "gradmesh/elastic/worker_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gradmesh/core/error.h"
#include "gradmesh/core/exit_codes.h"

namespace gradmesh::elastic {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Only async-signal-safe calls from here on: the child of a fork.
void write_str(int fd, const char* s) { [[maybe_unused]] ssize_t n = ::write(fd, s, std::strlen(s)); }

void write_errno(int fd, int err) {
  switch (err) {
    case ENOENT: return write_str(fd, "no such file");
    case EACCES: return write_str(fd, "permission denied");
    case ENOEXEC: return write_str(fd, "not an executable format");
    case E2BIG: return write_str(fd, "argument list too long");
    default: break;
  }
  char digits[16] = {};
  int i = sizeof digits - 1;
  for (unsigned value = static_cast<unsigned>(err); i > 0 && (value > 0 || i == sizeof digits - 1); value /= 10)
    digits[--i] = static_cast<char>('0' + value % 10);
  write_str(fd, "errno ");
  write_str(fd, digits + i);
}

// Everything the child needs, built before fork.
struct ChildPlan {
  int stdin_fd, stdout_fd, stderr_fd;  // become 0, 1, 2
  pid_t parent;
  const SignalRelay* relay;
  sigset_t mask;  // the launcher's mask before it blocked everything around fork
  const char* exe;
  char* const* argv;
  char* const* envp;
  char* const* sh_argv;  // "/bin/sh exe args...", for scripts without '#!'
};

[[noreturn]] void run_child(const ChildPlan& plan) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.parent) ::_exit(127);  // the launcher died before prctl took effect
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0) ::_exit(127);
#ifdef SYS_close_range
  ::syscall(SYS_close_range, 3U, ~0U, 0U);  // descriptors the launcher opened without O_CLOEXEC (store sockets)
#endif
  plan.relay->restore_in_child(plan.mask);
  ::execve(plan.exe, plan.argv, plan.envp);
  if (errno == ENOEXEC) ::execve("/bin/sh", plan.sh_argv, plan.envp);  // as execvp does
  const int err = errno;
  write_str(2, "gradmesh launch: cannot run '");
  write_str(2, plan.exe);
  write_str(2, "': ");
  write_errno(2, err);
  write_str(2, "\n");
  ::_exit(127);
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_error(ErrorKind::kIo, "launch", std::string("pipe2: ") + std::strerror(errno));
}

}  // namespace

SpawnedWorker spawn_worker(const WorkerCommand& command, const SignalRelay& relay) {
  GRADMESH_CHECK(!command.argv.empty(), "a worker needs argv[0]");
  // Everything the child touches is built before fork: after fork in a
  // process that may have threads, only async-signal-safe calls are allowed.
  std::vector<char*> argv = c_strings(command.argv);
  std::vector<char*> envp = c_strings(command.env);
  std::vector<std::string> sh_strings = {"/bin/sh", command.executable};
  sh_strings.insert(sh_strings.end(), command.argv.begin() + 1, command.argv.end());
  std::vector<char*> sh_argv = c_strings(sh_strings);

  int out[2], err[2];
  make_pipe(out);
  try {
    make_pipe(err);
  } catch (...) {
    ::close(out[0]);
    ::close(out[1]);
    throw;
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw_error(ErrorKind::kIo, "launch", std::string("open /dev/null: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  // Block signals across fork so the relay's handler never runs in the child
  // (it would write into the launcher's pipe) before dispositions are reset.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0)
    run_child(ChildPlan{devnull, out[1], err[1], parent, &relay, old, command.executable.c_str(), argv.data(),
                        envp.data(), sh_argv.data()});
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(out[1]);
  ::close(err[1]);
  ::close(devnull);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw_error(ErrorKind::kIo, "launch", std::string("fork: ") + std::strerror(fork_errno));
  }
  // Also from the parent, so kill(-pid) reaches the worker even before it ran;
  // after the child's exec this fails with EACCES, which is harmless.
  ::setpgid(pid, pid);
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return SpawnedWorker{pid, out[0], err[0]};
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == kPeerTroubleExitCode)
    return "exited with status " + std::to_string(kPeerTroubleExitCode) + " (a collective or store call failed)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == kStoppedByAnotherRankExitCode)
    return "exited with status " + std::to_string(kStoppedByAnotherRankExitCode) +
           " (stopped because another rank was asked to)";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")" +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

int shell_exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool exited_cleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace gradmesh::elastic
