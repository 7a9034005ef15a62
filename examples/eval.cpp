// Evaluation code of the torch-tidy example (see train.cpp).
#include "net.h"

#include <iostream>

torch::Device second_device(torch::Device fallback) {
  // OK(torch-device-index-unchecked): compared with device_count() first.
  return torch::cuda::device_count() > 1 ? torch::Device(torch::kCUDA, 1)
                                         : fallback;
}

double evaluate(Net &net, torch::Device device) {
  net->to(device);
  // OK(torch-inference-without-no-grad): autograd is off for the whole loop.
  torch::NoGradGuard no_grad;
  auto loader = make_loader(/*examples=*/256, /*batch_size=*/64);
  int64_t correct = 0, seen = 0;
  for (auto &batch : *loader) {
    auto output = net->forward(batch.data.to(device));
    correct += output.argmax(1).eq(batch.target.to(device)).sum().item<int64_t>();
    seen += batch.data.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

double mean_confidence(Net &net, torch::Device device) {
  net->to(device);
  auto loader = make_loader(/*examples=*/256, /*batch_size=*/64);
  double sum = 0;
  int64_t batches = 0;
  for (auto &batch : *loader) {
    // BUG(torch-inference-without-no-grad): nothing here calls backward(),
    // yet autograd records every activation of this forward.
    auto output = net->forward(batch.data.to(device));
    sum += output.exp().amax(1).mean().item<double>();
    ++batches;
  }
  return sum / static_cast<double>(batches);
}

void predict(Net &net, torch::Device device) {
  net->to(device);
  torch::NoGradGuard no_grad;
  auto sample = torch::randn({1, 784});
  // BUG(torch-tensor-to-discarded): tensors are not moved in place; `sample`
  // stays on the CPU.
  sample.to(device);
  // BUG(torch-device-mismatch): `net` is on `device`, `sample` on the CPU.
  auto probs = net->forward(sample).exp();
  // OK(torch-tensor-to-discarded, torch-device-mismatch): keep the result.
  sample = sample.to(device);
  probs = net->forward(sample).exp();

  auto host = probs.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): reads `host` before the non_blocking
  // copy above is known to have finished.
  std::cout << host << '\n';
  // OK(torch-non-blocking-d2h-race): a blocking copy.
  auto copied = probs.to(torch::kCPU);
  std::cout << "class " << copied.argmax(1).item<int64_t>() << '\n';
}

void init_cuda_context() {
  // BUG(torch-cuda-unguarded): no torch::cuda::is_available() check and no
  // CPU fallback; this crashes on a machine without CUDA.
  auto warm = torch::zeros({1}, torch::kCUDA);
  std::cout << "CUDA ready: " << warm.sizes() << '\n';
}

// A calibration head with dropout, restored from a checkpoint.
struct CalibratorImpl : torch::nn::Module {
  CalibratorImpl()
      : fc(register_module("fc", torch::nn::Linear(10, 10))),
        drop(register_module("drop", torch::nn::Dropout(0.2))) {}
  torch::Tensor forward(torch::Tensor logits) { return fc(drop(logits)); }
  torch::nn::Linear fc;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Calibrator);

torch::Tensor calibrate(const torch::Tensor &logits, torch::Device device) {
  Calibrator calibrator;
  torch::load(calibrator, "calibrator.pt");
  calibrator->to(device);
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): a module starts in training mode: its
  // dropout stays on while it scores.
  auto calibrated = calibrator->forward(logits.to(device));
  // OK(torch-eval-mode-missing): in evaluation mode.
  calibrator->eval();
  return calibrator->forward(logits.to(device)) + calibrated;
}
