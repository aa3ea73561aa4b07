// Reading an MDS set over HTTP (data/shard_files.h, data/http_shard_files.cc,
// data/block_cache.h): a real cpp-httplib server on loopback serves a set
// MdsWriter wrote, as a static file server does (set_mount_point, which
// answers Range requests) and through a route that misbehaves on demand.
// Every sample read over HTTP equals the local read, from one thread or
// four; the block cache keeps to its budget; and every way a server can fail
// (it ignores Range, a 404, a short, cut or wrong reply, a 5xx, too slow,
// gone) is an Error naming the URL, never a crash or a hang.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/data/block_cache.h"
#include "gradmesh/data/mds.h"
#include "support/error_from.h"
#include "support/temp_dir.h"

namespace gradmesh::data {
namespace {

using gradmesh::testing::error_from;
using std::chrono::milliseconds;

constexpr int64_t kHttpShardsSamples = 240;

// Sample i's payload: 0 to 2999 bytes, so samples cross 1 KiB cache blocks.
std::string http_shards_payload(int64_t i) {
  std::string p(static_cast<size_t>((i * 977) % 3000), '\0');
  for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>((i * 31 + static_cast<int64_t>(k) * 7) % 251);
  return p;
}

// What the /odd route does to a shard's range request.
enum class HttpShardFault { kNone, kWholeBody, kShortBody, kCutBody, kWrongRange, kServerError, kSlow };

class HttpShards : public ::testing::Test {
 protected:
  void SetUp() override {
    MdsWriter writer(set_dir(), {{"id", "int", std::nullopt}, {"payload", "bytes", std::nullopt}}, 16 << 10);
    for (int64_t i = 0; i < kHttpShardsSamples; ++i) {
      const int64_t id = i * 1000 + 7;
      const std::string payload = http_shards_payload(i);
      writer.add({std::string_view(reinterpret_cast<const char*>(&id), 8), payload});
    }
    writer.finish();
    server_.set_mount_point("/set", set_dir());
    server_.Get(R"(/odd/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) { serve_oddly(req, res); });
    // Counted before the reply goes out, so a test that has its reply sees the count.
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response&) {
      if (req.path.ends_with(".mds")) ++shard_requests_;
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // As production servers do: with Nagle's algorithm the body, written
    // after the headers, would wait for the client's delayed ACK (40 ms a reply).
    server_.set_tcp_nodelay(true);
    server_.set_keep_alive_timeout(1);
    server_.set_keep_alive_max_count(100);
    // cpp-httplib listens with a backlog of 5: the 8 connections a reader
    // opens at once would overflow it, and a dropped SYN costs a 1 s
    // retransmit. Production servers listen with hundreds; so does this one.
    int listening = -1;
    server_.set_socket_options([&listening](int sock) { listening = sock; });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    ASSERT_EQ(::listen(listening, 128), 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 2000 && !server_.is_running(); ++i) std::this_thread::sleep_for(milliseconds(1));
    ASSERT_TRUE(server_.is_running());
  }
  void TearDown() override { stop_server(); }

  void stop_server() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  std::string set_dir() const { return dir_.file("set"); }
  std::string shard_file(size_t s) const {
    char name[32];
    std::snprintf(name, sizeof name, "shard.%05zu.mds", s);
    return name;
  }
  std::string url(const std::string& route = "set") const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + route;
  }
  // Fails fast: a short timeout, one retry after 5 ms.
  static MdsReadOptions quick_options() {
    MdsReadOptions o;
    o.timeout = milliseconds(2000);
    o.retries = 1;
    o.retry_backoff = milliseconds(5);
    return o;
  }
  std::vector<std::vector<std::string>> local_samples() const {
    const MdsReader local(set_dir());
    std::vector<std::vector<std::string>> all;
    for (int64_t i = 0; i < local.count(); ++i) all.push_back(local.sample(i));
    return all;
  }

  // Honest for index.json, for requests without Range and once the faults
  // are spent; otherwise the fault. httplib cuts whatever body a handler
  // sets down to the request's range itself, so a fault that answers for
  // itself clears the parsed range first.
  void serve_oddly(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1].str();
    const std::string bytes = gradmesh::testing::read_file(set_dir() + "/" + name);
    const HttpShardFault fault = fault_.load();
    if (name == "index.json" || req.ranges.empty() || fault == HttpShardFault::kNone || faults_left_-- <= 0) {
      res.set_content(bytes, "application/octet-stream");
      return;
    }
    if (fault == HttpShardFault::kSlow) {
      std::this_thread::sleep_for(milliseconds(700));
      res.set_content(bytes, "application/octet-stream");
      return;
    }
    const auto first = static_cast<size_t>(req.ranges[0].first), last = static_cast<size_t>(req.ranges[0].second);
    const size_t length = last - first + 1;
    const std::string total = "/" + std::to_string(bytes.size());
    const std::string asked = "bytes " + std::to_string(first) + "-" + std::to_string(last) + total;
    const_cast<httplib::Request&>(req).ranges.clear();
    res.status = 206;
    switch (fault) {
      case HttpShardFault::kWholeBody:
        res.status = 200;
        res.set_content(bytes, "application/octet-stream");
        break;
      case HttpShardFault::kShortBody:
        res.set_header("Content-Range", asked);
        res.set_content(bytes.substr(first, length / 2), "application/octet-stream");
        break;
      case HttpShardFault::kCutBody:  // Content-Length promises `length`; the connection closes halfway
        res.set_header("Content-Range", asked);
        res.set_content_provider(length, "application/octet-stream",
                                 [half = bytes.substr(first, length / 2)](size_t, size_t, httplib::DataSink& sink) {
                                   sink.write(half.data(), half.size());
                                   return false;
                                 });
        break;
      case HttpShardFault::kWrongRange:
        res.set_header("Content-Range", "bytes " + std::to_string(first + 1) + "-" + std::to_string(last + 1) + total);
        res.set_content(bytes.substr(first + 1, length), "application/octet-stream");
        break;
      default:
        res.status = 503;
        break;
    }
  }

  gradmesh::testing::TempDir dir_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<int> shard_requests_{0};
  std::atomic<HttpShardFault> fault_{HttpShardFault::kNone};
  std::atomic<int> faults_left_{1 << 30};  // shard requests that still get the fault
};

TEST_F(HttpShards, EverySampleReadOverHttpEqualsTheLocalRead) {
  const std::vector<std::vector<std::string>> local = local_samples();
  const MdsReader remote(url());
  EXPECT_EQ(remote.dir(), url());
  ASSERT_EQ(remote.count(), kHttpShardsSamples);
  EXPECT_GT(remote.shards().size(), 5u);
  for (int64_t i = 0; i < remote.count(); ++i) {
    const std::vector<std::string> v = remote.sample(i);
    ASSERT_EQ(v, local[static_cast<size_t>(i)]) << i;
    ASSERT_EQ(v[1], http_shards_payload(i)) << i;
  }
  for (size_t s = 0; s < remote.shards().size(); ++s) EXPECT_EQ(remote.verify_shard(s), "") << s;
}

TEST_F(HttpShards, ASecondPassThroughABigCacheFetchesNothing) {
  MdsReadOptions o;
  o.cache_block_bytes = 1024;
  const MdsReader remote(url(), o);
  int64_t set_bytes = 0;
  for (const MdsShardInfo& s : remote.shards()) set_bytes += s.bytes;
  const auto index_bytes = static_cast<int64_t>(std::filesystem::file_size(set_dir() + "/index.json"));
  for (int64_t i = 0; i < remote.count(); ++i) remote.sample(i);
  const int64_t fetched = remote.bytes_read();
  const int requests = shard_requests_.load();
  // Each block once: the set, the shards' 4-byte heads read at open, index.json.
  EXPECT_LE(fetched, set_bytes + 4 * static_cast<int64_t>(remote.shards().size()) + index_bytes);
  EXPECT_GE(fetched, set_bytes / 2);
  for (int64_t i = remote.count() - 1; i >= 0; --i) remote.sample(i);
  EXPECT_EQ(remote.bytes_read(), fetched);
  EXPECT_EQ(shard_requests_.load(), requests);
}

TEST_F(HttpShards, ATinyCacheEvictsWhatItCannotHoldAndFetchesItAgain) {
  MdsReadOptions o;
  o.cache_block_bytes = 1024;
  o.cache_bytes = 4096;  // four blocks, fewer than shard 0's
  const MdsReader remote(url(), o);
  const int64_t in_shard0 = remote.shards()[0].samples;
  for (int64_t i = 0; i < in_shard0; ++i) remote.sample(i);
  int64_t before = remote.bytes_read();
  remote.sample(in_shard0 - 1);  // just read: still cached
  EXPECT_EQ(remote.bytes_read(), before);
  remote.sample(1);  // read long ago: evicted
  EXPECT_GT(remote.bytes_read(), before);
  before = remote.bytes_read();
  for (int64_t i = 0; i < remote.count(); ++i) remote.sample(i);
  const int64_t one_pass = remote.bytes_read() - before;
  for (int64_t i = 0; i < remote.count(); ++i) remote.sample(i);
  EXPECT_GT(remote.bytes_read() - before, one_pass * 3 / 2) << "a second pass through a tiny cache should fetch again";
}

TEST_F(HttpShards, NoCacheReadsExactlyTheBytesOfEachSample) {
  MdsReadOptions o;
  o.cache_bytes = 0;
  const MdsReader remote(url(), o);
  const int64_t before = remote.bytes_read();
  remote.sample(10);
  // Its two offsets (8 bytes), its column size (4 bytes), its id (8 bytes) and its payload.
  EXPECT_EQ(remote.bytes_read() - before, 8 + 4 + 8 + static_cast<int64_t>(http_shards_payload(10).size()));
}

TEST_F(HttpShards, AServerThatIgnoresRangeIsNamed) {
  fault_ = HttpShardFault::kWholeBody;
  const Error e = error_from([&] { MdsReader(url("odd"), quick_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find(url("odd") + "/shard.000"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("ignores Range"), std::string::npos) << e.what();
}

TEST_F(HttpShards, AMissingShardOrIndexIsA404NamingItsUrl) {
  std::filesystem::remove(set_dir() + "/" + shard_file(2));
  const Error shard = error_from([&] { MdsReader(url(), quick_options()); });
  EXPECT_EQ(shard.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(shard.what()).find(url() + "/" + shard_file(2)), std::string::npos) << shard.what();
  EXPECT_NE(std::string(shard.what()).find("HTTP 404"), std::string::npos) << shard.what();
  const Error index = error_from([&] { MdsReader(url("no/such/set"), quick_options()); });
  EXPECT_NE(std::string(index.what()).find(url("no/such/set") + "/index.json"), std::string::npos) << index.what();
  EXPECT_NE(std::string(index.what()).find("404"), std::string::npos) << index.what();
}

TEST_F(HttpShards, AShardOfAnotherSizeOnTheServerIsAFormatErrorNamingItsUrl) {
  const std::string path = set_dir() + "/" + shard_file(1);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  const Error e = error_from([&] { MdsReader(url(), quick_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  EXPECT_NE(std::string(e.what()).find(url() + "/" + shard_file(1)), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("index.json says"), std::string::npos) << e.what();
}

// Faults that start after the set is open: each read fails naming the shard's
// URL and what was wrong, and once the server behaves the same reader reads again.
TEST_F(HttpShards, AShortCutOrWrongReplyIsNamedAndTheNextReadRecovers) {
  MdsReadOptions o = quick_options();
  o.cache_bytes = 0;
  const MdsReader remote(url("odd"), o);
  const std::vector<std::vector<std::string>> local = local_samples();
  const std::string shard0 = url("odd") + "/" + shard_file(0) + ": bytes ";
  const std::pair<HttpShardFault, std::string> cases[] = {
      {HttpShardFault::kShortBody, "bytes of the"},
      {HttpShardFault::kCutBody, "the connection was closed after"},
      {HttpShardFault::kWrongRange, "the server answered Content-Range"},
      {HttpShardFault::kServerError, "HTTP 503 (a server error) (2 tries)"},
  };
  for (const auto& [fault, expected] : cases) {
    fault_ = fault;
    const Error e = error_from([&] { remote.sample(3); });
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(shard0), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(reading sample 3)"), std::string::npos) << e.what();
    fault_ = HttpShardFault::kNone;
    EXPECT_EQ(remote.sample(3), local[3]);
  }
}

TEST_F(HttpShards, AServerErrorIsTriedAgain) {
  MdsReadOptions o = quick_options();
  o.cache_bytes = 0;
  o.retries = 2;
  const MdsReader remote(url("odd"), o);
  faults_left_ = 2;
  fault_ = HttpShardFault::kServerError;
  const int before = shard_requests_.load();
  EXPECT_EQ(remote.sample(7), local_samples()[7]);
  EXPECT_EQ(shard_requests_.load() - before, 2 + 2);  // the offsets after two 503s, then the sample
}

TEST_F(HttpShards, ASlowServerTimesOut) {
  MdsReadOptions o = quick_options();
  o.timeout = milliseconds(200);
  const MdsReader remote(url("odd"), o);
  fault_ = HttpShardFault::kSlow;  // each reply 700 ms late
  const auto started = std::chrono::steady_clock::now();
  const Error e = error_from([&] { remote.sample(0); });
  EXPECT_LT(std::chrono::steady_clock::now() - started, milliseconds(1200)) << "two tries of 200 ms";
  EXPECT_NE(std::string(e.what()).find(url("odd") + "/" + shard_file(0)), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("no reply within 200 ms"), std::string::npos) << e.what();
}

TEST_F(HttpShards, AServerThatIsGoneIsAnErrorNotAHang) {
  const MdsReader remote(url(), quick_options());
  remote.sample(0);
  stop_server();
  const auto started = std::chrono::steady_clock::now();
  const Error e = error_from([&] { remote.sample(remote.count() - 1); });
  EXPECT_LT(std::chrono::steady_clock::now() - started, milliseconds(3000));
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find(url() + "/shard."), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  const Error opening = error_from([&] { MdsReader(url(), quick_options()); });
  EXPECT_NE(std::string(opening.what()).find(url() + "/index.json"), std::string::npos) << opening.what();
}

TEST_F(HttpShards, UrlsItCannotReadAreRefusedUpFront) {
  EXPECT_EQ(error_from([] { MdsReader("s3://bucket/set"); }).kind(), ErrorKind::kUsage);
  const Error credentials = error_from([&] { MdsReader("http://user:secret@127.0.0.1:" + std::to_string(port_) + "/set"); });
  EXPECT_EQ(credentials.kind(), ErrorKind::kUsage);
  EXPECT_NE(std::string(credentials.what()).find("without authentication"), std::string::npos) << credentials.what();
  EXPECT_EQ(error_from([&] { MdsReader(url() + "?token=1"); }).kind(), ErrorKind::kUsage);
}

TEST_F(HttpShards, VerificationOverHttpFindsABadChecksum) {
  const std::string path = set_dir() + "/" + shard_file(2);
  std::string bytes = gradmesh::testing::read_file(path);
  bytes[bytes.size() - 5] ^= 0x5a;  // a payload byte: the shard still parses
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  const MdsReader remote(url());
  EXPECT_EQ(remote.verify_shard(1), "");
  const int64_t before = remote.bytes_read();
  const std::string wrong = remote.verify_shard(2);
  EXPECT_NE(wrong.find("index.json says"), std::string::npos) << wrong;
  EXPECT_EQ(remote.bytes_read() - before, remote.shards()[2].bytes);
}

// Four threads through one small cache (much eviction, blocks fetched by one
// thread while others wait for them), each in its own order.
TEST_F(HttpShards, FourThreadsReadTheSameAsTheLocalRead) {
  const std::vector<std::vector<std::string>> local = local_samples();
  MdsReadOptions o = quick_options();
  o.cache_block_bytes = 1024;
  o.cache_bytes = 8192;
  const MdsReader remote(url(), o);
  std::atomic<int> wrong{0};
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int64_t k = 0; k < 2 * kHttpShardsSamples; ++k) {
          const int64_t i = (k * (2 * t + 1) + t * 13) % kHttpShardsSamples;
          if (remote.sample(i) != local[static_cast<size_t>(i)]) ++wrong;
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

// The cache alone: random reads from four threads never see it above its
// budget, always get the files' bytes, and a failed fetch is fetched again.
TEST(HttpShardsCache, StaysWithinItsBudgetAndRecoversFromAFailedFetch) {
  const std::vector<int64_t> sizes = {10000, 4321};
  auto byte_at = [](size_t f, int64_t at) { return static_cast<char>((static_cast<int64_t>(f) * 97 + at * 13) % 256); };
  std::atomic<int> fail_next{0};
  std::atomic<int64_t> fetched{0};
  BlockCache cache(sizes, 1000, 3500, [&](size_t f, int64_t begin, int64_t end, char* out) {
    if (fail_next.exchange(0)) throw Error(ErrorKind::kIo, "fetch failed on purpose");
    for (int64_t at = begin; at < end; ++at) out[at - begin] = byte_at(f, at);
    fetched += end - begin;
  });
  std::atomic<int> wrong{0}, over_budget{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      uint64_t state = 12345 + static_cast<uint64_t>(t);
      std::string buffer;
      for (int k = 0; k < 2000; ++k) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        const size_t f = (state >> 60) % 2;
        const auto offset = static_cast<int64_t>((state >> 20) % static_cast<uint64_t>(sizes[f]));
        const int64_t bytes = std::min<int64_t>(static_cast<int64_t>((state >> 8) % 2500) + 1, sizes[f] - offset);
        buffer.assign(static_cast<size_t>(bytes), '\0');
        cache.read(f, offset, buffer.data(), bytes);
        for (int64_t j = 0; j < bytes; ++j) wrong += buffer[static_cast<size_t>(j)] != byte_at(f, offset + j);
        over_budget += cache.held_bytes() > 3500;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(over_budget.load(), 0);
  EXPECT_LE(cache.held_bytes(), 3500);
  EXPECT_GT(fetched.load(), sizes[0] + sizes[1]) << "nothing was evicted: the test reads too little";
  // A read whose fetch fails leaves nothing cached: the same read then succeeds.
  std::string buffer(10, '\0');
  BlockCache fresh(sizes, 1000, 3500, [&](size_t f, int64_t begin, int64_t end, char* out) {
    if (fail_next.exchange(0)) throw Error(ErrorKind::kIo, "fetch failed on purpose");
    for (int64_t at = begin; at < end; ++at) out[at - begin] = byte_at(f, at);
  });
  fail_next = 1;
  EXPECT_THROW(fresh.read(1, 100, buffer.data(), 10), Error);
  EXPECT_EQ(fresh.held_bytes(), 0);
  fresh.read(1, 100, buffer.data(), 10);
  for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(buffer[static_cast<size_t>(j)], byte_at(1, 100 + j));
  EXPECT_EQ(fresh.held_bytes(), 1000);
}

}  // namespace
}  // namespace gradmesh::data
