// Self-distillation with an exponential-moving-average teacher (Mean Teacher
// / BYOL style) for an image classifier. The teacher is a clone of the
// student whose weights follow the student's with momentum; its softened
// predictions are the distillation target. For a third of the batches the
// targets were precomputed offline by a larger model and come from a cache
// as a std::optional. A Distiller class owns the networks, the optimizer
// behind a std::unique_ptr and an end-of-epoch callback.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

constexpr int64_t kClasses = 100;
constexpr double kT = 4.0;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(32))),
        fc(register_module("fc", torch::nn::Linear(32, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::relu(bn->forward(conv->forward(x)));
    return fc->forward(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

struct Config {
  torch::Device device{torch::kCPU};
  double momentum = 0.996;
  int64_t batch = 128;
};

Config make_config() {
  Config c;
  // BUG(torch-cuda-unguarded): the trainer is pinned to CUDA without asking
  // whether the machine has one.
  c.device = torch::Device(torch::kCUDA);
  return c;
}

// Offline soft targets for some batches (computed by a larger model).
std::optional<torch::Tensor> cached_soft_targets(int64_t batch_idx, int64_t bs) {
  if (batch_idx % 3 != 0)
    return std::nullopt;
  return torch::softmax(torch::randn({bs, kClasses}) / kT, 1);
}

struct EpochStats {
  struct Parts {
    torch::Tensor kd, ce;
  } parts;
  int64_t steps = 0;
};

class Distiller {
 public:
  explicit Distiller(const Config &cfg) : cfg_(cfg) {
    student_->to(cfg_.device);
    teacher_ = std::dynamic_pointer_cast<NetImpl>(student_->clone());
    teacher_->eval();
    opt_ = std::make_unique<torch::optim::SGD>(student_->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    on_epoch_end_ = [] {
      // BUG(torch-empty-cache-in-loop): the callback runs after every epoch
      // of fit() and hands the allocator's blocks back each time.
      c10::cuda::CUDACachingAllocator::emptyCache();
    };
  }

  void fit(int epochs, int64_t batches) {
    for (int e = 0; e < epochs; ++e) {
      auto stats = run_epoch(batches);
      // OK(torch-host-sync-in-loop): one read per epoch; the steps run in
      // run_epoch()'s own loop.
      std::cout << "epoch " << e << " kd " << (stats.parts.kd / stats.steps).item<double>() << "\n";
      on_epoch_end_();
    }
  }

  double validate(int64_t batches) {
    torch::NoGradGuard no_grad;
    student_->eval();
    double correct = 0;
    for (int64_t b = 0; b < batches; ++b) {
      auto x = torch::randn({cfg_.batch, 3, 32, 32}, cfg_.device);
      auto y = torch::randint(0, kClasses, {cfg_.batch}, torch::TensorOptions().dtype(torch::kLong).device(cfg_.device));
      // OK(torch-inference-without-no-grad): the guard covers the loop.
      correct += student_->forward(x).argmax(1).eq(y).sum().item<double>();
    }
    student_->train();
    return correct / static_cast<double>(batches * cfg_.batch);
  }

 private:
  EpochStats run_epoch(int64_t batches) {
    EpochStats stats;
    stats.parts.kd = torch::zeros({}, cfg_.device);
    stats.parts.ce = torch::zeros({}, cfg_.device);
    student_->train();
    for (int64_t b = 0; b < batches; ++b) {
      auto x = torch::randn({cfg_.batch, 3, 32, 32}, cfg_.device);
      auto y = torch::randint(0, kClasses, {cfg_.batch}, torch::TensorOptions().dtype(torch::kLong).device(cfg_.device));
      auto logits = student_->forward(x);
      auto logp = torch::log_softmax(logits / kT, 1);
      torch::Tensor kd;
      if (auto cached = cached_soft_targets(b, cfg_.batch)) {
        // BUG(torch-device-mismatch): the cached targets were made on the
        // host; the student's log-probabilities are on the device.
        kd = torch::nn::functional::kl_div(logp, cached.value(), torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
      } else {
        torch::NoGradGuard no_grad;
        // OK(torch-inference-without-no-grad): the teacher runs under a guard
        // inside the training loop.
        auto soft = torch::softmax(teacher_->forward(x) / kT, 1);
        kd = torch::nn::functional::kl_div(logp, soft, torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
      }
      auto ce = torch::nn::functional::cross_entropy(logits, y);
      auto loss = ce + kT * kT * kd;
      opt_->zero_grad();
      loss.backward();
      opt_->step();
      update_teacher();
      // OK(torch-loss-accumulation-graph): detached.
      stats.parts.kd += kd.detach();
      // BUG(torch-loss-accumulation-graph): the cross-entropy joins the
      // epoch's running sum with its graph.
      stats.parts.ce += ce;
      ++stats.steps;
    }
    return stats;
  }

  void update_teacher() {
    torch::NoGradGuard no_grad;
    auto t = teacher_->parameters();
    auto s = student_->parameters();
    for (size_t i = 0; i < t.size(); ++i)
      t[i].mul_(cfg_.momentum).add_(s[i], 1.0 - cfg_.momentum);
  }

  Config cfg_;
  Net student_;
  std::shared_ptr<NetImpl> teacher_;
  std::unique_ptr<torch::optim::SGD> opt_;
  std::function<void()> on_epoch_end_;
};

int main() {
  torch::manual_seed(5);
  Distiller distiller(make_config());
  distiller.fit(30, 390);
  std::cout << "val acc " << distiller.validate(79) << "\n";
  return 0;
}
