#include "gradmesh/scaling/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gradmesh/core/error.h"

namespace gradmesh::scaling {
namespace {

// Messages each rank sends in one all-reduce.
double messages(Algorithm a, int ranks) {
  if (ranks <= 1) return 0;
  if (a == Algorithm::kRing) return 2.0 * (ranks - 1);
  return 2.0 * std::ceil(std::log2(static_cast<double>(ranks)));
}

// Bytes each rank sends in one all-reduce of `bytes` (reduce-scatter then all-gather).
double wire_bytes(double bytes, int ranks) {
  if (ranks <= 1) return 0;
  return 2.0 * (ranks - 1) / ranks * bytes;
}

}  // namespace

const char* algorithm_name(Algorithm a) { return a == Algorithm::kRing ? "ring" : "halving-doubling"; }

LinkCost link_of(double bits_per_second, double latency_s) {
  GRADMESH_CHECK(bits_per_second > 0 && latency_s >= 0, "a link's rate and latency");
  return {latency_s, 8.0 / bits_per_second};
}

std::string describe_link(const LinkCost& l) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "alpha %.1f us, %.2f Gbit/s", l.alpha_s * 1e6,
                8.0 / std::max(l.beta_s_per_byte, 1e-30) / 1e9);
  return buf;
}

double communication_seconds(const StepModel& model, int workers) {
  double seconds = 0;
  for (double bytes : model.bucket_bytes) {
    const Algorithm a = bytes <= model.halving_doubling_up_to ? Algorithm::kHalvingDoubling : Algorithm::kRing;
    seconds += allreduce_seconds(a, bytes, workers, model.link);
  }
  return seconds / static_cast<double>(std::max<int64_t>(model.communicate_every, 1));
}

double allreduce_seconds(Algorithm algorithm, double bytes, int ranks, const LinkCost& link) {
  return messages(algorithm, ranks) * link.alpha_s + wire_bytes(bytes, ranks) * link.beta_s_per_byte;
}

LinkCost fit_link(const std::vector<AllreduceSample>& samples) {
  if (samples.size() < 2)
    throw_error(ErrorKind::kUsage, "link fit", "needs at least two measured all-reduces, got " +
                                                   std::to_string(samples.size()));
  // Normal equations of seconds = m * alpha + b * beta, with each row scaled
  // by 1 / seconds so that small and large sizes weigh alike (relative error).
  double mm = 0, mb = 0, bb = 0, mt = 0, bt = 0;
  for (const AllreduceSample& s : samples) {
    if (!(s.seconds > 0) || s.ranks < 2 || !(s.bytes >= 0))
      throw_error(ErrorKind::kUsage, "link fit", "a sample needs ranks >= 2, bytes >= 0 and a positive time");
    const double w = 1.0 / s.seconds;
    const double m = messages(s.algorithm, s.ranks) * w, b = wire_bytes(s.bytes, s.ranks) * w, t = 1.0;
    mm += m * m, mb += m * b, bb += b * b, mt += m * t, bt += b * t;
  }
  const double det = mm * bb - mb * mb;
  if (!(std::fabs(det) > 1e-12 * mm * bb))
    throw_error(ErrorKind::kUsage, "link fit",
                "the samples cannot tell latency from bandwidth: measure at least two sizes");
  LinkCost link{(mt * bb - bt * mb) / det, (bt * mm - mt * mb) / det};
  link.alpha_s = std::max(link.alpha_s, 0.0);
  link.beta_s_per_byte = std::max(link.beta_s_per_byte, 0.0);
  return link;
}

ComputeCost fit_compute(const std::vector<std::pair<double, double>>& points) {
  if (points.empty()) throw_error(ErrorKind::kUsage, "compute fit", "needs at least one measured step");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    if (!(x > 0) || !(y > 0)) throw_error(ErrorKind::kUsage, "compute fit", "a point needs samples > 0 and seconds > 0");
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double n = static_cast<double>(points.size());
  const double var = sxx - sx * sx / n;
  if (var <= 1e-12 * sxx) return {0.0, sy / sx};  // one batch size: all of it per sample
  ComputeCost c;
  c.per_sample_s = (sxy - sx * sy / n) / var;
  c.fixed_s = (sy - c.per_sample_s * sx) / n;
  // A negative intercept (noise) would make tiny shares free: refit through the origin.
  if (c.fixed_s < 0 || c.per_sample_s < 0) c = {0.0, sxy / sxx};
  return c;
}

Prediction predict(const StepModel& model, int64_t global_batch, int workers) {
  GRADMESH_CHECK(workers >= 1 && workers <= global_batch, "1 <= workers <= global batch");
  Prediction p;
  p.workers = workers;
  // The slowest worker holds the larger share.
  const auto share = static_cast<double>((global_batch + workers - 1) / workers);
  const double sharing = model.sharing(workers);
  p.compute_s = (model.compute.fixed_s + model.compute.per_sample_s * share) * sharing;
  p.comm_s = communication_seconds(model, workers);
  const double hidden = std::clamp(model.overlap, 0.0, 1.0) * model.backward_share * p.compute_s;
  p.exposed_s = std::max(p.comm_s - hidden, 0.0);
  p.step_s = (model.data_s + model.optimizer_s) * sharing + p.compute_s + p.exposed_s;
  p.samples_per_s = static_cast<double>(global_batch) / p.step_s;
  return p;
}

ScalingCurve predict_curve(const StepModel& model, int64_t global_batch, int max_workers) {
  GRADMESH_CHECK(max_workers >= 1 && global_batch >= 1, "workers and batch");
  ScalingCurve curve;
  const int last = static_cast<int>(std::min<int64_t>(max_workers, global_batch));
  for (int n = 1; n <= last; ++n) curve.points.push_back(predict(model, global_batch, n));
  const double one = curve.points.front().samples_per_s;
  for (Prediction& p : curve.points) {
    p.speedup = p.samples_per_s / one;
    p.efficiency = p.speedup / p.workers;
    if (p.efficiency >= 0.5) curve.knee = p.workers;
    if (p.samples_per_s > curve.points[static_cast<size_t>(curve.fastest - 1)].samples_per_s) curve.fastest = p.workers;
  }
  curve.slower_from = curve.fastest < last ? curve.fastest + 1 : 0;
  return curve;
}

}  // namespace gradmesh::scaling
