// Learning-rate finder: for each candidate learning rate, train a fresh copy
// of a small CNN for a fixed number of steps on synthetic digits and record
// the smoothed loss curve. The candidate with the lowest final smoothed loss
// wins. Loss values are kept as detached device tensors during a sweep and
// copied back in one go when the sweep ends.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <vector>

struct TinyCnnImpl : torch::nn::Module {
  TinyCnnImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(16 * 14 * 14, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv(x)), 2);
    return fc(x.flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(TinyCnn);

struct Digits {
  torch::Tensor images;
  torch::Tensor labels;
};

Digits synthetic_digits(int64_t n, torch::Device device) {
  auto labels = torch::randint(0, 10, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto images = torch::randn({n, 1, 28, 28}, torch::TensorOptions().device(device)) * 0.3;
  images = images + labels.view({n, 1, 1, 1}).to(torch::kFloat) / 10.0;
  return {images, labels};
}

// One short sweep at a fixed learning rate; returns the smoothed curve.
std::vector<double> sweep(double lr, const Digits &data, torch::Device device, int64_t steps) {
  TinyCnn net;
  // OK(torch-tensor-to-discarded): Module::to moves the module in place.
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  std::vector<torch::Tensor> history;
  const int64_t batch = 64;
  for (int64_t s = 0; s < steps; ++s) {
    auto idx = torch::randint(0, data.images.size(0), {batch},
                              torch::TensorOptions().dtype(torch::kLong).device(device));
    // OK(torch-device-mismatch): the data set and the indices both live on
    // 'device'.
    auto x = data.images.index_select(0, idx);
    auto y = data.labels.index_select(0, idx);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): detached,
    // and nothing is read back inside the loop.
    history.push_back(loss.detach());
  }
  // OK(torch-host-sync-in-loop): a single copy after the sweep.
  auto curve = torch::stack(history).cpu();
  std::vector<double> smoothed;
  double avg = 0.0;
  for (int64_t i = 0; i < curve.size(0); ++i) {
    avg = 0.9 * avg + 0.1 * curve[i].item<double>();
    smoothed.push_back(avg / (1.0 - std::pow(0.9, static_cast<double>(i + 1))));
  }
  return smoothed;
}

double final_accuracy(TinyCnn &net, const Digits &data) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto pred = net->forward(data.images).argmax(1);
  return pred.eq(data.labels).to(torch::kFloat).mean().item<double>();
}

// Compiles the conv kernels once before timing anything.
void warm_up_kernels() {
  // BUG(torch-cuda-unguarded): main calls this on every machine; there is
  // no is_available() check on this path.
  auto x = torch::randn({8, 1, 28, 28}).cuda();
  TinyCnn net;
  net->to(x.device());
  torch::NoGradGuard no_grad;
  net->forward(x);
}

int main() {
  torch::manual_seed(0);
  const bool gpu = torch::cuda::is_available();
  // OK(torch-cuda-unguarded): CUDA only when the check above said so.
  torch::Device device(gpu ? torch::kCUDA : torch::kCPU);
  warm_up_kernels();

  auto data = synthetic_digits(8192, device);
  std::map<double, std::vector<double>> curves;
  const std::vector<double> lrs = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1};
  for (double lr : lrs) {
    curves[lr] = sweep(lr, data, device, 200);
    std::cout << "lr " << lr << " final " << curves[lr].back() << '\n';
    // BUG(torch-empty-cache-in-loop): between sweeps; every sweep allocates
    // the same activations again, and the next one pays cudaMalloc.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  double best_lr = lrs.front();
  for (const auto &kv : curves)
    if (kv.second.back() < curves[best_lr].back())
      best_lr = kv.first;

  TinyCnn final_net;
  final_net->to(device);
  torch::optim::SGD opt(final_net->parameters(), torch::optim::SGDOptions(best_lr).momentum(0.9));
  auto probe = torch::randn({32, 1, 28, 28});
  // BUG(torch-tensor-to-discarded): the probe is not moved; the result of
  // to() is dropped.
  probe.to(device);
  for (int64_t s = 0; s < 500; ++s) {
    auto idx = torch::randint(0, 8192, {128}, torch::TensorOptions().dtype(torch::kLong).device(device));
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(final_net->forward(data.images.index_select(0, idx)),
                                                     data.labels.index_select(0, idx));
    loss.backward();
    opt.step();
  }
  if (torch::cuda::device_count() > 1) {
    // OK(torch-device-index-unchecked, torch-cuda-unguarded): only reached
    // when the process sees a second GPU.
    torch::Device second(torch::kCUDA, 1);
    auto replica = synthetic_digits(1024, second);
    auto curve = sweep(best_lr, replica, second, 50);
    std::cout << "replica on cuda:1 final " << curve.back() << '\n';
  }
  std::cout << "best lr " << best_lr << " acc " << final_accuracy(final_net, data) << '\n';
  std::cout << "probe on " << probe.device() << " gpu " << gpu << '\n';
  return 0;
}
