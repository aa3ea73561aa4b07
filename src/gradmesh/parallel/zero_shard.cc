#include "gradmesh/parallel/zero_shard.h"

#include <algorithm>
#include <string>

#include "gradmesh/core/error.h"

namespace gradmesh::parallel {

namespace {

// The parameters overlapping `bucket.range`, as [first_param, end_param).
void find_params(const std::vector<nn::ParameterInfo>& params, ShardBucket& bucket) {
  bucket.first_param = static_cast<int>(params.size());
  bucket.end_param = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const nn::ParameterInfo& p = params[i];
    if (p.numel <= 0 || p.offset >= bucket.range.end || p.offset + p.numel <= bucket.range.begin) continue;
    bucket.first_param = std::min(bucket.first_param, static_cast<int>(i));
    bucket.end_param = std::max(bucket.end_param, static_cast<int>(i) + 1);
  }
}

}  // namespace

ShardLayout::ShardLayout(const std::vector<nn::ParameterInfo>& params, int world_size, int64_t first_bucket_bytes,
                         int64_t bucket_bytes)
    : world_size_(world_size) {
  if (world_size < 1)
    throw_error(ErrorKind::kConfig, "ShardLayout", "world size must be >= 1, got " + std::to_string(world_size));
  if (first_bucket_bytes < 1 || bucket_bytes < 1)
    throw_error(ErrorKind::kConfig, "parallel.bucket_mb",
                "bucket sizes must be at least one byte, got first " + std::to_string(first_bucket_bytes) + " and " +
                    std::to_string(bucket_bytes));
  int64_t expected_offset = 0;
  for (const nn::ParameterInfo& p : params) {
    if (p.offset != expected_offset || p.numel < 0)
      throw_error(ErrorKind::kInternal, "ShardLayout",
                  "parameter '" + p.name + "' is not contiguous with the one before it in the flat buffer");
    expected_offset += p.numel;
  }
  numel_ = expected_offset;
  const int64_t n = world_size;
  int64_t top = numel_;
  // Walk the parameter starts from the top; each is a candidate cut, rounded
  // up onto the grid P - k*N so every bucket above the last has a multiple
  // of N elements. Rounding up (not down) keeps a bucket from waiting on the
  // parameter below it, which backward finishes later.
  for (size_t i = params.size(); i-- > 0;) {
    const int64_t cut = i == 0 ? 0 : numel_ - (numel_ - params[i].offset) / n * n;
    if (cut >= top) continue;
    const int64_t budget = buckets_.empty() ? first_bucket_bytes : bucket_bytes;
    if (i != 0 && (top - cut) * static_cast<int64_t>(sizeof(float)) < budget) continue;
    ShardBucket bucket;
    bucket.range = {cut, top};
    bucket.piece = (top - cut + n - 1) / n;
    bucket.padded = bucket.piece * n;
    find_params(params, bucket);
    buckets_.push_back(bucket);
    top = cut;
  }
}

FlatRange ShardLayout::owned(size_t bucket, int rank) const {
  const ShardBucket& b = buckets_.at(bucket);
  const int64_t begin = std::min(b.range.begin + rank * b.piece, b.range.end);
  return {begin, std::min(begin + b.piece, b.range.end)};
}

std::vector<FlatRange> ShardLayout::owned_ranges(int rank) const {
  std::vector<FlatRange> ranges;
  for (size_t b = buckets_.size(); b-- > 0;) {  // the last bucket sits lowest in the buffer
    const FlatRange piece = owned(b, rank);
    if (!piece.empty()) ranges.push_back(piece);
  }
  return ranges;
}

int64_t ShardLayout::shard_numel(int rank) const {
  int64_t total = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) total += owned(b, rank).size();
  return total;
}

int64_t ShardLayout::padded_numel() const {
  int64_t total = 0;
  for (const ShardBucket& b : buckets_) total += b.padded;
  return total;
}

std::vector<optim::ParamGroup> shard_param_groups(const ShardLayout& layout, int rank,
                                                  const std::vector<nn::ParameterInfo>& params,
                                                  const WeightDecayRule& weight_decay) {
  std::vector<optim::ParamGroup> groups;
  size_t first = 0;  // pieces ascend, so the parameters scanned for one piece never precede an earlier one's
  for (const FlatRange& piece : layout.owned_ranges(rank)) {
    while (first < params.size() && params[first].offset + params[first].numel <= piece.begin) ++first;
    for (size_t i = first; i < params.size() && params[i].offset < piece.end; ++i) {
      const nn::ParameterInfo& p = params[i];
      const int64_t begin = std::max(piece.begin, p.offset), end = std::min(piece.end, p.offset + p.numel);
      if (end > begin) groups.push_back({begin, end - begin, weight_decay ? weight_decay(p) : 0.0f});
    }
  }
  return groups;
}

}  // namespace gradmesh::parallel
