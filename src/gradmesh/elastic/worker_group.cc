#include "gradmesh/elastic/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gradmesh/core/error.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh::elastic {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// Reads per stream per pump: keeps one chatty worker from starving the others.
constexpr int kMaxReadsPerPump = 16;
// After a worker exited its pipes hold at most what it wrote last (a pipe
// buffer); the bound only matters if a leftover child keeps writing.
constexpr int kMaxReadsAfterExit = 1024;

}  // namespace

WorkerGroup::WorkerGroup(std::vector<WorkerSpec> specs, std::string log_dir, bool truncate_logs)
    : log_dir_(std::move(log_dir)), truncate_logs_(truncate_logs) {
  workers_.reserve(specs.size());
  for (WorkerSpec& spec : specs) workers_.push_back(Worker{std::move(spec), -1, false, -1, {}, {}});
}

WorkerGroup::~WorkerGroup() {
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    ::kill(-w.pid, SIGKILL);
    if (!w.exited) {
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    close_stream(w.out);
    close_stream(w.err);
    if (w.log_fd >= 0) ::close(w.log_fd);
  }
}

void WorkerGroup::open_log(Worker& w, bool truncate) const {
  if (log_dir_.empty()) return;
  const std::string path = log_dir_ + "/rank_" + std::to_string(w.spec.rank) + ".log";
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  w.log_fd = ::open(path.c_str(), flags, kPrivateFileMode);
  if (w.log_fd < 0)
    throw_error(ErrorKind::kIo, path, std::string("cannot open the rank's log file: ") + std::strerror(errno) +
                                          "; check --log-dir");
}

void WorkerGroup::start(const SignalRelay& relay) {
  if (!log_dir_.empty()) {
    std::error_code ec;
    create_private_directories(log_dir_, ec);
    if (ec) throw_error(ErrorKind::kIo, log_dir_, "cannot create the log directory: " + ec.message() + "; check --log-dir");
  }
  // A failure part-way leaves the started workers to the destructor, which kills them.
  for (Worker& w : workers_) {
    open_log(w, truncate_logs_);
    spawn(w, relay);
  }
}

void WorkerGroup::spawn(Worker& w, const SignalRelay& relay) {
  const SpawnedWorker spawned = spawn_worker(w.spec.command, relay);
  w.pid = spawned.pid;
  w.exited = false;
  const std::string prefix = "[rank " + std::to_string(w.spec.rank) + "]: ";
  w.out = Stream{spawned.stdout_fd, std::make_unique<LinePrefixer>(prefix, STDOUT_FILENO, w.log_fd)};
  w.err = Stream{spawned.stderr_fd, std::make_unique<LinePrefixer>(prefix, STDERR_FILENO, w.log_fd)};
}

void WorkerGroup::respawn(int local_rank, WorkerCommand command, const SignalRelay& relay) {
  const auto it = std::find_if(workers_.begin(), workers_.end(),
                               [local_rank](const Worker& w) { return w.spec.local_rank == local_rank; });
  GRADMESH_CHECK(it != workers_.end() && it->exited, "only an exited worker can be replaced");
  // Anything the old worker left in its process group goes with it.
  ::kill(-it->pid, SIGKILL);
  it->spec.command = std::move(command);
  open_log(*it, false);
  spawn(*it, relay);
}

std::vector<RunningWorker> WorkerGroup::running_workers() const {
  std::vector<RunningWorker> out;
  for (const Worker& w : workers_)
    if (w.pid > 0 && !w.exited) out.push_back(RunningWorker{w.spec.rank, w.spec.local_rank, w.pid});
  return out;
}

bool WorkerGroup::read_stream(Stream& stream, int max_reads) {
  char buf[kReadChunk];
  for (int i = 0; i < max_reads && stream.fd >= 0; ++i) {
    const ssize_t n = ::read(stream.fd, buf, sizeof buf);
    if (n > 0) {
      stream.prefixer->feed(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else {
      close_stream(stream);  // EOF, or an error that ends the stream all the same
      return false;
    }
  }
  return stream.fd >= 0;
}

void WorkerGroup::close_stream(Stream& stream) {
  if (stream.fd < 0) return;
  if (stream.prefixer) stream.prefixer->finish();
  ::close(stream.fd);
  stream.fd = -1;
}

void WorkerGroup::reap(std::vector<WorkerExit>& exits) {
  for (Worker& w : workers_) {
    if (w.pid <= 0 || w.exited) continue;
    int status = 0;
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    GRADMESH_CHECK(r == w.pid, "waitpid(" + std::to_string(w.pid) + "): " + std::strerror(errno));
    w.exited = true;
    // Whatever the worker wrote before it exited is in the pipe now; take it,
    // then stop listening (a background child still holding the pipe must not
    // keep the launcher waiting).
    read_stream(w.out, kMaxReadsAfterExit);
    read_stream(w.err, kMaxReadsAfterExit);
    close_stream(w.out);
    close_stream(w.err);
    if (w.log_fd >= 0) ::close(w.log_fd);
    w.log_fd = -1;
    exits.push_back(WorkerExit{w.spec.rank, w.spec.local_rank, w.pid, status});
  }
}

std::vector<WorkerExit> WorkerGroup::pump(std::chrono::milliseconds timeout, int wake_fd) {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  for (Worker& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) {
      if (s->fd < 0) continue;
      fds.push_back(pollfd{s->fd, POLLIN, 0});
      streams.push_back(s);
    }
  }
  if (wake_fd >= 0) fds.push_back(pollfd{wake_fd, POLLIN, 0});
  const int ms = static_cast<int>(std::max<int64_t>(0, timeout.count()));
  if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR)
    throw_error(ErrorKind::kIo, "launch", std::string("poll: ") + std::strerror(errno));
  for (size_t i = 0; i < streams.size(); ++i)
    if (fds[i].revents != 0) read_stream(*streams[i], kMaxReadsPerPump);
  std::vector<WorkerExit> exits;
  reap(exits);
  return exits;
}

void WorkerGroup::signal_all(int sig) {
  for (const Worker& w : workers_)
    if (w.pid > 0) ::kill(-w.pid, sig);
}

int WorkerGroup::running() const {
  int n = 0;
  for (const Worker& w : workers_) n += w.pid > 0 && !w.exited;
  return n;
}

}  // namespace gradmesh::elastic
