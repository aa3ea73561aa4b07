#include "gradmesh/scaling/scaling_report.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "gradmesh/obs/json_object.h"
#include "gradmesh/obs/report_html.h"

namespace gradmesh::scaling {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Workers shown in the predicted table: powers of two, the knee, the fastest, the last.
std::vector<int> shown(const ScalingCurve& c) {
  std::vector<int> out;
  const int last = static_cast<int>(c.points.size());
  for (int n = 1; n <= last; n *= 2) out.push_back(n);
  for (int n : {c.knee, c.fastest, last}) out.push_back(n);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Samples/s against workers on a log2 axis: the predicted curve, the
// measured probes as dots, the knee as a marker.
obs::LineChart scaling_chart(const ScalingStudy& s) {
  obs::LineChart chart{"samples/s against workers: predicted (line), measured (dots)", "workers", "throughput", {}, true};
  chart.y_unit = "samples/s", chart.log2_x = true, chart.y_from_zero = true;
  obs::ChartSeries predicted{"predicted", {}}, measured{"measured", {}};
  measured.line = false;
  for (const Prediction& p : s.curve.points) predicted.points.push_back({static_cast<double>(p.workers), p.samples_per_s});
  for (const ProbeMeasurement& p : s.probes)
    measured.points.push_back({static_cast<double>(p.workers), static_cast<double>(s.global_batch) / p.step_s});
  chart.series = {std::move(predicted), std::move(measured)};
  chart.markers.push_back({static_cast<double>(s.curve.knee), "knee: " + std::to_string(s.curve.knee),
                           "the most workers at >= 50% efficiency: " + std::to_string(s.curve.knee)});
  return chart;
}

}  // namespace

std::string scaling_table(const ScalingStudy& s) {
  std::string out = "probes of " + s.config + " (global batch " + std::to_string(s.global_batch) + "), network: " +
                    s.here_link + "\n\n";
  out += "| workers | measured step (ms) | predicted (ms) | error | compute (ms) | exposed comm (ms) | samples/s |\n";
  out += "|---|---|---|---|---|---|---|\n";
  for (const ProbeMeasurement& p : s.probes) {
    const Prediction q = predict(s.here, s.global_batch, p.workers);
    out += "| " + std::to_string(p.workers) + " | " + fixed(p.step_s * 1e3, 2) + " | " + fixed(q.step_s * 1e3, 2) +
           " | " + fixed((q.step_s / p.step_s - 1) * 100, 1) + "% | " + fixed(p.compute_s() * 1e3, 2) + " | " +
           fixed(p.exposed_s * 1e3, 2) + " | " + fixed(s.global_batch / p.step_s, 0) + " |\n";
  }
  out += "\nmodel: compute " + fixed(s.here.compute.fixed_s * 1e3, 3) + " ms + " +
         fixed(s.here.compute.per_sample_s * 1e6, 2) + " us per sample; backward " +
         fixed(s.here.backward_share * 100, 0) + "% of it, of which " + fixed(s.here.overlap * 100, 0) +
         "% hides communication; " + std::to_string(s.here.bucket_bytes.size()) + " gradient buckets; link " +
         describe_link(s.here.link) + "\n\n";
  out += "predicted on " + s.target_link + ":\n\n";
  out += "| workers | step (ms) | exposed comm (ms) | samples/s | speedup | efficiency |\n|---|---|---|---|---|---|\n";
  for (int n : shown(s.curve)) {
    const Prediction& p = s.curve.points[static_cast<size_t>(n - 1)];
    out += "| " + std::to_string(n) + " | " + fixed(p.step_s * 1e3, 2) + " | " + fixed(p.exposed_s * 1e3, 2) + " | " +
           fixed(p.samples_per_s, 0) + " | " + fixed(p.speedup, 2) + "x | " + fixed(p.efficiency * 100, 0) + "% |\n";
  }
  out += "\nknee (the most workers at >= 50% efficiency): " + std::to_string(s.curve.knee) +
         "; fastest: " + std::to_string(s.curve.fastest) + (s.curve.fastest == 1 ? " worker" : " workers");
  out += s.curve.slower_from > 0 ? "; from " + std::to_string(s.curve.slower_from) + " workers on, adding workers slows the job\n"
                                 : "; adding workers never slows the job within this range\n";
  return out;
}

std::string scaling_json(const ScalingStudy& s) {
  std::string probes = "[", curve = "[";
  for (const ProbeMeasurement& p : s.probes) {
    obs::JsonObject j;
    j.add("workers", p.workers).add("steps", p.steps).add("step_s", p.step_s).add("data_s", p.data_s)
        .add("forward_s", p.forward_s).add("backward_s", p.backward_s).add("exposed_comm_s", p.exposed_s)
        .add("optimizer_s", p.optimizer_s).add("predicted_step_s", predict(s.here, s.global_batch, p.workers).step_s);
    probes += (probes.size() > 1 ? "," : "") + j.str();
  }
  for (const Prediction& p : s.curve.points) {
    obs::JsonObject j;
    j.add("workers", p.workers).add("step_s", p.step_s).add("compute_s", p.compute_s).add("comm_s", p.comm_s)
        .add("exposed_comm_s", p.exposed_s).add("samples_per_s", p.samples_per_s).add("speedup", p.speedup)
        .add("efficiency", p.efficiency);
    curve += (curve.size() > 1 ? "," : "") + j.str();
  }
  obs::JsonObject model;
  model.add("compute_fixed_s", s.here.compute.fixed_s).add("compute_per_sample_s", s.here.compute.per_sample_s)
      .add("backward_share", s.here.backward_share).add("overlap", s.here.overlap).add("data_s", s.here.data_s)
      .add("optimizer_s", s.here.optimizer_s).add("buckets", static_cast<int64_t>(s.here.bucket_bytes.size()))
      .add("alpha_s", s.here.link.alpha_s).add("beta_s_per_byte", s.here.link.beta_s_per_byte)
      .add("target_alpha_s", s.target.link.alpha_s).add("target_beta_s_per_byte", s.target.link.beta_s_per_byte);
  obs::JsonObject top;
  top.add("config", s.config).add("global_batch", s.global_batch).add("here_link", s.here_link)
      .add("target_link", s.target_link).add("knee", s.curve.knee).add("fastest", s.curve.fastest)
      .add("slower_from", s.curve.slower_from);
  std::string text = top.str();
  text.pop_back();  // '}'
  return text + ",\"model\":" + model.str() + ",\"probes\":" + probes + "],\"predicted\":" + curve + "]}\n";
}

std::string scaling_svg(const ScalingStudy& s) { return obs::standalone_chart_svg(scaling_chart(s), 640, 400); }

std::string scaling_html(const ScalingStudy& s) {
  // Self-contained like a run's report.html: the chart is data drawn by the
  // inlined charts.js, nothing is fetched.
  std::string out =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>scaling study: " + obs::html_escape(s.config) +
      "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:60em}pre{background:#f6f6f6;padding:1em;"
      "overflow-x:auto}.chart svg{display:block}</style></head><body>\n<h1>Scaling study: " +
      obs::html_escape(s.config) + "</h1>\n";
  out += "<p>Measured on " + obs::html_escape(s.here_link) + "; predicted for " + obs::html_escape(s.target_link) +
         ".</p>\n";
  out += obs::chart_section(obs::chart_data_json(std::vector<obs::LineChart>{scaling_chart(s)}));
  out += "<pre>" + obs::html_escape(scaling_table(s)) + "</pre>\n</body></html>\n";
  return out;
}

}  // namespace gradmesh::scaling
