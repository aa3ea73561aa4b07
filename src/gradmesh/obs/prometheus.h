// Metrics in Prometheus's text exposition format (version 0.0.4): counters,
// gauges and histograms, each a family of series told apart by labels,
// updated from any thread and rendered on a scrape.
//
//   # HELP gradmesh_serve_requests_total Requests answered, by model and HTTP status.
//   # TYPE gradmesh_serve_requests_total counter
//   gradmesh_serve_requests_total{model="mlp",status="200"} 12
//
// Names follow Prometheus's conventions: base units (seconds, bytes), a
// `_total` suffix on counters. Label values are escaped (\\, \", \n).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gradmesh::obs {

using Labels = std::vector<std::pair<std::string, std::string>>;  // in the order they are printed

class MetricFamily {
 public:
  virtual ~MetricFamily() = default;
  const std::string& name() const { return name_; }
  // The family's lines: HELP, TYPE, then every series in label order.
  virtual std::string render() const = 0;

 protected:
  MetricFamily(std::string name, std::string help) : name_(std::move(name)), help_(std::move(help)) {}
  std::string header(const char* type) const;
  std::string name_, help_;
  mutable std::mutex mutex_;
};

// A family whose series are one number each (counters, gauges).
class ScalarFamily : public MetricFamily {
 public:
  double value(const Labels& labels) const;  // 0 for a series never touched
  void remove(const Labels& labels);          // the series is no longer exported
  std::string render() const override;

 protected:
  ScalarFamily(std::string name, std::string help, const char* type)
      : MetricFamily(std::move(name), std::move(help)), type_(type) {}
  void change(const Labels& labels, double amount, bool replace);

 private:
  const char* type_;
  std::map<Labels, double> values_;
};

class CounterFamily : public ScalarFamily {
 public:
  CounterFamily(std::string name, std::string help) : ScalarFamily(std::move(name), std::move(help), "counter") {}
  void add(const Labels& labels, double amount = 1);  // REQUIRES: amount >= 0
};

class GaugeFamily : public ScalarFamily {
 public:
  GaugeFamily(std::string name, std::string help) : ScalarFamily(std::move(name), std::move(help), "gauge") {}
  void set(const Labels& labels, double value) { change(labels, value, true); }
  void add(const Labels& labels, double amount) { change(labels, amount, false); }
};

class HistogramFamily : public MetricFamily {
 public:
  // `bounds`: the buckets' upper bounds, ascending; +Inf is added.
  HistogramFamily(std::string name, std::string help, std::vector<double> bounds);
  void observe(const Labels& labels, double value);
  struct Series {
    std::vector<uint64_t> counts;  // per bucket (not cumulative), the last one +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Series series(const Labels& labels) const;  // empty counts for a series never touched
  std::string render() const override;

 private:
  std::vector<double> bounds_;
  std::map<Labels, Series> series_;
};

// Bounds from `start` multiplied by `factor`, `count` of them.
std::vector<double> exponential_bounds(double start, double factor, int count);

// The families of one endpoint, rendered in the order they were added.
class MetricsRegistry {
 public:
  CounterFamily& counter(const std::string& name, const std::string& help);
  GaugeFamily& gauge(const std::string& name, const std::string& help);
  HistogramFamily& histogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<MetricFamily>> families_;
};

// A number as Prometheus prints it: integers without a fraction, +Inf, NaN.
std::string prometheus_number(double value);
// `{a="x",b="y"}` with values escaped; "" for no labels.
std::string prometheus_labels(const Labels& labels);

}  // namespace gradmesh::obs
