// A 10-class classifier of synthetic 20-d features, with a small metrics
// library in the style of torchmetrics: an abstract Metric with virtual
// update()/compute()/reset(), concrete final metrics held by value in the
// trainer, and a report that walks them through base-class pointers.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

constexpr int64_t kClasses = 10;
constexpr int64_t kIn = 20;

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kIn, 128))),
        bn(register_module("bn", torch::nn::BatchNorm1d(128))),
        fc2(register_module("fc2", torch::nn::Linear(128, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Classifier);

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void update(const torch::Tensor &logits, const torch::Tensor &target) = 0;
  virtual double compute() const = 0;
  virtual void reset() = 0;
  virtual std::string name() const = 0;
};

class MeanLoss final : public Metric {
 public:
  explicit MeanLoss(torch::Device device) : device_(device), sum_(torch::zeros({}, device)) {}
  void update(const torch::Tensor &logits, const torch::Tensor &target) override {
    auto batch_loss = torch::nn::functional::cross_entropy(logits, target);
    // BUG(torch-loss-accumulation-graph): the trainer passes the live logits
    // of every step; 'sum_' keeps each step's graph until reset().
    sum_ += batch_loss * static_cast<double>(logits.size(0));
    count_ += logits.size(0);
  }
  double compute() const override {
    // OK(torch-host-sync-in-loop): report() reads it once per epoch; the
    // epoch loop trains nothing itself (its inner step loop does).
    return count_ == 0 ? 0.0 : sum_.item<double>() / static_cast<double>(count_);
  }
  void reset() override {
    sum_ = torch::zeros({}, device_);
    count_ = 0;
  }
  std::string name() const override { return "loss"; }

 private:
  torch::Device device_;
  torch::Tensor sum_;
  int64_t count_ = 0;
};

class Accuracy final : public Metric {
 public:
  void update(const torch::Tensor &logits, const torch::Tensor &target) override {
    // BUG(torch-host-sync-in-loop): the trainer updates this on every step
    // with logits on the training device; item() waits for the step.
    correct_ += logits.argmax(1).eq(target).sum().item<int64_t>();
    seen_ += target.size(0);
  }
  double compute() const override { return seen_ == 0 ? 0.0 : static_cast<double>(correct_) / static_cast<double>(seen_); }
  void reset() override { correct_ = seen_ = 0; }
  std::string name() const override { return "acc"; }

 private:
  int64_t correct_ = 0;
  int64_t seen_ = 0;
};

class Perplexity final : public Metric {
 public:
  explicit Perplexity(torch::Device device) : device_(device), nll_(torch::zeros({}, device)) {}
  void update(const torch::Tensor &logits, const torch::Tensor &target) override {
    // OK(torch-loss-accumulation-graph): only validate() calls this, under
    // its NoGradGuard; no graph is recorded.
    nll_ += torch::nn::functional::cross_entropy(
        logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    n_ += target.size(0);
  }
  double compute() const override { return n_ == 0 ? 0.0 : std::exp(nll_.item<double>() / static_cast<double>(n_)); }
  void reset() override {
    nll_ = torch::zeros({}, device_);
    n_ = 0;
  }
  std::string name() const override { return "ppl"; }

 private:
  torch::Device device_;
  torch::Tensor nll_;
  int64_t n_ = 0;
};

class ConfusionMatrix final : public Metric {
 public:
  ConfusionMatrix() : counts_(torch::zeros({kClasses, kClasses}, torch::kLong)) {}
  void update(const torch::Tensor &logits, const torch::Tensor &target) override {
    auto flat = target * kClasses + logits.argmax(1);
    auto hist = torch::bincount(flat, {}, kClasses * kClasses).view({kClasses, kClasses});
    counts_ += hist;
  }
  double compute() const override {
    auto diag = counts_.diag().to(torch::kDouble);
    auto rows = counts_.sum(1).clamp_min(1).to(torch::kDouble);
    return (diag / rows).mean().item<double>();  // balanced accuracy
  }
  void reset() override { counts_.zero_(); }
  std::string name() const override { return "bal_acc"; }

 private:
  torch::Tensor counts_;
};

std::pair<torch::Tensor, torch::Tensor> synth(int64_t n, torch::Device device) {
  auto y = torch::randint(0, kClasses, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto x = torch::randn({n, kIn}, device) + torch::nn::functional::one_hot(y, kClasses).to(torch::kFloat).repeat({1, 2});
  return {x, y};
}

void report(const std::string &tag, const std::vector<const Metric *> &metrics) {
  std::cout << tag;
  for (const Metric *m : metrics) std::cout << ' ' << m->name() << '=' << std::setprecision(4) << m->compute();
  std::cout << '\n';
}

void validate(Classifier &model, torch::Device device, Perplexity &ppl, ConfusionMatrix &confusion) {
  torch::NoGradGuard no_grad;
  model->eval();
  for (int b = 0; b < 20; ++b) {
    auto data = synth(512, device);
    // OK(torch-inference-without-no-grad): the guard above covers the loop.
    auto logits = model->forward(data.first);
    ppl.update(logits, data.second);
    // BUG(torch-device-mismatch): ConfusionMatrix::update() adds the histogram
    // of these device tensors into 'counts_', which its constructor made on
    // the host.
    confusion.update(logits, data.second);
  }
  model->train();
}

// Class prior of the model on unlabeled data, for label-shift correction.
std::vector<double> estimate_prior(Classifier &model, torch::Device device, int64_t batches) {
  model->eval();
  auto prior = torch::zeros({kClasses}, device);
  for (int64_t b = 0; b < batches; ++b) {
    auto x = synth(1024, device).first;
    // BUG(torch-inference-without-no-grad): nothing here runs backward and no
    // guard is in scope; autograd records every batch.
    auto probs = torch::softmax(model->forward(x), 1);
    // BUG(torch-loss-accumulation-graph): 'prior' keeps every batch's graph.
    prior += probs.sum(0);
  }
  model->train();
  auto p = (prior / prior.sum()).to(torch::kCPU, torch::kDouble).contiguous();
  return std::vector<double>(p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Classifier model;
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  MeanLoss train_loss(device);
  Accuracy train_acc;
  Perplexity val_ppl(device);
  ConfusionMatrix val_confusion;

  for (int epoch = 0; epoch < 5; ++epoch) {
    model->train();
    for (int step = 0; step < 200; ++step) {
      auto data = synth(128, device);
      auto logits = model->forward(data.first);
      auto loss = torch::nn::functional::cross_entropy(logits, data.second);
      opt.zero_grad();
      loss.backward();
      opt.step();
      train_loss.update(logits, data.second);
      train_acc.update(logits, data.second);
    }
    validate(model, device, val_ppl, val_confusion);
    report("epoch " + std::to_string(epoch), {&train_loss, &train_acc, &val_ppl, &val_confusion});
    for (Metric *m : std::vector<Metric *>{&train_loss, &train_acc, &val_ppl, &val_confusion}) m->reset();
  }

  auto prior = estimate_prior(model, device, 10);
  std::cout << "prior[0] " << prior[0] << '\n';
  return 0;
}
