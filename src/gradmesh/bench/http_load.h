// `gradmesh bench http`: an open-loop HTTP/1.1 load generator. Requests are
// scheduled at a fixed offered rate whatever the server does, and each one's
// latency counts from when it was due, not from when a connection was free
// to send it: a server that falls behind shows its queue in the latency
// instead of slowing the client down (a closed-loop tool such as wrk sends
// the next request only when the last one is answered, which hides queueing).
//
// One thread and epoll over a pool of keep-alive connections; a request due
// while every connection is busy waits in a queue and is sent on the next
// free one. Responses are read by Content-Length. A connection the server
// closes is opened again.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gradmesh::bench {

struct HttpLoadOptions {
  std::string host = "127.0.0.1";
  int port = 80;
  std::string method = "GET";
  std::string path = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  double rate = 1000;         // requests per second offered
  int connections = 64;       // the pool: at most this many requests in flight
  double seconds = 5;         // measured
  double warmup_seconds = 1;  // sent at the same rate before, not measured
  double drain_seconds = 5;   // after the last request is due, how long answers may take
};

struct HttpLoadResult {
  double offered_rate = 0;   // requests per second scheduled in the measured window
  double achieved_rate = 0;  // of those, answered per second of the window
  int64_t scheduled = 0;     // due in the measured window
  int64_t answered = 0;      // of those, answered (any status)
  int64_t non_2xx = 0;       // answered with a status outside 200-299
  int64_t unanswered = 0;    // no answer before the drain ended, or the connection failed
  int64_t reconnects = 0;
  // Latency from due time to the last byte of the answer, milliseconds
  // (unanswered requests count as the longest).
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
};

// Parses "http://host:port/path" into options.host, port and path;
// Error(kUsage) naming `what` for anything else.
void parse_http_url(const std::string& url, HttpLoadOptions& options, const std::string& what);

// Runs the schedule; Error(kUsage) for an unreachable server or bad options.
HttpLoadResult run_http_load(const HttpLoadOptions& options);

// One JSON object and a newline.
std::string format_http_load_json(const HttpLoadOptions& options, const HttpLoadResult& result);

}  // namespace gradmesh::bench
