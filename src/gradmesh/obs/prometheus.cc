#include "gradmesh/obs/prometheus.h"

#include <cmath>
#include <cstdio>

#include "gradmesh/core/error.h"

namespace gradmesh::obs {

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    std::snprintf(text, sizeof(text), "%.0f", value);
  else
    std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

std::string prometheus_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ",";
    out += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += "\"";
  }
  return out + "}";
}

std::string MetricFamily::header(const char* type) const {
  std::string help;
  for (char c : help_) help += c == '\n' ? ' ' : c;
  return "# HELP " + name_ + " " + help + "\n# TYPE " + name_ + " " + type + "\n";
}

void ScalarFamily::change(const Labels& labels, double amount, bool replace) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (replace) values_[labels] = amount;
  else values_[labels] += amount;
}

double ScalarFamily::value(const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

void ScalarFamily::remove(const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  values_.erase(labels);
}

std::string ScalarFamily::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = header(type_);
  for (const auto& [labels, value] : values_) out += name_ + prometheus_labels(labels) + " " + prometheus_number(value) + "\n";
  return out;
}

void CounterFamily::add(const Labels& labels, double amount) {
  GRADMESH_CHECK(amount >= 0, "a counter only goes up: " + name_);
  change(labels, amount, false);
}

HistogramFamily::HistogramFamily(std::string name, std::string help, std::vector<double> bounds)
    : MetricFamily(std::move(name), std::move(help)), bounds_(std::move(bounds)) {
  for (size_t i = 1; i < bounds_.size(); ++i) GRADMESH_CHECK(bounds_[i - 1] < bounds_[i], "histogram bounds ascend");
}

void HistogramFamily::observe(const Labels& labels, double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mutex_);
  Series& s = series_[labels];
  if (s.counts.empty()) s.counts.assign(bounds_.size() + 1, 0);
  ++s.counts[bucket];
  s.sum += value;
  ++s.count;
}

HistogramFamily::Series HistogramFamily::series(const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = series_.find(labels);
  return it == series_.end() ? Series{} : it->second;
}

std::string HistogramFamily::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = header("histogram");
  for (const auto& [labels, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= bounds_.size(); ++b) {
      cumulative += s.counts[b];
      Labels with_le = labels;
      with_le.emplace_back("le", b < bounds_.size() ? prometheus_number(bounds_[b]) : "+Inf");
      out += name_ + "_bucket" + prometheus_labels(with_le) + " " + std::to_string(cumulative) + "\n";
    }
    out += name_ + "_sum" + prometheus_labels(labels) + " " + prometheus_number(s.sum) + "\n";
    out += name_ + "_count" + prometheus_labels(labels) + " " + std::to_string(s.count) + "\n";
  }
  return out;
}

std::vector<double> exponential_bounds(double start, double factor, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i, start *= factor) bounds.push_back(start);
  return bounds;
}

namespace {

// A name names one family: asking again returns it (a second HELP/TYPE
// block would make the whole scrape invalid). Asking for another kind under
// the same name is a bug.
template <class Family, class... Args>
Family& family_named(std::vector<std::unique_ptr<MetricFamily>>& families, const std::string& name, Args&&... args) {
  for (const auto& family : families)
    if (family->name() == name) {
      auto* same = dynamic_cast<Family*>(family.get());
      GRADMESH_CHECK(same != nullptr, "metric " + name + " registered twice with different types");
      return *same;
    }
  families.push_back(std::make_unique<Family>(name, std::forward<Args>(args)...));
  return static_cast<Family&>(*families.back());
}

}  // namespace

CounterFamily& MetricsRegistry::counter(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mutex_);
  return family_named<CounterFamily>(families_, name, help);
}

GaugeFamily& MetricsRegistry::gauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mutex_);
  return family_named<GaugeFamily>(families_, name, help);
}

HistogramFamily& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                            std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mutex_);
  return family_named<HistogramFamily>(families_, name, help, std::move(bounds));
}

std::string MetricsRegistry::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& family : families_) out += family->render();
  return out;
}

}  // namespace gradmesh::obs
