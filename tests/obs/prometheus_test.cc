// Prometheus text exposition: counters, gauges and histograms render as the
// format says (HELP, TYPE, labelled series, cumulative buckets with +Inf,
// _sum and _count), label values are escaped, and updates from many threads
// are all counted.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/obs/prometheus.h"

namespace gradmesh::obs {
namespace {

TEST(Prometheus, CountersAndGaugesRenderWithTheirLabels) {
  MetricsRegistry registry;
  CounterFamily& requests = registry.counter("x_requests_total", "Requests.\nBy status.");
  GaugeFamily& depth = registry.gauge("x_queue_depth", "Waiting.");
  requests.add({{"model", "a"}, {"status", "200"}}, 3);
  requests.add({{"model", "a"}, {"status", "400"}});
  depth.set({{"model", "a"}}, 2.5);
  depth.add({{"model", "a"}}, -0.5);
  EXPECT_EQ(requests.value({{"model", "a"}, {"status", "200"}}), 3);
  EXPECT_EQ(depth.value({{"model", "a"}}), 2);
  depth.set({{"model", "gone"}}, 7);
  depth.remove({{"model", "gone"}});
  EXPECT_EQ(registry.render(),
            "# HELP x_requests_total Requests. By status.\n"
            "# TYPE x_requests_total counter\n"
            "x_requests_total{model=\"a\",status=\"200\"} 3\n"
            "x_requests_total{model=\"a\",status=\"400\"} 1\n"
            "# HELP x_queue_depth Waiting.\n"
            "# TYPE x_queue_depth gauge\n"
            "x_queue_depth{model=\"a\"} 2\n");
}

TEST(Prometheus, ANameIsOneFamilyHoweverOftenItIsAskedFor) {
  MetricsRegistry registry;
  registry.counter("jobs_total", "Jobs.").add({{"rank", "0"}}, 1);
  registry.counter("jobs_total", "Jobs.").add({{"rank", "1"}}, 2);
  const std::string text = registry.render();
  EXPECT_EQ(text.find("# TYPE jobs_total"), text.rfind("# TYPE jobs_total")) << text;
  EXPECT_NE(text.find("jobs_total{rank=\"1\"} 2"), std::string::npos) << text;
  EXPECT_THROW(registry.gauge("jobs_total", "Jobs."), Error) << "another kind under the same name";
}

TEST(Prometheus, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  HistogramFamily h("x_seconds", "Latency.", {0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe({}, v);
  EXPECT_EQ(h.render(),
            "# HELP x_seconds Latency.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.1\"} 2\n"
            "x_seconds_bucket{le=\"1\"} 3\n"
            "x_seconds_bucket{le=\"+Inf\"} 4\n"
            "x_seconds_sum 3.65\n"
            "x_seconds_count 4\n");
  EXPECT_EQ(exponential_bounds(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(Prometheus, LabelValuesAreEscapedAndNumbersSpelledAsTheFormatSays) {
  EXPECT_EQ(prometheus_labels({{"path", "a\"b\\c\nd"}}), "{path=\"a\\\"b\\\\c\\nd\"}");
  EXPECT_EQ(prometheus_labels({}), "");
  EXPECT_EQ(prometheus_number(12), "12");
  EXPECT_EQ(prometheus_number(0.25), "0.25");
  EXPECT_EQ(prometheus_number(1.0 / 0.0), "+Inf");
  EXPECT_EQ(prometheus_number(0.0 / 0.0), "NaN");
}

TEST(Prometheus, UpdatesFromManyThreadsAreAllCounted) {
  CounterFamily c("x_total", "X.");
  HistogramFamily h("x_seconds", "X.", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        c.add({{"k", "v"}});
        h.observe({{"k", "v"}}, 0.5);
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.value({{"k", "v"}}), 8000);
  EXPECT_EQ(h.series({{"k", "v"}}).count, 8000u);
}

}  // namespace
}  // namespace gradmesh::obs
