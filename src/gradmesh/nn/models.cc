#include "gradmesh/nn/models.h"

#include "gradmesh/core/error.h"

namespace gradmesh::nn {

std::unique_ptr<Sequential> build_mlp(const MlpSpec& spec) {
  auto net = std::make_unique<Sequential>();
  net->add(std::make_unique<Flatten>());
  int64_t width = spec.in_features;
  for (int64_t h : spec.hidden) {
    net->add(std::make_unique<Linear>(width, h, true, spec.init));
    net->add(std::make_unique<ActivationLayer>(spec.activation));
    if (spec.dropout > 0.0f) net->add(std::make_unique<Dropout>(spec.dropout));
    width = h;
  }
  net->add(std::make_unique<Linear>(width, spec.classes, true, spec.init));
  net->fuse_activations();
  return net;
}

std::unique_ptr<Sequential> build_cnn(const CnnSpec& spec) {
  if (spec.channels.empty()) throw_error(ErrorKind::kConfig, "model.channels", "the CNN needs at least one conv layer");
  auto net = std::make_unique<Sequential>();
  int64_t c = spec.in_channels, h = spec.height, w = spec.width;
  for (int64_t out : spec.channels) {
    h = h - spec.kernel + 1;
    w = w - spec.kernel + 1;
    if (h < 2 || w < 2)
      throw_error(ErrorKind::kConfig, "model.channels",
                  std::to_string(spec.channels.size()) + " conv+pool stages with kernel " +
                      std::to_string(spec.kernel) + " shrink a " + std::to_string(spec.height) + "x" +
                      std::to_string(spec.width) + " input to nothing; use fewer stages or a smaller kernel");
    net->add(std::make_unique<Conv2d>(c, out, spec.kernel, 1, 0, true, spec.init));
    net->add(std::make_unique<ActivationLayer>(Activation::kRelu));
    net->add(std::make_unique<MaxPool2d>(2));
    h /= 2;
    w /= 2;
    c = out;
  }
  net->add(std::make_unique<Flatten>());
  net->add(std::make_unique<Linear>(c * h * w, spec.fc_hidden, true, spec.init));
  net->add(std::make_unique<ActivationLayer>(Activation::kRelu));
  net->add(std::make_unique<Linear>(spec.fc_hidden, spec.classes, true, spec.init));
  net->fuse_activations();
  return net;
}

}  // namespace gradmesh::nn
