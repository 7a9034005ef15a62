// A two-stage inference cascade for a document-type classifier. A model zoo
// builds each stage from its architecture name through a switch; the cheap
// first stage answers the confident requests and escalates the rest to a
// large model that lives on a second GPU. The service handles requests one
// batch at a time.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

constexpr int64_t kFeatures = 128;
constexpr int64_t kClasses = 8;

struct ClassifierBase : torch::nn::Module {
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

struct LinearProbe : ClassifierBase {
  LinearProbe() : fc(register_module("fc", torch::nn::Linear(kFeatures, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) override { return fc(x); }
  torch::nn::Linear fc;
};

struct WideMlp : ClassifierBase {
  explicit WideMlp(int64_t width)
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kFeatures, width), torch::nn::ReLU(),
                                                         torch::nn::Linear(width, width), torch::nn::ReLU(),
                                                         torch::nn::Linear(width, kClasses)))) {}
  torch::Tensor forward(torch::Tensor x) override { return net->forward(x); }
  torch::nn::Sequential net;
};

enum class Arch { Probe, Mlp1k, Mlp4k };

std::shared_ptr<ClassifierBase> make_model(Arch arch) {
  switch (arch) {
  case Arch::Probe:
    return std::make_shared<LinearProbe>();
  case Arch::Mlp1k:
    return std::make_shared<WideMlp>(1024);
  case Arch::Mlp4k:
    return std::make_shared<WideMlp>(4096);
  }
  throw std::invalid_argument("unknown architecture");
}

struct Stage {
  std::string name;
  std::shared_ptr<ClassifierBase> model;
  torch::Device device;
  double accept_confidence;  // answer here when max prob >= this
};

class Cascade {
 public:
  void add_stage(const std::string &name, Arch arch, torch::Device device, double accept) {
    auto model = make_model(arch);
    model->to(device);
    model->eval();
    stages_.push_back(Stage{name, model, device, accept});
  }

  // Returns a label per row and counts how many rows each stage answered.
  std::vector<int64_t> classify(const torch::Tensor &batch) {
    std::vector<int64_t> labels(static_cast<size_t>(batch.size(0)), -1);
    std::vector<int64_t> pending(labels.size());
    for (size_t i = 0; i < pending.size(); ++i)
      pending[i] = static_cast<int64_t>(i);

    for (size_t s = 0; s < stages_.size() && !pending.empty(); ++s) {
      Stage &stage = stages_[s];
      auto rows = torch::tensor(pending, torch::kLong);
      auto x = batch.index_select(0, rows).to(stage.device);
      // BUG(torch-inference-without-no-grad): the loop over stages only runs
      // forwards, and neither classify() nor its caller disables autograd.
      auto probs = stage.model->forward(x).softmax(1);
      auto best = probs.max(1);
      // Confidence and label side by side, one copy back to the host.
      auto packed = torch::stack({std::get<0>(best), std::get<1>(best).to(torch::kFloat)}, 1);
      auto host = packed.to(torch::kCPU, /*non_blocking=*/true);
      // BUG(torch-non-blocking-d2h-race): for a stage on a GPU the rows below
      // are read while the non-blocking copy may still be in flight.
      auto rows_host = host.accessor<float, 2>();
      const bool last = s + 1 == stages_.size();
      std::vector<int64_t> still;
      for (size_t r = 0; r < pending.size(); ++r) {
        if (last || rows_host[static_cast<int64_t>(r)][0] >= stage.accept_confidence) {
          labels[static_cast<size_t>(pending[r])] = static_cast<int64_t>(rows_host[static_cast<int64_t>(r)][1]);
          ++answered_[stage.name];
        } else {
          still.push_back(pending[r]);
        }
      }
      pending.swap(still);
    }
    return labels;
  }

  void report() const {
    for (const auto &kv : answered_)
      std::cout << kv.first << " answered " << kv.second << '\n';
  }

 private:
  std::vector<Stage> stages_;
  std::map<std::string, int64_t> answered_;
};

int main() {
  Cascade cascade;
  if (torch::cuda::is_available()) {
    // OK(torch-cuda-unguarded): inside the availability check.
    cascade.add_stage("probe", Arch::Probe, torch::Device(torch::kCUDA, 0), 0.9);
    // OK(torch-cuda-unguarded): inside the availability check.
    // BUG(torch-device-index-unchecked): is_available() says nothing about a
    // second GPU; with CUDA_VISIBLE_DEVICES=0 ordinal 1 does not exist.
    cascade.add_stage("mlp4k", Arch::Mlp4k, torch::Device(torch::kCUDA, 1), 0.0);
  } else {
    cascade.add_stage("probe", Arch::Probe, torch::kCPU, 0.9);
    cascade.add_stage("mlp1k", Arch::Mlp1k, torch::kCPU, 0.0);
  }

  int64_t total = 0;
  for (int64_t request = 0; request < 200; ++request) {
    auto batch = torch::randn({32, kFeatures});
    auto labels = cascade.classify(batch);
    for (auto l : labels)
      total += l >= 0;
  }
  std::cout << "labelled " << total << " rows\n";
  cascade.report();
  return 0;
}
