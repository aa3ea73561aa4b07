#include "gradmesh/obs/run_report_page.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <tuple>

namespace gradmesh::obs {
namespace {

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string field(const std::map<std::string, std::string>& m, const std::string& key, const std::string& fallback = "") {
  const auto it = m.find(key);
  return it == m.end() ? fallback : it->second;
}

std::optional<double> summary_value(const RunLog& log, const std::string& key) {
  const auto it = log.summary.find(key);
  if (it == log.summary.end()) return std::nullopt;
  return it->second;
}

// Numbers the attempts of a run in its record: a line whose step (or epoch)
// is not past the previous line's begins a new one, a restarted generation
// training again from its checkpoint. The renderer draws only the latest
// attempt's point at each x (ChartPoint::generation).
class Attempts {
 public:
  int of(int64_t x) {
    if (x <= previous_) ++attempt_;
    previous_ = x;
    return attempt_;
  }

 private:
  int64_t previous_ = INT64_MIN;
  int attempt_ = 0;
};

// One number of every step line (x: the step) or every epoch line (x: the epoch, from 1).
ChartSeries step_series(const RunLog& log, const std::string& name, double StepRecord::*value) {
  ChartSeries s{name, {}};
  Attempts attempts;
  for (const StepRecord& r : log.steps)
    s.points.push_back({static_cast<double>(r.step), r.*value, attempts.of(r.step)});
  return s;
}

ChartSeries epoch_series(const RunLog& log, const std::string& name, double EpochRecord::*value) {
  ChartSeries s{name, {}};
  s.dots = true;
  Attempts attempts;
  for (const EpochRecord& e : log.epochs)
    s.points.push_back({static_cast<double>(e.epoch + 1), e.*value, attempts.of(e.epoch)});
  return s;
}

// The step a restart or a resume continued from. A restart line's is its
// resumed_at_step, which the run log keeps in the event's text only.
int64_t resumed_step(const RunEvent& e) {
  const std::string key = "resumed at step ";
  const size_t at = e.text.find(key);
  if (at == std::string::npos) return e.step;
  return std::strtoll(e.text.c_str() + at + key.size(), nullptr, 10);
}

// Where training continued after a restart or a resume, for the step charts:
// one marker per step, "restart" when a worker failure caused it.
std::vector<ChartMarker> restart_markers(const RunLog& log) {
  std::vector<ChartMarker> out;
  for (const RunEvent& e : log.events) {
    if (e.kind != RunEvent::Kind::kRestart && e.kind != RunEvent::Kind::kResume) continue;
    const double x = static_cast<double>(resumed_step(e));
    const std::string label = e.kind == RunEvent::Kind::kRestart ? "restart" : "resume";
    auto same = std::find_if(out.begin(), out.end(), [&](const ChartMarker& m) { return m.x == x; });
    if (same == out.end()) {
      out.push_back({x, label, label + " at step " + std::to_string(resumed_step(e)) + ": " + e.text});
    } else {
      if (label == "restart") same->label = label;
      same->text += "; " + e.text;
    }
  }
  return out;
}

// The four curves of a run, or of two overlaid (comparison).
std::vector<LineChart> curves(std::vector<ChartSeries> loss, std::vector<ChartSeries> accuracy,
                              std::vector<ChartSeries> throughput, std::vector<ChartSeries> test_loss,
                              const std::vector<ChartMarker>& markers) {
  std::vector<LineChart> charts(4);
  charts[0] = {"Training loss", "step", "loss", std::move(loss)};
  charts[1] = {"Test accuracy", "epoch", "accuracy", std::move(accuracy), true};
  charts[1].percent_y = true;
  charts[2] = {"Throughput", "step", "throughput", std::move(throughput)};
  charts[2].y_unit = "samples/s", charts[2].y_from_zero = true;
  charts[3] = {"Test loss", "epoch", "loss", std::move(test_loss), true};
  charts[0].markers = charts[2].markers = markers;
  return charts;
}

// Mean ms per step of each phase over the run, per rank (the step lines are
// intervals of equal steps, so a plain mean of intervals).
PhaseBreakdown phase_breakdown(const RunLog& log) {
  PhaseBreakdown b;
  b.phases = log.phases;
  size_t ranks = 0;
  for (const StepRecord& s : log.steps) ranks = std::max(ranks, s.rank_phase_ms.size());
  if (ranks == 0 || ranks > 64) return b;  // more ranks read better as a heatmap
  b.ms_per_step.assign(ranks, std::vector<double>(b.phases.size(), 0.0));
  std::vector<double> counted(ranks, 0);
  for (const StepRecord& s : log.steps)
    for (size_t r = 0; r < s.rank_phase_ms.size(); ++r) {
      for (size_t p = 0; p < b.phases.size() && p < s.rank_phase_ms[r].size(); ++p)
        b.ms_per_step[r][p] += s.rank_phase_ms[r][p];
      counted[r] += 1;
    }
  for (size_t r = 0; r < ranks; ++r)
    for (double& v : b.ms_per_step[r]) v /= std::max(counted[r], 1.0);
  return b;
}

// Rows: ranks; columns: log intervals; value: ms per step in the phases `pick` sums.
Heatmap rank_heatmap(const RunLog& log, const std::string& title, const std::vector<std::string>& phases) {
  Heatmap map;
  map.title = title, map.x_label = "step", map.unit = "ms/step";
  size_t ranks = 0;
  for (const StepRecord& s : log.steps) ranks = std::max(ranks, s.rank_phase_ms.size());
  if (ranks == 0) return map;
  // At most 120 columns: neighbouring intervals merged by their mean.
  const size_t per = std::max<size_t>(1, (log.steps.size() + 119) / 120);
  for (size_t r = 0; r < ranks; ++r) map.row_labels.push_back("rank " + std::to_string(r));
  map.values.assign(ranks, {});
  for (size_t first = 0; first < log.steps.size(); first += per) {
    const size_t last = std::min(log.steps.size(), first + per);
    map.columns.push_back(static_cast<double>(log.steps[last - 1].step));
    for (size_t r = 0; r < ranks; ++r) {
      double sum = 0, n = 0;
      for (size_t i = first; i < last; ++i) {
        const StepRecord& s = log.steps[i];
        if (r >= s.rank_phase_ms.size()) continue;
        double v = 0;
        for (size_t p = 0; p < log.phases.size() && p < s.rank_phase_ms[r].size(); ++p)
          if (phases.empty() || std::find(phases.begin(), phases.end(), log.phases[p]) != phases.end())
            v += s.rank_phase_ms[r][p];
        sum += v, n += 1;
      }
      map.values[r].push_back(n > 0 ? sum / n : std::nan(""));
    }
  }
  return map;
}

Timeline timeline(const RunLog& log) {
  Timeline t;
  t.title = "Restarts, checkpoints and warnings over time";
  double end = log.first_time;
  for (const StepRecord& s : log.steps) end = std::max(end, s.time);
  for (const RunEvent& e : log.events) {
    if (e.time <= 0) continue;
    // Slow-rank and stop texts do not name their step; the others do, and a
    // restart line has no step of its own (only resumed_at_step, in its text).
    const bool has_step = e.kind == RunEvent::Kind::kSlowRank || e.kind == RunEvent::Kind::kStopped;
    t.events.push_back({e.time - log.first_time, run_event_name(e.kind),
                        has_step ? "step " + std::to_string(e.step) + ": " + e.text : e.text});
    end = std::max(end, e.time);
  }
  t.span_seconds = end - log.first_time;
  return t;
}

std::vector<std::vector<std::string>> cost_rows(const UsageRecord& u) {
  const std::string& c = u.prices.currency;
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"compute", fixed(u.total("cpu_seconds"), 1) + " core-seconds",
                  price_text(u.prices.core_hour, c) + " per core-hour", money_text(u.cost.compute, c)});
  rows.push_back({"checkpoint storage",
                  bytes_text(u.total("checkpoint_stored_bytes")) + " kept now; " +
                      bytes_text(u.total("storage_gb_seconds") * 1e9 / 3600, "-hours") + " so far",
                  price_text(u.prices.storage_gb_month, c) + " per GB-month", money_text(u.cost.storage, c)});
  rows.push_back({"network egress between hosts", bytes_text(u.total("inter_host_bytes")),
                  price_text(u.prices.egress_gb, c) + " per GB", money_text(u.cost.egress, c)});
  rows.push_back({"total", "", "", money_text(u.cost.total(), c)});
  return rows;
}

std::string prices_note(const UsageRecord& u) {
  return u.prices.examples ? "Example prices: set [metering] in the config to yours. Compute is charged on the "
                             "core-seconds the workers used (getrusage), not the cores they held."
                           : "Prices from the run's [metering] config. Compute is charged on the core-seconds the "
                             "workers used (getrusage), not the cores they held.";
}

ReportTable usage_table(const UsageRecord& u) {
  ReportTable t;
  t.title = "Resources used";
  t.header = {"resource", "total", "per rank (this process)"};
  const auto per_rank = [&](const std::string& name, bool bytes) {
    const auto it = u.ranks.find(name);
    if (it == u.ranks.end() || it->second.empty()) return std::string();
    const auto [lo, hi] = std::minmax_element(it->second.begin(), it->second.end());
    return bytes ? bytes_text(*lo) + " - " + bytes_text(*hi) : fixed(*lo, 1) + " - " + fixed(*hi, 1);
  };
  t.rows.push_back({"CPU core-seconds", fixed(u.total("cpu_seconds"), 1), per_rank("cpu_seconds", false)});
  t.rows.push_back({"wall seconds", fixed(u.total("wall_seconds"), 1), per_rank("wall_seconds", false)});
  t.rows.push_back({"peak memory (RSS)", bytes_text(u.total("peak_rss_bytes")), per_rank("peak_rss_bytes", true)});
  t.rows.push_back({"sent by collectives", bytes_text(u.total("sent_bytes")), per_rank("sent_bytes", true)});
  t.rows.push_back({"received by collectives", bytes_text(u.total("received_bytes")), per_rank("received_bytes", true)});
  t.rows.push_back({"sent to other hosts", bytes_text(u.total("inter_host_bytes")), per_rank("inter_host_bytes", true)});
  t.rows.push_back({"dataset read", bytes_text(u.total("dataset_read_bytes")), per_rank("dataset_read_bytes", true)});
  t.rows.push_back({"checkpoints written", bytes_text(u.total("checkpoint_written_bytes")),
                    per_rank("checkpoint_written_bytes", true)});
  for (const auto& [backend, figures] : u.backends) {
    const auto sent = figures.find("sent_bytes");
    t.rows.push_back({"  of which " + backend + " sent", sent == figures.end() ? "" : bytes_text(sent->second), ""});
  }
  t.note = "Totals are the whole run, every process it took; per-rank figures are the last process's.";
  return t;
}

}  // namespace

ReportContent report_content(const RunLog& log) {
  ReportContent c;
  c.title = "gradmesh run " + field(log.run, "run_id", log.path);
  const std::string world = field(log.run, "world_size");
  if (!log.run.empty()) {
    c.facts.emplace_back("model", field(log.run, "model") + ", " + field(log.run, "parameters") + " parameters");
    c.facts.emplace_back("ranks", world + (world != "1" ? " (" + field(log.run, "backend") + ")" : ""));
  }
  if (const auto steps = summary_value(log, "steps"))
    c.facts.emplace_back("steps", fixed(*steps, 0) + " of global batch " + field(log.run, "batch_size", "?"));
  if (const auto rate = summary_value(log, "samples_per_s")) c.facts.emplace_back("throughput", fixed(*rate, 0) + " samples/s");
  if (const auto acc = summary_value(log, "test_accuracy")) c.facts.emplace_back("final test accuracy", fixed(*acc, 4));
  if (const auto share = summary_value(log, "exposed_comm_share"))
    c.facts.emplace_back("exposed communication", fixed(*share * 100, 2) + "% of step time");
  const auto bubble = log.summary_lists.find("pipeline_bubble_per_rank");
  if (bubble != log.summary_lists.end() && !bubble->second.empty()) {
    double mean = 0;
    std::string per_rank;
    for (double b : bubble->second) {
      mean += b / static_cast<double>(bubble->second.size());
      per_rank += (per_rank.empty() ? "" : " ") + fixed(b, 3);
    }
    c.facts.emplace_back("pipeline bubble", fixed(mean, 3) + " idle per stage, mean of ranks (" + per_rank +
                                                "); (p-1)/(m+p-1) = " +
                                                fixed(summary_value(log, "pipeline_bubble_textbook").value_or(0), 3));
  }
  if (log.usage)
    c.facts.emplace_back("cost so far", money_text(log.usage->cost.total(), log.usage->prices.currency) +
                                            (log.usage->prices.examples ? " (example prices)" : ""));
  if (log.steps.empty() && log.summary.empty()) c.notes.push_back("This run has not logged a step yet.");
  if (log.cut_off_lines > 0)
    c.notes.push_back(std::to_string(log.cut_off_lines) + " line(s) of metrics.jsonl were cut off (a process was "
                      "killed while writing); they are left out.");
  for (const RunEvent& e : log.events)
    if (e.kind == RunEvent::Kind::kSlowRank) c.notes.push_back("step " + std::to_string(e.step) + ": " + e.text);
  if (log.usage) {
    c.tables.push_back({"Cost", {"kind", "used", "price", "cost"}, cost_rows(*log.usage), prices_note(*log.usage)});
    c.tables.push_back(usage_table(*log.usage));
  }
  c.charts = curves({step_series(log, "train loss", &StepRecord::loss)},
                    {epoch_series(log, "test accuracy", &EpochRecord::test_accuracy)},
                    {step_series(log, "samples/s", &StepRecord::samples_per_s)},
                    {epoch_series(log, "test loss", &EpochRecord::test_loss)}, restart_markers(log));
  c.timeline = timeline(log);
  c.phases = phase_breakdown(log);
  Heatmap step = rank_heatmap(log, "Step time per rank over the run", {});
  if (!step.values.empty()) {
    c.heatmaps.push_back(std::move(step));
    // Split, so a straggler's cause shows: its own compute, or waiting for the others.
    c.heatmaps.push_back(
        rank_heatmap(log, "Compute per rank over the run (forward, backward, optimizer)", {"forward", "backward", "optimizer"}));
    c.heatmaps.push_back(rank_heatmap(log, "Waiting for communication per rank over the run", {"comm"}));
  }
  return c;
}

ReportContent comparison_content(const RunLog& a, const std::string& name_a, const RunLog& b,
                                 const std::string& name_b) {
  ReportContent c;
  c.title = "gradmesh runs compared: A = " + name_a + ", B = " + name_b;
  ReportTable t;
  t.title = "Side by side";
  t.header = {"", "A", "B", "B / A"};
  // Each cell as `text` writes it for its run (a number to `digits` places
  // unless given); the ratio is always of the exact values.
  using Text = std::function<std::string(double, const RunLog&)>;
  const auto row = [&](const std::string& label, std::optional<double> x, std::optional<double> y, int digits,
                       const Text& text = nullptr) {
    const auto cell = [&](std::optional<double> v, const RunLog& log) {
      return !v ? "-" : text ? text(*v, log) : fixed(*v, digits);
    };
    t.rows.push_back({label, cell(x, a), cell(y, b), x && y && *x != 0 ? fixed(*y / *x, 3) : "-"});
  };
  t.rows.push_back({"model", field(a.run, "model") + " (" + field(a.run, "parameters") + ")",
                    field(b.run, "model") + " (" + field(b.run, "parameters") + ")", ""});
  t.rows.push_back({"ranks", field(a.run, "world_size") + " " + field(a.run, "backend"),
                    field(b.run, "world_size") + " " + field(b.run, "backend"), ""});
  // A figure of each run, side by side.
  using Figure = std::function<std::optional<double>(const RunLog&)>;
  const auto compare = [&](const std::string& label, const Figure& of, int digits, const Text& text = nullptr) {
    row(label, of(a), of(b), digits, text);
  };
  const auto summary = [](const char* key) -> Figure { return [key](const RunLog& log) { return summary_value(log, key); }; };
  const auto usage = [](double (*of)(const UsageRecord&)) -> Figure {
    return [of](const RunLog& log) { return log.usage ? std::optional(of(*log.usage)) : std::nullopt; };
  };
  compare("steps", summary("steps"), 0);
  compare("samples/s", summary("samples_per_s"), 0);
  compare("final train loss", summary("final_train_loss"), 4);
  compare("test accuracy", summary("test_accuracy"), 4);
  compare("training seconds", summary("train_seconds"), 1);
  compare("exposed communication share", summary("exposed_comm_share"), 4);
  for (size_t p = 0; p < a.phases.size() || p < b.phases.size(); ++p)
    compare((p < a.phases.size() ? a.phases[p] : b.phases[p]) + " ms per step (mean of ranks)",
            [p](const RunLog& log) -> std::optional<double> {
              if (log.steps.empty() || p >= log.phases.size()) return std::nullopt;
              double sum = 0;
              for (const StepRecord& s : log.steps) sum += p < s.phase_ms.size() ? s.phase_ms[p] : 0;
              return sum / static_cast<double>(log.steps.size());
            },
            3);
  // Costs in each run's own currency (usage() gives none without a usage line).
  const Text money = [](double v, const RunLog& log) { return money_text(v, log.usage->prices.currency); };
  compare("cost: compute", usage([](const UsageRecord& u) { return u.cost.compute; }), 0, money);
  compare("cost: storage", usage([](const UsageRecord& u) { return u.cost.storage; }), 0, money);
  compare("cost: egress", usage([](const UsageRecord& u) { return u.cost.egress; }), 0, money);
  compare("cost: total", usage([](const UsageRecord& u) { return u.cost.total(); }), 0, money);
  compare("CPU core-seconds", usage([](const UsageRecord& u) { return u.total("cpu_seconds"); }), 1);
  compare("bytes sent to other hosts", usage([](const UsageRecord& u) { return u.total("inter_host_bytes"); }), 0,
          [](double v, const RunLog&) { return bytes_text(v); });
  if (a.usage && b.usage && a.usage->prices.currency != b.usage->prices.currency)
    c.notes.push_back("The runs' costs are in different currencies (" + a.usage->prices.currency + ", " +
                      b.usage->prices.currency + "): their ratio means nothing.");
  if ((a.usage && a.usage->prices.examples) || (b.usage && b.usage->prices.examples))
    t.note = "Costs use example prices where a run's config set none.";
  c.tables.push_back(std::move(t));
  const auto both_steps = [&](double StepRecord::*value) {
    return std::vector<ChartSeries>{step_series(a, "A", value), step_series(b, "B", value)};
  };
  const auto both_epochs = [&](double EpochRecord::*value) {
    return std::vector<ChartSeries>{epoch_series(a, "A", value), epoch_series(b, "B", value)};
  };
  // Each run's restarts in its own colour, named by its run.
  std::vector<ChartMarker> markers;
  for (const auto& [log, name, series] : {std::tuple{&a, "A", 0}, std::tuple{&b, "B", 1}})
    for (ChartMarker m : restart_markers(*log)) {
      m.label = std::string(name) + ": " + m.label, m.text = std::string(name) + ": " + m.text, m.series = series;
      markers.push_back(std::move(m));
    }
  c.charts = curves(both_steps(&StepRecord::loss), both_epochs(&EpochRecord::test_accuracy),
                    both_steps(&StepRecord::samples_per_s), both_epochs(&EpochRecord::test_loss), markers);
  return c;
}

}  // namespace gradmesh::obs
