#include "gradmesh/obs/run_log.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "gradmesh/core/error.h"

namespace gradmesh::obs {
namespace {

using LineJson = nlohmann::json;

double line_number(const LineJson& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

int64_t line_integer(const LineJson& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? static_cast<int64_t>(it->get<double>()) : 0;
}

std::string line_text(const LineJson& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// "rank 3", or "node 1" when no single rank failed but a node did (a lost
// node), or "the job" when neither is known (the store was lost).
std::string failed_part_text(const LineJson& j) {
  const std::string rank = line_text(j, "failed_rank"), node = line_text(j, "failed_node");
  if (!rank.empty() && rank != "-1") return "rank " + rank;
  if (!node.empty() && node != "-1") return "node " + node;
  return "the job";
}

std::vector<double> line_numbers(const LineJson& j) {
  std::vector<double> out;
  if (j.is_array())
    for (const LineJson& v : j) out.push_back(v.is_number() ? v.get<double>() : 0.0);
  return out;
}

std::map<std::string, double> line_number_fields(const LineJson& j) {
  std::map<std::string, double> out;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it->is_number()) out[it.key()] = it->get<double>();
  return out;
}

void read_step(const LineJson& j, RunLog& log) {
  StepRecord s;
  s.step = line_integer(j, "step"), s.epoch = line_integer(j, "epoch");
  s.time = line_number(j, "time"), s.loss = line_number(j, "loss"), s.samples_per_s = line_number(j, "samples_per_s");
  if (const auto it = j.find("phases"); it != j.end() && it->is_array()) {
    std::vector<std::string> names;
    for (const LineJson& name : *it) names.push_back(name.is_string() ? name.get<std::string>() : "?");
    log.phases = names;
  }
  if (log.phases.empty()) log.phases = {"data", "forward", "backward", "comm", "optimizer"};
  for (const std::string& phase : log.phases) s.phase_ms.push_back(line_number(j, (phase + "_ms").c_str()));
  if (const auto it = j.find("rank_phase_ms"); it != j.end() && it->is_array())
    for (const LineJson& row : *it) s.rank_phase_ms.push_back(line_numbers(row));
  log.steps.push_back(std::move(s));
}

void read_usage(const LineJson& j, RunLog& log) {
  UsageRecord u;
  u.time = line_number(j, "time"), u.step = line_integer(j, "step");
  u.prices.currency = line_text(j, "currency");
  const auto examples = j.find("example_prices");
  u.prices.examples = examples == j.end() || !examples->is_boolean() || examples->get<bool>();
  if (const auto it = j.find("prices"); it != j.end() && it->is_object()) {
    u.prices.core_hour = line_number(*it, "core_hour");
    u.prices.storage_gb_month = line_number(*it, "storage_gb_month");
    u.prices.egress_gb = line_number(*it, "egress_gb");
  }
  if (const auto it = j.find("cost"); it != j.end() && it->is_object()) {
    u.cost.compute = line_number(*it, "compute"), u.cost.storage = line_number(*it, "storage");
    u.cost.egress = line_number(*it, "egress");
  }
  if (const auto it = j.find("totals"); it != j.end()) u.totals = line_number_fields(*it);
  if (const auto it = j.find("ranks"); it != j.end() && it->is_object())
    for (auto r = it->begin(); r != it->end(); ++r) u.ranks[r.key()] = line_numbers(*r);
  if (const auto it = j.find("backends"); it != j.end() && it->is_object())
    for (auto b = it->begin(); b != it->end(); ++b) u.backends[b.key()] = line_number_fields(*b);
  if (const auto it = j.find("processes"); it != j.end() && it->is_array())
    for (const LineJson& p : *it) u.processes.push_back(p.is_string() ? p.get<std::string>() : "");
  log.usage = std::move(u);
}

void add_event(RunLog& log, RunEvent::Kind kind, const LineJson& j, std::string description) {
  log.events.push_back({kind, line_number(j, "time"), line_integer(j, "step"), std::move(description)});
}

}  // namespace

const char* run_event_name(RunEvent::Kind kind) {
  switch (kind) {
    case RunEvent::Kind::kRestart: return "restart";
    case RunEvent::Kind::kResume: return "resume";
    case RunEvent::Kind::kCheckpoint: return "checkpoint";
    case RunEvent::Kind::kSlowRank: return "slow rank";
    case RunEvent::Kind::kStopped: return "stopped";
    case RunEvent::Kind::kFinished: return "finished";
  }
  return "?";
}

double UsageRecord::total(const std::string& name) const {
  const auto it = totals.find(name);
  return it == totals.end() ? 0 : it->second;
}

void RunLogReader::add_line(const std::string& line) {
  const int64_t number_of_line = ++log_.lines;
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  try {
    read_line(line);
  } catch (const LineJson::parse_error& e) {
    // An object that the line ends before: what a killed writer leaves.
    if (line.front() == '{' && e.byte >= line.size()) {
      ++log_.cut_off_lines;
      return;
    }
    throw_error(ErrorKind::kFormat, log_.path + ":" + std::to_string(number_of_line),
                "not valid JSON; expected one JSON object per line (metrics.jsonl)");
  } catch (const std::exception& e) {  // a field of the wrong JSON type, or a line without "type"
    throw_error(ErrorKind::kFormat, log_.path + ":" + std::to_string(number_of_line), e.what());
  }
}

void RunLogReader::read_line(const std::string& line) {
  const LineJson j = LineJson::parse(line);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw std::runtime_error("expected a JSON object with a string \"type\" field");
  const std::string type = j["type"].get<std::string>();
  const double time = line_number(j, "time");
  if (time > 0 && log_.first_time == 0) log_.first_time = time;
  if (type == "step") {
    if (!keep_steps_) log_.steps.clear();
    read_step(j, log_);
  } else if (type == "epoch") {
    log_.epochs.push_back({line_integer(j, "epoch"), line_integer(j, "step"), time, line_number(j, "test_loss"),
                           line_number(j, "test_accuracy")});
  } else if (type == "usage") {
    read_usage(j, log_);
  } else if (type == "run") {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "type" && it.key() != "time") log_.run[it.key()] = line_text(j, it.key().c_str());
  } else if (type == "summary") {
    log_.summary = line_number_fields(j);
    log_.summary_lists.clear();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it->is_array()) log_.summary_lists[it.key()] = line_numbers(*it);
    add_event(log_, RunEvent::Kind::kFinished, j,
              "run finished" + (j.contains("steps") ? ": " + line_text(j, "steps") + " steps" : std::string()) +
                  (j.contains("test_accuracy") ? ", test accuracy " + line_text(j, "test_accuracy") : std::string()));
  } else if (type == "restart") {
    add_event(log_, RunEvent::Kind::kRestart, j,
              "generation " + line_text(j, "generation") + ": " + failed_part_text(j) + " failed (" +
                  line_text(j, "cause") + "), resumed at step " + line_text(j, "resumed_at_step") +
                  (j.contains("steps_lost") ? ", " + line_text(j, "steps_lost") + " steps trained again" : ""));
  } else if (type == "resume") {
    add_event(log_, RunEvent::Kind::kResume, j, "resumed from the checkpoint of step " + line_text(j, "step"));
  } else if (type == "checkpoint") {
    add_event(log_, RunEvent::Kind::kCheckpoint, j, "checkpoint of step " + line_text(j, "step"));
  } else if (type == "slow_rank") {
    add_event(log_, RunEvent::Kind::kSlowRank, j, line_text(j, "message"));
  } else if (type == "stopped") {
    add_event(log_, RunEvent::Kind::kStopped, j, "stopped on " + line_text(j, "signal"));
  }
}

RunLog read_run_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kIo, path, "cannot open (is this a run directory with a metrics.jsonl?)");
  RunLogReader reader(path);
  std::string line;
  while (std::getline(in, line)) reader.add_line(line);
  if (in.bad()) throw_error(ErrorKind::kIo, path, "read failed");
  return reader.log();
}

}  // namespace gradmesh::obs
