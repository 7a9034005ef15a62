// Galaxy morphology classifier (smooth, featured disk, edge-on, spiral,
// merger) on 3x64x64 survey cutouts, a Galaxy Zoo style baseline. The
// backbone is assembled at run time from a list of layer specs (read from a
// YAML file in the real project) into a torch::nn::Sequential and
// type-erased into a torch::nn::AnyModule, so training, evaluation and the
// catalogue pass are free functions taking an AnyModule&. A MetricTracker
// collects the per-step accuracy and the loss curve that is saved per epoch.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kClasses = 5;
constexpr int64_t kSide = 64;

struct LayerSpec {
  std::string kind;
  int64_t in = 0, out = 0;
};

const std::vector<LayerSpec> kBackboneSpec = {
    {"conv", 3, 32},   {"bn", 32},  {"relu"}, {"pool"},    {"conv", 32, 64}, {"bn", 64},
    {"relu"},          {"pool"},    {"conv", 64, 128},     {"bn", 128},      {"relu"},
    {"gap"},           {"flatten"}, {"dropout"},           {"linear", 128, kClasses},
};

// AnyModule needs a non-templated forward(), hence the usual subclass of
// SequentialImpl (as in torchvision's C++ models).
struct BackboneImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(Backbone);

Backbone build_backbone(const std::vector<LayerSpec> &spec) {
  Backbone seq;
  for (const auto &layer : spec) {
    if (layer.kind == "conv")
      seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(layer.in, layer.out, 3).padding(1)));
    else if (layer.kind == "bn")
      seq->push_back(torch::nn::BatchNorm2d(layer.in));
    else if (layer.kind == "relu")
      seq->push_back(torch::nn::ReLU());
    else if (layer.kind == "pool")
      seq->push_back(torch::nn::MaxPool2d(2));
    else if (layer.kind == "gap")
      seq->push_back(torch::nn::AdaptiveAvgPool2d(1));
    else if (layer.kind == "flatten")
      seq->push_back(torch::nn::Flatten());
    else if (layer.kind == "dropout")
      seq->push_back(torch::nn::Dropout(0.4));
    else if (layer.kind == "linear")
      seq->push_back(torch::nn::Linear(layer.in, layer.out));
    else
      throw std::invalid_argument("unknown layer kind: " + layer.kind);
  }
  return seq;
}

// Synthetic cutouts: a class-dependent radial light profile plus sky noise.
class GalaxyCutouts : public torch::data::datasets::Dataset<GalaxyCutouts> {
 public:
  GalaxyCutouts(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
    auto c = torch::linspace(-1.0, 1.0, kSide);
    radius2_ = c.pow(2).unsqueeze(0) + c.pow(2).unsqueeze(1);
  }
  torch::data::Example<> get(size_t index) override {
    auto gen = at::detail::createCPUGenerator(seed_ * 7919 + index);
    const int64_t label = static_cast<int64_t>((seed_ + index * 7) % kClasses);
    auto img = torch::randn({3, kSide, kSide}, gen) * 0.2;
    img += torch::exp(-radius2_ * (2.0 + 3.0 * static_cast<double>(label))).unsqueeze(0);
    return {img, torch::tensor(label)};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(size_); }

 private:
  int64_t size_;
  uint64_t seed_;
  torch::Tensor radius2_;
};

class MetricTracker {
 public:
  void update(const torch::Tensor &loss, const torch::Tensor &logits, const torch::Tensor &target) {
    // BUG(torch-host-sync-in-loop): update() runs on every training step and
    // reads the number of correct predictions back from the device.
    correct_ += logits.argmax(1).eq(target).sum().item<int64_t>();
    seen_ += target.size(0);
    // BUG(torch-loss-accumulation-graph): the loss curve keeps each step's
    // loss tensor, and with it that step's autograd graph, until reset().
    curve_.push_back(loss);
  }
  void reset() {
    curve_.clear();
    correct_ = 0;
    seen_ = 0;
  }
  double accuracy() const { return seen_ == 0 ? 0.0 : static_cast<double>(correct_) / static_cast<double>(seen_); }
  torch::Tensor curve() const { return torch::stack(curve_); }

 private:
  std::vector<torch::Tensor> curve_;
  int64_t correct_ = 0;
  int64_t seen_ = 0;
};

template <typename Loader>
void train_epoch(torch::nn::AnyModule &model, Loader &loader, torch::optim::Optimizer &opt, MetricTracker &tracker,
                 torch::Device device) {
  model.ptr()->train();
  for (auto it = loader.begin(); it != loader.end(); ++it) {
    auto x = it->data.to(device);
    auto y = it->target.to(device);
    opt.zero_grad();
    auto logits = model.forward(x);
    auto loss = F::cross_entropy(logits, y);
    loss.backward();
    opt.step();
    tracker.update(loss, logits, y);
  }
}

template <typename Loader>
double evaluate(torch::nn::AnyModule &model, Loader &loader, torch::Device device) {
  model.ptr()->eval();
  int64_t correct = 0, seen = 0;
  for (auto &batch : loader) {
    // BUG(torch-inference-without-no-grad): the validation loop never calls
    // backward() and holds no guard; eval() alone keeps autograd recording.
    auto logits = model.forward(batch.data.to(device));
    correct += logits.argmax(1).eq(batch.target.to(device)).sum().template item<int64_t>();
    seen += batch.target.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(seen, 1));
}

std::vector<int64_t> classify_catalogue(torch::nn::AnyModule &model, const torch::Tensor &cutouts,
                                        torch::Device device) {
  c10::InferenceMode guard;
  model.ptr()->eval();
  std::vector<int64_t> counts(kClasses, 0);
  const int64_t n = cutouts.size(0);
  for (int64_t start = 0; start < n; start += 256) {
    auto chunk = cutouts.slice(0, start, std::min<int64_t>(start + 256, n)).to(device);
    // OK(torch-inference-without-no-grad): InferenceMode covers the whole
    // catalogue pass.
    auto pred = model.forward(chunk).argmax(1).cpu();
    auto a = pred.accessor<int64_t, 1>();
    for (int64_t i = 0; i < a.size(0); ++i)
      ++counts[static_cast<size_t>(a[i])];
  }
  return counts;
}

int main() {
  torch::manual_seed(155);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;

  Backbone backbone = build_backbone(kBackboneSpec);
  backbone->to(device);
  torch::nn::AnyModule model(backbone);
  torch::optim::Adam opt(backbone->parameters(), torch::optim::AdamOptions(1e-3));

  auto train_loader = torch::data::make_data_loader(GalaxyCutouts(4096, 1).map(torch::data::transforms::Stack<>()),
                                                    torch::data::DataLoaderOptions().batch_size(64).workers(2));
  auto val_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      GalaxyCutouts(512, 99).map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions().batch_size(128));

  MetricTracker tracker;
  for (int epoch = 0; epoch < 8; ++epoch) {
    tracker.reset();
    train_epoch(model, *train_loader, opt, tracker, device);
    const double val_acc = evaluate(model, *val_loader, device);
    auto curve = tracker.curve();
    // OK(torch-host-sync-in-loop): once per epoch; the training loop is the
    // batch loop inside train_epoch().
    std::cout << "epoch " << epoch << " train loss " << curve.mean().item<double>() << " train acc "
              << tracker.accuracy() << " val acc " << val_acc << '\n';
    torch::save(curve.detach().cpu(), "loss_curve_epoch" + std::to_string(epoch) + ".pt");
  }

  auto catalogue = torch::randn({2000, 3, kSide, kSide}) * 0.2;
  auto counts = classify_catalogue(model, catalogue, device);
  for (int64_t c = 0; c < kClasses; ++c)
    std::cout << "class " << c << ": " << counts[static_cast<size_t>(c)] << " galaxies\n";
  return 0;
}
