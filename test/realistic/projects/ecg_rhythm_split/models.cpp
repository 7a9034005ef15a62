// The dilated 1-D ResNet and the registry of named configurations.
#include "ecg.h"

#include <stdexcept>

namespace {

struct ResBlock1dImpl : torch::nn::Module {
  ResBlock1dImpl(int64_t ch, int64_t dilation) {
    conv1 = register_module(
        "conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(ch, ch, 7).padding(3 * dilation).dilation(dilation).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm1d(ch));
    conv2 = register_module("conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(ch, ch, 7).padding(3).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm1d(ch));
  }

  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(bn1->forward(conv1->forward(x)));
    h = bn2->forward(conv2->forward(h));
    return torch::relu(x + h);
  }

  torch::nn::Conv1d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm1d bn1{nullptr}, bn2{nullptr};
};
TORCH_MODULE(ResBlock1d);

std::string joined(const std::vector<std::string> &names) {
  std::string out;
  for (const auto &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

RhythmNetImpl::RhythmNetImpl(const RhythmSpec &spec) {
  stem = register_module("stem", torch::nn::Conv1d(torch::nn::Conv1dOptions(1, spec.width, 15).stride(2).padding(7).bias(false)));
  stem_bn = register_module("stem_bn", torch::nn::BatchNorm1d(spec.width));
  torch::nn::Sequential seq;
  for (int64_t b = 0; b < spec.blocks; ++b)
    seq->push_back(ResBlock1d(spec.width, int64_t{1} << (b % 4)));
  blocks = register_module("blocks", seq);
  drop = register_module("drop", torch::nn::Dropout(spec.dropout));
  head = register_module("head", torch::nn::Linear(2 * spec.width, kClasses));
}

torch::Tensor RhythmNetImpl::forward(torch::Tensor x) {
  auto h = torch::relu(stem_bn->forward(stem->forward(x)));
  h = blocks->forward(torch::max_pool1d(h, 2));
  // Average and max pooling over time, concatenated.
  auto pooled = torch::cat({h.mean(-1), std::get<0>(h.max(-1))}, 1);
  return head->forward(drop->forward(pooled));
}

ModelRegistry &ModelRegistry::instance() {
  static ModelRegistry registry = [] {
    ModelRegistry r;
    r.add("resnet1d_small", [] { return std::make_shared<RhythmNetImpl>(RhythmSpec{32, 2, 0.2}); });
    r.add("resnet1d_wide", [] { return std::make_shared<RhythmNetImpl>(RhythmSpec{64, 3, 0.3}); });
    r.add("resnet1d_deep", [] { return std::make_shared<RhythmNetImpl>(RhythmSpec{32, 8, 0.2}); });
    return r;
  }();
  return registry;
}

void ModelRegistry::add(const std::string &name, Factory factory) {
  if (!factories_.emplace(name, std::move(factory)).second)
    throw std::logic_error("architecture '" + name + "' registered twice");
}

std::shared_ptr<RhythmNetImpl> ModelRegistry::create(const std::string &name) const {
  auto it = factories_.find(name);
  if (it == factories_.end())
    throw std::invalid_argument("unknown architecture '" + name + "' (known: " + joined(names()) + ")");
  return it->second();
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto &entry : factories_)
    out.push_back(entry.first);
  return out;
}
