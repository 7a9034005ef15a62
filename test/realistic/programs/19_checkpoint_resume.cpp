// Resuming a GPU training job from a checkpoint, then scoring the whole
// validation split in one batch. Written for the cluster's GPU nodes.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>

struct JobConfig {
  std::string checkpoint = "ckpt/latest.pt";
  std::string optimizer_state = "ckpt/latest.opt.pt";
  int64_t steps = 1000;
  int64_t batch = 256;
  int64_t features = 128;
  int64_t classes = 10;
};

struct WideNetImpl : torch::nn::Module {
  WideNetImpl(int64_t in, int64_t classes)
      : fc1(register_module("fc1", torch::nn::Linear(in, 4096))),
        fc2(register_module("fc2", torch::nn::Linear(4096, classes))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(WideNet);

bool file_exists(const std::string &path) { return std::ifstream(path).good(); }

WideNet resume(const JobConfig &cfg) {
  WideNet model(cfg.features, cfg.classes);
  if (file_exists(cfg.checkpoint)) {
    // BUG(torch-cuda-unguarded): main() never checks is_available(); loading
    // straight onto CUDA crashes on a machine without a working GPU.
    torch::load(model, cfg.checkpoint, torch::kCUDA);
  }
  return model;
}

torch::Tensor score_all(WideNet &model, const torch::Tensor &inputs) {
  torch::NoGradGuard no_grad;
  try {
    return model->forward(inputs).softmax(1);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the recursive call retries the same
    // batch at the same size; the allocator had already emptied its cache.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return score_all(model, inputs);
  }
}

int main() {
  JobConfig cfg;
  auto model = resume(cfg);
  auto device = model->fc1->weight.device();
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-4));
  if (file_exists(cfg.optimizer_state))
    torch::load(opt, cfg.optimizer_state);

  auto running = torch::zeros({}, device);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto x = torch::randn({cfg.batch, cfg.features}, device);
    auto y = torch::randint(0, cfg.classes, {cfg.batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    running += loss.detach();
    if ((step + 1) % 100 == 0) {
      // OK(torch-host-sync-in-loop): once every 100 steps.
      std::cout << "step " << step + 1 << " loss " << (running / 100).item<double>() << '\n';
      running.zero_();
      torch::save(model, cfg.checkpoint);
      torch::save(opt, cfg.optimizer_state);
    }
  }

  auto validation = torch::randn({50000, cfg.features}, device);
  auto probs = score_all(model, validation);
  std::cout << "validation confidence " << std::get<0>(probs.max(1)).mean().item<double>() << '\n';
  return 0;
}
