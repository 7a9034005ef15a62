// Skin lesion classification on dermoscopy crops (seven diagnostic classes,
// melanoma the one that matters). The candidate architectures live in a
// ModelZoo keyed by name and typed by the caller; the trainer fetches the CNN
// by name, fits it epoch by epoch, and a ScopedReport prints the validation
// accuracy when each epoch's scope closes (also when a NaN check throws out of
// it). The final comparison runs a list of Metric objects over the test split,
// and the clinic's triage queue is scored with the cheap colour probe.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace derm {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kClasses = 7, kMelanoma = 4, kSide = 64;

struct Batch {
  torch::Tensor images;  // [B, 3, 64, 64]
  torch::Tensor labels;  // [B]
};

std::vector<Batch> synth_split(int64_t batches, int64_t batch_size) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < batches; ++i) {
    auto labels = torch::randint(0, kClasses, {batch_size}, torch::kLong);
    auto tint = labels.to(torch::kFloat).view({-1, 1, 1, 1}) / kClasses;
    out.push_back({torch::randn({batch_size, 3, kSide, kSide}) * 0.5 + tint, labels});
  }
  return out;
}

struct LesionCnnImpl : nn::Module {
  explicit LesionCnnImpl(int64_t width = 32) {
    features = register_module(
        "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, width, 3).padding(1)), nn::BatchNorm2d(width),
                                   nn::ReLU(), nn::MaxPool2d(2),
                                   nn::Conv2d(nn::Conv2dOptions(width, 2 * width, 3).padding(1)),
                                   nn::BatchNorm2d(2 * width), nn::ReLU(), nn::AdaptiveAvgPool2d(1), nn::Flatten()));
    head = register_module("head", nn::Sequential(nn::Dropout(0.3), nn::Linear(2 * width, kClasses)));
  }
  torch::Tensor forward(const torch::Tensor &x) { return head->forward(features->forward(x)); }
  nn::Sequential features{nullptr}, head{nullptr};
};
TORCH_MODULE(LesionCnn);

// Colour-layout baseline: 4x4 pooled colour means into a linear layer. No
// dropout, no normalisation layer: its mode changes nothing.
struct ColourProbeImpl : nn::Module {
  ColourProbeImpl() : fc(register_module("fc", nn::Linear(3 * 16, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    return fc->forward(F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions({4, 4})).flatten(1));
  }
  nn::Linear fc;
};
TORCH_MODULE(ColourProbe);

// Every candidate by name; callers say which type they expect.
class ModelZoo {
 public:
  void add(const std::string &name, std::shared_ptr<nn::Module> module) { models_.emplace(name, std::move(module)); }

  template <typename Impl>
  std::shared_ptr<Impl> get(const std::string &name) const {
    auto it = models_.find(name);
    if (it == models_.end()) throw std::out_of_range("no model named " + name);
    auto typed = std::dynamic_pointer_cast<Impl>(it->second);
    if (!typed) throw std::invalid_argument(name + " is registered with another type");
    return typed;
  }

  void to(torch::Device device) {
    for (auto &kv : models_) kv.second->to(device);
  }

  // Inference mode for every candidate before a comparison.
  void eval_all() {
    for (auto &kv : models_) kv.second->eval();
  }

 private:
  std::map<std::string, std::shared_ptr<nn::Module>> models_;
};

struct EpochStats {
  torch::Tensor loss_sum;
  int64_t steps = 0;
};

template <typename Impl>
EpochStats fit_epoch(Impl &net, torch::optim::Optimizer &opt, const std::vector<Batch> &train, torch::Device device) {
  net.train();
  EpochStats stats;
  stats.loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  for (const auto &b : train) {
    opt.zero_grad();
    auto loss = F::cross_entropy(net.forward(b.images.to(device)), b.labels.to(device));
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the struct field outlives the step and sums the live loss, keeping every step's graph.
    stats.loss_sum += loss;
    ++stats.steps;
  }
  return stats;
}

// Validation accuracy of the epoch, printed when the epoch's scope ends.
class ScopedReport {
 public:
  ScopedReport(LesionCnn net, const std::vector<Batch> &val, torch::Device device, int64_t epoch)
      : net_(std::move(net)), val_(val), device_(device), epoch_(epoch) {}
  ScopedReport(const ScopedReport &) = delete;
  ScopedReport &operator=(const ScopedReport &) = delete;
  ~ScopedReport() {
    // OK(torch-inference-without-no-grad): the report holds its own guard.
    torch::NoGradGuard no_grad;
    int64_t correct = 0, seen = 0;
    for (const auto &b : val_) {
      // BUG(torch-eval-mode-missing): the scope closes right after fit_epoch() put the CNN in training mode; dropout and batch statistics are live.
      auto pred = net_->forward(b.images.to(device_)).argmax(1);
      correct += pred.eq(b.labels.to(device_)).sum().item<int64_t>();
      seen += b.labels.size(0);
    }
    std::cout << "epoch " << epoch_ << " val acc " << static_cast<double>(correct) / std::max<int64_t>(seen, 1) << '\n';
  }

 private:
  LesionCnn net_;
  const std::vector<Batch> &val_;
  torch::Device device_;
  int64_t epoch_;
};

struct Metric {
  virtual ~Metric() = default;
  virtual void update(LesionCnnImpl &model, const Batch &batch, torch::Device device) = 0;
  virtual double value() const = 0;
  virtual std::string name() const = 0;
};

struct Top1Accuracy : Metric {
  void update(LesionCnnImpl &model, const Batch &b, torch::Device device) override {
    // OK(torch-eval-mode-missing): main calls zoo.eval_all() before the suite; the zoo's map holds the same module as 'cnn'.
    auto pred = model.forward(b.images.to(device)).argmax(1).cpu();
    correct += pred.eq(b.labels).sum().item<int64_t>();
    total += b.labels.size(0);
  }
  double value() const override { return total ? static_cast<double>(correct) / total : 0.0; }
  std::string name() const override { return "top1"; }
  int64_t correct = 0, total = 0;
};

struct MelanomaSensitivity : Metric {
  explicit MelanomaSensitivity(double threshold) : threshold(threshold) {}
  void update(LesionCnnImpl &model, const Batch &b, torch::Device device) override {
    // OK(torch-eval-mode-missing): same suite call, after zoo.eval_all().
    auto p_mel = torch::softmax(model.forward(b.images.to(device)), 1).select(1, kMelanoma).cpu();
    auto is_mel = b.labels.eq(kMelanoma);
    hits += (p_mel.gt(threshold) & is_mel).sum().item<int64_t>();
    positives += is_mel.sum().item<int64_t>();
  }
  double value() const override { return positives ? static_cast<double>(hits) / positives : 0.0; }
  std::string name() const override { return "melanoma_sensitivity"; }
  double threshold;
  int64_t hits = 0, positives = 0;
};

std::map<std::string, double> run_metrics(LesionCnnImpl &model, std::vector<std::unique_ptr<Metric>> &metrics,
                                          const std::vector<Batch> &test, torch::Device device) {
  torch::NoGradGuard no_grad;
  for (const auto &b : test)
    for (auto &m : metrics) m->update(model, b, device);
  std::map<std::string, double> out;
  for (const auto &m : metrics) out[m->name()] = m->value();
  return out;
}

// Second pass over the curated hard crops (the validation cases the CNN gets wrong).
void finetune_on_hard(LesionCnnImpl &model, torch::optim::Optimizer &opt, const std::vector<Batch> &hard,
                      torch::Device device) {
  for (const auto &b : hard) {
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): zoo.eval_all() before the metric suite left the CNN in eval mode and nothing calls train() before this fine-tune.
    auto loss = F::cross_entropy(model.forward(b.images.to(device)), b.labels.to(device));
    loss.backward();
    opt.step();
  }
}

// One photo from the clinic's queue: the class the colour probe predicts.
int64_t triage_one(ColourProbeImpl &probe, const torch::Tensor &photo, torch::Device device) {
  // BUG(torch-inference-without-no-grad): main's queue loop calls this for every photo with autograd on and no backward.
  // OK(torch-eval-mode-missing): the probe has no dropout or normalisation layer, its mode does not matter.
  auto logits = probe.forward(photo.unsqueeze(0).to(device));
  return logits.argmax(1).item<int64_t>();
}

}  // namespace derm

int main() {
  using namespace derm;
  torch::manual_seed(364);
  // OK(torch-cuda-unguarded): CUDA only when it is there.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;

  ModelZoo zoo;
  zoo.add("cnn32", std::make_shared<LesionCnnImpl>(32));
  zoo.add("colour_probe", std::make_shared<ColourProbeImpl>());
  zoo.to(device);

  const auto train = synth_split(24, 32), val = synth_split(6, 64), test = synth_split(8, 64);

  LesionCnn cnn(zoo.get<LesionCnnImpl>("cnn32"));
  torch::optim::AdamW opt(cnn->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(1e-4));
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    ScopedReport report(cnn, val, device, epoch);
    const auto stats = fit_epoch(*cnn, opt, train, device);
    const double mean = stats.loss_sum.item<double>() / static_cast<double>(std::max<int64_t>(stats.steps, 1));
    if (!std::isfinite(mean)) throw std::runtime_error("loss diverged");
    std::cout << "epoch " << epoch << " train loss " << mean << '\n';
  }

  auto probe = zoo.get<ColourProbeImpl>("colour_probe");
  torch::optim::SGD probe_opt(probe->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t epoch = 0; epoch < 3; ++epoch) fit_epoch(*probe, probe_opt, train, device);

  std::vector<std::unique_ptr<Metric>> metrics;
  metrics.push_back(std::make_unique<Top1Accuracy>());
  metrics.push_back(std::make_unique<MelanomaSensitivity>(0.3));
  zoo.eval_all();
  for (const auto &kv : run_metrics(*cnn, metrics, test, device)) std::cout << kv.first << " " << kv.second << '\n';
  const std::vector<Batch> hard(val.begin(), val.begin() + 2);
  finetune_on_hard(*cnn, opt, hard, device);

  const auto queue = synth_split(1, 40).front().images;
  int64_t urgent = 0;
  for (int64_t i = 0; i < queue.size(0); ++i) urgent += triage_one(*probe, queue[i], device) == kMelanoma;
  std::cout << urgent << " of " << queue.size(0) << " photos flagged for the dermatologist\n";
  return 0;
}
