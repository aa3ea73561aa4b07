#include "gradmesh/bench/http_load.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::bench {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Connection {
  int fd = -1;
  bool busy = false;
  bool writable_wait = false;  // EPOLLOUT armed: connecting, or a request part-sent
  size_t sent = 0;             // bytes of the request in flight written
  double due = 0;              // the request in flight's due time
  std::string in;              // bytes of the answer so far
};

// The answer at the front of `in`: its status and total length, or 0 while
// its head or body is still incomplete.
size_t complete_answer(const std::string& in, int* status, bool* closes) {
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string::npos) return 0;
  if (in.compare(0, 9, "HTTP/1.1 ") != 0 && in.compare(0, 9, "HTTP/1.0 ") != 0)
    throw_error(ErrorKind::kUsage, "bench http", "the server answered something other than HTTP/1.x: " + in.substr(0, 40));
  *status = std::atoi(in.c_str() + 9);
  int64_t length = -1;
  *closes = in.compare(0, 9, "HTTP/1.0 ") == 0;
  for (size_t line = in.find("\r\n") + 2; line < head_end;) {
    const size_t end = in.find("\r\n", line);
    const std::string field = in.substr(line, end - line);
    const size_t colon = field.find(':');
    if (colon != std::string::npos) {
      std::string value = field.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      const std::string name = field.substr(0, colon);
      if (strcasecmp(name.c_str(), "Content-Length") == 0) length = try_parse_int(value, 0).value_or(-1);
      if (strcasecmp(name.c_str(), "Transfer-Encoding") == 0)
        throw_error(ErrorKind::kUsage, "bench http", "the server answered with Transfer-Encoding: " + value +
                                                         "; this generator reads answers with a Content-Length only");
      if (strcasecmp(name.c_str(), "Connection") == 0) *closes = strcasecmp(value.c_str(), "close") == 0;
    }
    line = end + 2;
  }
  if (length < 0) throw_error(ErrorKind::kUsage, "bench http", "an answer without Content-Length: " + in.substr(0, 200));
  const size_t total = head_end + 4 + static_cast<size_t>(length);
  return in.size() >= total ? total : 0;
}

class Generator {
 public:
  explicit Generator(const HttpLoadOptions& o) : o_(o), pool_(static_cast<size_t>(o.connections)) {
    request_ = o.method + " " + o.path + " HTTP/1.1\r\nHost: " + o.host + ":" + std::to_string(o.port) + "\r\n";
    if (!o.body.empty() || o.method == "POST" || o.method == "PUT")
      request_ += "Content-Length: " + std::to_string(o.body.size()) + "\r\n";
    for (const auto& [name, value] : o.headers) request_ += name + ": " + value + "\r\n";
    request_ += "\r\n" + o.body;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(o.port));
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(o.host.c_str(), nullptr, &hints, &found) != 0 || !found)
      throw_error(ErrorKind::kUsage, "bench http", "cannot resolve host '" + o.host + "'");
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
    address_ = addr;
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    timer_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kTimer;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, timer_, &ev);
  }
  ~Generator() {
    for (Connection& c : pool_)
      if (c.fd >= 0) ::close(c.fd);
    ::close(timer_);
    ::close(epoll_);
  }

  HttpLoadResult run() {
    for (size_t i = 0; i < pool_.size(); ++i) open(i);
    const double period = 1.0 / o_.rate;
    const double start = now_seconds() + 0.01, measured_from = start + o_.warmup_seconds,
                 last_due = measured_from + o_.seconds, give_up = last_due + o_.drain_seconds;
    const auto total = static_cast<int64_t>(std::llround((o_.warmup_seconds + o_.seconds) * o_.rate));
    measured_from_ = measured_from;
    int64_t next = 0;
    arm(start);
    epoll_event events[256];
    while (next < total || in_flight_ > 0 || !waiting_.empty()) {
      if (now_seconds() > give_up) break;
      const int n = epoll_wait(epoll_, events, 256, 100);
      for (int e = 0; e < n; ++e) {
        if (events[e].data.u64 == kTimer) {
          uint64_t expirations;
          [[maybe_unused]] const ssize_t r = ::read(timer_, &expirations, sizeof expirations);
          const double now = now_seconds();
          for (; next < total && start + static_cast<double>(next) * period <= now; ++next)
            waiting_.push_back(start + static_cast<double>(next) * period);
          if (next < total) arm(start + static_cast<double>(next) * period);
        } else {
          on_event(static_cast<size_t>(events[e].data.u64), events[e].events);
        }
      }
      dispatch();
    }
    HttpLoadResult r;
    for (Connection& c : pool_)
      if (c.busy && c.due >= measured_from) ++unanswered_;
    for (const double due : waiting_)
      if (due >= measured_from) ++unanswered_;
    r.scheduled = static_cast<int64_t>(latencies_.size()) + unanswered_;
    r.answered = static_cast<int64_t>(latencies_.size());
    r.unanswered = unanswered_;
    r.non_2xx = non_2xx_;
    r.reconnects = reconnects_;
    r.offered_rate = static_cast<double>(r.scheduled) / o_.seconds;
    // Answers that came after the window stretch it: a server that falls
    // behind answers fewer per second than were offered.
    r.achieved_rate = static_cast<double>(r.answered) / std::max(o_.seconds, last_answer_ - measured_from);
    std::vector<double> all = latencies_;
    all.insert(all.end(), static_cast<size_t>(unanswered_), std::numeric_limits<double>::infinity());
    std::sort(all.begin(), all.end());
    auto pct = [&](double p) {
      if (all.empty()) return 0.0;
      const auto at = static_cast<size_t>(std::max(0.0, std::ceil(p * static_cast<double>(all.size())) - 1));
      return all[std::min(at, all.size() - 1)] * 1e3;
    };
    r.p50_ms = pct(0.5), r.p90_ms = pct(0.9), r.p99_ms = pct(0.99), r.p999_ms = pct(0.999), r.max_ms = pct(1.0);
    return r;
  }

 private:
  static constexpr uint64_t kTimer = ~uint64_t{0};

  void arm(double when) {
    itimerspec spec{};
    const double ns = when * 1e9;
    // steady_clock is CLOCK_MONOTONIC on Linux, so its times arm the timer as they are.
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1e9);
    spec.it_value.tv_nsec = static_cast<long>(std::fmod(ns, 1e9));
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    timerfd_settime(timer_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  void open(size_t i) {
    Connection& c = pool_[i];
    c = Connection{};
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&address_), sizeof address_) != 0 && errno != EINPROGRESS)
      throw_error(ErrorKind::kUsage, "bench http",
                  "cannot connect to " + o_.host + ":" + std::to_string(o_.port) + ": " + std::strerror(errno));
    c.writable_wait = true;  // usable once the connect completes
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.u64 = i;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void set_write_wait(size_t i, bool wait) {
    Connection& c = pool_[i];
    if (c.writable_wait == wait) return;
    c.writable_wait = wait;
    epoll_event ev{};
    ev.events = EPOLLIN | (wait ? EPOLLOUT : 0u);
    ev.data.u64 = i;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // The connection failed or the server closed it: a request it carried is
  // lost (counted), and a fresh connection takes its place.
  void reopen(size_t i) {
    Connection& c = pool_[i];
    if (c.busy) {
      --in_flight_;
      if (c.due >= measured_from_) ++unanswered_;
    }
    epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    ++reconnects_;
    open(i);
  }

  void on_event(size_t i, uint32_t events) {
    Connection& c = pool_[i];
    if (events & (EPOLLERR | EPOLLHUP)) {
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == ECONNREFUSED && reconnects_ == 0 && answered_any_ == false)
        throw_error(ErrorKind::kUsage, "bench http", "nothing listens at " + o_.host + ":" + std::to_string(o_.port));
      return reopen(i);
    }
    if (events & EPOLLOUT) {
      if (!c.busy) {
        set_write_wait(i, false);
        idle_.push_back(i);
      } else if (!write_some(i)) {
        return reopen(i);
      }
    }
    if (events & EPOLLIN) read_some(i);
  }

  bool write_some(size_t i) {
    Connection& c = pool_[i];
    while (c.sent < request_.size()) {
      const ssize_t n = ::send(c.fd, request_.data() + c.sent, request_.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_write_wait(i, true);
        return true;
      }
      if (n <= 0) return false;
      c.sent += static_cast<size_t>(n);
    }
    set_write_wait(i, false);
    return true;
  }

  void read_some(size_t i) {
    Connection& c = pool_[i];
    char buffer[65536];
    bool ended = false;  // the server closed (or the connection failed): after the answer it may have sent
    for (;;) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        c.in.append(buffer, static_cast<size_t>(n));
        continue;
      }
      ended = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    int status = 0;
    bool closes = false;
    const size_t length = c.busy ? complete_answer(c.in, &status, &closes) : 0;
    if (length > 0) {
      answered_any_ = true;
      if (c.due >= measured_from_) {
        last_answer_ = now_seconds();
        latencies_.push_back(last_answer_ - c.due);
        if (status < 200 || status > 299) ++non_2xx_;
      }
      c.in.erase(0, length);
      c.busy = false;
      --in_flight_;
    }
    // Bytes beyond the answer were never asked for: that connection is no longer in step.
    if (ended || closes || (!c.busy && !c.in.empty())) return reopen(i);
    if (length > 0) idle_.push_back(i);
  }

  void dispatch() {
    while (!waiting_.empty() && !idle_.empty()) {
      const size_t i = idle_.back();
      idle_.pop_back();
      Connection& c = pool_[i];
      c.busy = true;
      c.sent = 0;
      c.due = waiting_.front();
      waiting_.pop_front();
      ++in_flight_;
      if (!write_some(i)) reopen(i);
    }
  }

  const HttpLoadOptions& o_;
  std::vector<Connection> pool_;
  std::string request_;
  sockaddr_in address_{};
  int epoll_ = -1, timer_ = -1;
  std::deque<double> waiting_;
  std::vector<size_t> idle_;
  int64_t in_flight_ = 0, unanswered_ = 0, non_2xx_ = 0, reconnects_ = 0;
  bool answered_any_ = false;
  double measured_from_ = 0;  // requests due before it are the warm-up
  double last_answer_ = 0;
  std::vector<double> latencies_;
};

}  // namespace

void parse_http_url(const std::string& url, HttpLoadOptions& options, const std::string& what) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    throw_error(ErrorKind::kUsage, what, "is '" + url + "'; expected http://HOST:PORT/PATH");
  const size_t slash = url.find('/', scheme.size());
  const std::string authority = url.substr(scheme.size(), slash == std::string::npos ? std::string::npos : slash - scheme.size());
  options.path = slash == std::string::npos ? "/" : url.substr(slash);
  const size_t colon = authority.rfind(':');
  options.host = authority.substr(0, colon);
  if (options.host.empty()) throw_error(ErrorKind::kUsage, what, "is '" + url + "'; it names no host");
  options.port = colon == std::string::npos ? 80 : static_cast<int>(parse_int(authority.substr(colon + 1), what + " port", 1, 65535));
}

HttpLoadResult run_http_load(const HttpLoadOptions& options) {
  if (!(options.rate > 0) || options.connections < 1 || !(options.seconds > 0) || options.warmup_seconds < 0)
    throw_error(ErrorKind::kUsage, "bench http", "the rate, connections and seconds must be positive");
  Generator generator(options);
  return generator.run();
}

std::string format_http_load_json(const HttpLoadOptions& o, const HttpLoadResult& r) {
  // A latency of an unanswered request is infinite, which JSON writes as null.
  auto ms = [](double v) {
    if (!std::isfinite(v)) return std::string("null");
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", v);
    return std::string(b);
  };
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"offered_rate\": %.1f, \"achieved_rate\": %.1f, \"connections\": %d, \"seconds\": %.1f, "
                "\"scheduled\": %lld, \"answered\": %lld, \"non_2xx\": %lld, \"unanswered\": %lld, \"reconnects\": %lld, ",
                r.offered_rate, r.achieved_rate, o.connections, o.seconds, static_cast<long long>(r.scheduled),
                static_cast<long long>(r.answered), static_cast<long long>(r.non_2xx),
                static_cast<long long>(r.unanswered), static_cast<long long>(r.reconnects));
  return head + std::string("\"p50_ms\": ") + ms(r.p50_ms) + ", \"p90_ms\": " + ms(r.p90_ms) + ", \"p99_ms\": " +
         ms(r.p99_ms) + ", \"p999_ms\": " + ms(r.p999_ms) + ", \"max_ms\": " + ms(r.max_ms) + "}\n";
}

}  // namespace gradmesh::bench
