// Multi-task learning: a shared trunk with a segmentation-like head and a
// depth head, per-task loss weights, a per-task loss log, and a full-size
// validation pass.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

struct Options {
  bool gpu = true;
  bool probe_transfer = false;
  int64_t steps = 300;
};

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cpu")
      o.gpu = false;
    if (a == "--probe-transfer")
      o.probe_transfer = true;
  }
  return o;
}

struct MultiTaskImpl : torch::nn::Module {
  MultiTaskImpl()
      : trunk(register_module("trunk", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        seg(register_module("seg", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 4, 1)))),
        depth(register_module("depth", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 1)))) {}
  std::map<std::string, torch::Tensor> forward(torch::Tensor x) {
    auto h = torch::relu(trunk(x));
    return {{"seg", seg(h)}, {"depth", depth(h)}};
  }
  torch::nn::Conv2d trunk, seg, depth;
};
TORCH_MODULE(MultiTask);

class MultiTaskTrainer {
 public:
  MultiTaskTrainer(MultiTask model, torch::Device device)
      : model_(model), device_(device), opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)) {
    model_->to(device_);
  }

  void train(int64_t steps) {
    std::map<std::string, double> weights{{"seg", 1.0}, {"depth", 0.5}};
    for (int64_t step = 0; step < steps; ++step) {
      auto x = torch::randn({8, 3, 64, 64}, device_);
      auto out = model_->forward(x);
      auto seg_loss = torch::nn::functional::cross_entropy(
          out["seg"], torch::randint(0, 4, {8, 64, 64}, torch::TensorOptions().dtype(torch::kLong).device(device_)));
      auto depth_loss = torch::l1_loss(out["depth"], torch::rand({8, 1, 64, 64}, device_));
      auto loss = weights["seg"] * seg_loss + weights["depth"] * depth_loss;
      opt_.zero_grad();
      loss.backward();
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the per-task log is declared
      // outside the loop and keeps every step's segmentation graph.
      task_losses_["seg"].push_back(seg_loss);
      // OK(torch-loss-accumulation-graph): detached.
      task_losses_["depth"].push_back(depth_loss.detach());
    }
  }

  std::map<std::string, double> validate_full() {
    torch::NoGradGuard no_grad;
    auto x = torch::randn({512, 3, 64, 64}, device_);
    auto out = model_->forward(x);
    return {{"seg_entropy", -(out["seg"].softmax(1) * out["seg"].log_softmax(1)).sum(1).mean().item<double>()},
            {"depth_mean", out["depth"].mean().item<double>()}};
  }

  size_t logged(const std::string &task) { return task_losses_[task].size(); }

 private:
  MultiTask model_;
  torch::Device device_;
  torch::optim::Adam opt_;
  std::map<std::string, std::vector<torch::Tensor>> task_losses_;
};

int main(int argc, char **argv) {
  auto opts = parse(argc, argv);
  torch::Device device(torch::kCPU);
  if (opts.gpu && torch::cuda::is_available()) {
    device = torch::Device(torch::kCUDA);
    // BUG(torch-device-index-unchecked): a scratch buffer on a second GPU,
    // but nothing compares device_count() with 2.
    auto scratch_opts = torch::TensorOptions().dtype(torch::kHalf).device(torch::kCUDA, 1);
    auto scratch = torch::empty({1 << 20}, scratch_opts);
    std::cout << "scratch on " << scratch.device() << '\n';
  }

  // BUG(torch-cuda-unguarded): to_gpu() is called below on a path that never
  // checked is_available(); its .cuda() selects CUDA.
  auto to_gpu = [](const torch::Tensor &t) { return t.cuda(); };
  if (opts.probe_transfer) {
    auto probe = to_gpu(torch::ones({1024, 1024}));
    std::cout << "probe on " << probe.device() << '\n';
  }

  MultiTask model;
  MultiTaskTrainer trainer(model, device);
  trainer.train(opts.steps);
  std::map<std::string, double> metrics;
  try {
    metrics = trainer.validate_full();
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): validate_full() is retried unchanged
    // after emptying a cache the allocator had already emptied.
    c10::cuda::CUDACachingAllocator::emptyCache();
    metrics = trainer.validate_full();
  }
  for (const auto &kv : metrics)
    std::cout << kv.first << ' ' << kv.second << '\n';
  std::cout << trainer.logged("seg") << " logged steps\n";
  return 0;
}
