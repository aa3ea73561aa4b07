#include "gradmesh/scaling/probe.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gradmesh/core/error.h"

namespace gradmesh::scaling {
namespace {

using Json = nlohmann::json;

double number(const Json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()))
    throw_error(ErrorKind::kFormat, where, std::string("field '") + key + "' is missing or not a finite number");
  return it->get<double>();
}

}  // namespace

ProbeMeasurement read_probe(const std::string& metrics_path, int workers, int64_t global_batch, int64_t warmup_steps) {
  std::ifstream in(metrics_path);
  if (!in) throw_error(ErrorKind::kIo, metrics_path, "cannot read the probe's metrics");
  ProbeMeasurement p;
  p.workers = workers;
  p.global_batch = global_batch;
  double step_time_sum = 0;  // seconds: the mean of step times, not of rates (local SGD's windows differ 10x)
  int64_t events = 0, last_step = warmup_steps;
  std::string line;
  for (int64_t number_of_line = 1; std::getline(in, line); ++number_of_line) {
    const std::string where = metrics_path + ":" + std::to_string(number_of_line);
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::exception& e) {
      throw_error(ErrorKind::kFormat, where, std::string("not a JSON line: ") + e.what());
    }
    if (!j.is_object() || j.value("type", "") != "step") continue;
    const auto step = static_cast<int64_t>(number(j, "step", where));
    if (step <= warmup_steps) continue;
    // Each event averages the steps since the previous one: weigh it by them.
    const int64_t covered = step - last_step;
    if (covered <= 0) throw_error(ErrorKind::kFormat, where, "step " + std::to_string(step) + " is not after the previous event's");
    const auto w = static_cast<double>(covered);
    last_step = step;
    p.steps += covered;
    p.data_s += w * number(j, "data_ms", where) / 1e3;
    p.forward_s += w * number(j, "forward_ms", where) / 1e3;
    p.backward_s += w * number(j, "backward_ms", where) / 1e3;
    p.exposed_s += w * number(j, "comm_ms", where) / 1e3;
    p.optimizer_s += w * number(j, "optimizer_ms", where) / 1e3;
    const double rate = number(j, "samples_per_s", where);
    if (!(rate > 0)) throw_error(ErrorKind::kFormat, where, "samples_per_s is not positive");
    step_time_sum += w * static_cast<double>(global_batch) / rate;
    ++events;
  }
  if (events == 0 || p.steps == 0)
    throw_error(ErrorKind::kUsage, metrics_path,
                "no step was logged after the " + std::to_string(warmup_steps) + " warm-up steps; run more steps");
  const double n = static_cast<double>(p.steps);
  p.data_s /= n, p.forward_s /= n, p.backward_s /= n, p.exposed_s /= n, p.optimizer_s /= n;
  p.step_s = step_time_sum / n;
  return p;
}

std::vector<AllreduceSample> read_comm_samples(const std::string& text, const std::string& what) {
  std::vector<AllreduceSample> out;
  std::istringstream in(text);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    const size_t open = line.find('{');
    if (open == std::string::npos) continue;  // a table, a launcher's message
    Json j;
    try {
      j = Json::parse(line.substr(open));
    } catch (const Json::exception&) {
      continue;  // not one of bench comm's objects
    }
    if (!j.is_object() || j.value("op", "") != "allreduce") continue;
    const std::string where = what + " line " + std::to_string(n);
    AllreduceSample s;
    s.bytes = number(j, "bytes", where);
    s.ranks = static_cast<int>(number(j, "ranks", where));
    s.seconds = number(j, "time_us", where) / 1e6;
    const std::string algorithm = j.value("algorithm", "");
    s.algorithm = algorithm == "halving-doubling" ? Algorithm::kHalvingDoubling : Algorithm::kRing;
    if (s.ranks < 2 || !(s.seconds > 0) || s.bytes < 0)
      throw_error(ErrorKind::kFormat, where, "expected ranks >= 2, a positive time and bytes >= 0");
    out.push_back(s);
  }
  return out;
}

double halving_doubling_limit(const std::vector<AllreduceSample>& samples) {
  double limit = 0;
  for (const AllreduceSample& s : samples)
    if (s.algorithm == Algorithm::kHalvingDoubling) limit = std::max(limit, s.bytes);
  return limit;
}

StepModel fit_step_model(const std::vector<ProbeMeasurement>& probes, const LinkCost& link,
                         const std::vector<double>& bucket_bytes, double hd_limit, int shared_cores,
                         const StepModel& shape) {
  GRADMESH_CHECK(!probes.empty(), "at least one probe");
  StepModel m;
  m.shared_cores = shared_cores;
  m.communicate_every = std::max<int64_t>(shape.communicate_every, 1);
  m.overlaps_backward = shape.overlaps_backward;
  m.link = link;
  m.bucket_bytes = bucket_bytes;
  m.halving_doubling_up_to = hd_limit;
  std::vector<std::pair<double, double>> points;
  double backward = 0, compute = 0;
  for (const ProbeMeasurement& p : probes) {
    const auto share = static_cast<double>((p.global_batch + p.workers - 1) / p.workers);
    const double sharing = m.sharing(p.workers);  // time-shared cores stretch every CPU phase
    points.emplace_back(share, p.compute_s() / sharing);
    backward += p.backward_s, compute += p.compute_s();
    m.data_s += p.data_s / sharing / static_cast<double>(probes.size());
    m.optimizer_s += p.optimizer_s / sharing / static_cast<double>(probes.size());
  }
  m.compute = fit_compute(points);
  m.backward_share = compute > 0 ? backward / compute : 0;
  // The overlap each multi-worker probe shows: the share of its backward
  // that hid the communication the link model says it needed.
  double overlap = 0;
  int several = 0;
  for (const ProbeMeasurement& p : probes) {
    if (p.workers < 2) continue;
    const double comm = communication_seconds(m, p.workers);
    const double window = m.backward_share * p.compute_s();  // as it ran, sharing included
    overlap += window > 0 ? std::clamp((comm - p.exposed_s) / window, 0.0, 1.0) : 0.0;
    ++several;
  }
  m.overlap = several > 0 && m.overlaps_backward ? overlap / several : 0;
  return m;
}

}  // namespace gradmesh::scaling
