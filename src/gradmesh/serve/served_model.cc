#include "gradmesh/serve/served_model.h"

#include <cmath>
#include <cstring>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/serve/sharded_gpt.h"

namespace gradmesh::serve {
namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t product(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}


// NaN, an infinity, or a value float32 cannot hold (a JSON 3.5e38 would
// have been read as infinity) gives confident logits for an input the model
// never saw: refused, naming the element.
void check_finite_values(const InferInput& in, const std::string& field) {
  const float* v = in.values.data();
  for (int64_t i = 0; i < in.values.numel(); ++i)
    if (!std::isfinite(v[i]))
      throw_error(ErrorKind::kUsage, field,
                  "holds " + std::string(std::isnan(v[i]) ? "NaN" : "a value outside float32's range") +
                      " at element " + std::to_string(i) + "; the model takes finite FP32 values");
}

}  // namespace

ServedModel::ServedModel(std::string name, std::string version, ModelShape shape, std::unique_ptr<nn::Model> model)
    : name_(std::move(name)), version_(std::move(version)), shape_(std::move(shape)), model_(std::move(model)) {
  GRADMESH_CHECK(model_ != nullptr, "ServedModel without a model");
  model_->set_training(false);
  if (shape_.kind == "gpt") sequences_ = std::make_shared<LocalSequenceModel>(static_cast<nn::Gpt&>(model_->root()));
}

ServedModel::ServedModel(std::string name, std::string version, ModelShape shape, std::unique_ptr<nn::Model> part,
                         std::shared_ptr<ShardedGpt> sharded)
    : name_(std::move(name)),
      version_(std::move(version)),
      shape_(std::move(shape)),
      model_(std::move(part)),
      sharded_(std::move(sharded)) {
  GRADMESH_CHECK(model_ != nullptr && sharded_ != nullptr && shape_.kind == "gpt", "a sharded GPT");
  model_->set_training(false);
  sequences_ = std::shared_ptr<SequenceModel>(sharded_, sharded_.get());
}

ServedModel::~ServedModel() = default;

TensorSpec ServedModel::input() const {
  if (shape_.kind == "gpt") return {"tokens", Datatype::kInt64, {-1, -1}};
  // An MLP takes flat feature vectors, a CNN images: each declares the shape
  // its first layer reads, and requests must match it exactly.
  if (shape_.kind == "mlp") return {"input", Datatype::kFp32, {-1, product(shape_.sample)}};
  Shape s{-1};
  s.insert(s.end(), shape_.sample.begin(), shape_.sample.end());
  return {"input", Datatype::kFp32, s};
}

std::vector<TensorSpec> ServedModel::outputs() const {
  const bool gpt = shape_.kind == "gpt";
  return {{"logits", Datatype::kFp32, {-1, shape_.classes}}, {gpt ? "next_token" : "class", Datatype::kInt64, {-1}}};
}

Tensor ServedModel::rows_of(const InferInput& in) const {
  const TensorSpec spec = input();
  const std::string field = "input '" + in.name + "'";
  if (in.name != spec.name)
    throw_error(ErrorKind::kUsage, field, "is not an input of model '" + name_ + "'; it takes '" + spec.name + "'");
  if (shape_.kind == "gpt") {
    if (in.datatype != Datatype::kInt64 && in.datatype != Datatype::kInt32)
      throw_error(ErrorKind::kUsage, field,
                  std::string("has datatype ") + datatype_name(in.datatype) + "; token ids are INT64 (or INT32)");
    const int64_t block = shape_.sample.at(0);
    if (in.shape.size() != 2 || in.shape[0] < 1 || in.shape[1] < 1 || in.shape[1] > block)
      throw_error(ErrorKind::kUsage, field,
                  "has shape " + shape_text(in.shape) + "; expected [batch, T] with batch >= 1 and 1 <= T <= " +
                      std::to_string(block) + " (the model's context)");
    const float* ids = in.values.data();
    for (int64_t i = 0; i < in.values.numel(); ++i)
      if (ids[i] < 0 || ids[i] >= static_cast<float>(shape_.classes))
        throw_error(ErrorKind::kUsage, field,
                    "holds token id " + std::to_string(static_cast<int64_t>(ids[i])) + " at element " +
                        std::to_string(i) + "; the vocabulary has ids 0 to " + std::to_string(shape_.classes - 1));
    return in.values;
  }
  if (in.datatype != Datatype::kFp32 && in.datatype != Datatype::kFp64)
    throw_error(ErrorKind::kUsage, field,
                std::string("has datatype ") + datatype_name(in.datatype) + "; expected FP32 (or FP64)");
  // The metadata's shape exactly, -1 (the batch) standing for any size from
  // 1: a [1, 28, 28, 1] or [1, 2, 392] request for a [-1, 1, 28, 28] model
  // holds the right number of values in an order the model would misread.
  bool matches = in.shape.size() == spec.shape.size() && in.shape[0] >= 1;
  for (size_t d = 1; matches && d < spec.shape.size(); ++d) matches = in.shape[d] == spec.shape[d];
  if (!matches)
    throw_error(ErrorKind::kUsage, field,
                "has shape " + shape_text(in.shape) + "; model '" + name_ + "' takes " + shape_text(spec.shape) +
                    " (-1: any batch size from 1)");
  check_finite_values(in, field);
  Shape rows{in.shape[0]};
  rows.insert(rows.end(), shape_.sample.begin(), shape_.sample.end());
  return in.values.view(rows);
}

Tensor ServedModel::forward(const Tensor& rows) const {
  if (sharded_) return sharded_->forward(rows);
  autograd::NoGradGuard no_grad;
  const Tensor out = model_->forward(autograd::Variable(rows)).value();
  if (shape_.kind != "gpt") return out;
  return nn::last_positions(out, rows.dim(0), rows.dim(1));
}

void ServedModel::check_outputs(const std::vector<std::string>& wanted) const {
  const std::vector<TensorSpec> specs = outputs();
  for (const std::string& w : wanted) {
    bool known = false;
    for (const TensorSpec& s : specs) known = known || s.name == w;
    if (!known)
      throw_error(ErrorKind::kUsage, "output '" + w + "'",
                  "is not an output of model '" + name_ + "'; it gives '" + specs[0].name + "' and '" + specs[1].name +
                      "'");
  }
}

std::vector<InferOutput> ServedModel::outputs_of(const Tensor& logits, const std::vector<std::string>& wanted) const {
  const std::vector<TensorSpec> specs = outputs();
  auto asked = [&](const std::string& name) {
    if (wanted.empty()) return true;
    for (const std::string& w : wanted)
      if (w == name) return true;
    return false;
  };
  std::vector<InferOutput> out;
  if (asked(specs[0].name)) out.push_back({specs[0].name, Datatype::kFp32, logits});
  if (asked(specs[1].name)) {
    const int64_t n = logits.dim(0), c = logits.dim(1);
    Tensor best = Tensor::empty({n});
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * c;
      int64_t arg = 0;
      for (int64_t j = 1; j < c; ++j)
        if (row[j] > row[arg]) arg = j;
      best.data()[i] = static_cast<float>(arg);
    }
    out.push_back({specs[1].name, Datatype::kInt64, best});
  }
  return out;
}

}  // namespace gradmesh::serve
