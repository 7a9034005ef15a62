// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-device-mismatch,torch-inference-without-no-grad %t -- -- %libtorch_flags

// TorchScript modules on the real headers (1.13 and 2.x): torch::jit::load
// with and without a device, inputs in a std::vector<IValue>, the output
// read through toTensor() and toTuple().

#include <torch/script.h>
#include <torch/torch.h>

std::vector<int64_t> classify(const std::string &path,
                              const std::vector<torch::Tensor> &images,
                              torch::Device device) {
  torch::jit::script::Module module = torch::jit::load(path);
  module.to(device);
  module.eval();
  std::vector<int64_t> labels;
  for (const auto &image : images) {
    std::vector<torch::jit::IValue> inputs;
    inputs.push_back(image.to(device));
    torch::Tensor out = module.forward(inputs).toTensor();
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
    labels.push_back(out.argmax(1).item<int64_t>());
  }
  return labels;
}

torch::Tensor loaded_onto_device(const std::string &path, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto encoder = torch::jit::load(path, device);
  auto batch = torch::rand({2, 3});
  auto out = encoder.forward({batch}).toTuple()->elements()[0].toTensor();
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: module 'encoder' has its parameters on 'device' but is called with 'batch' on CPU
  return out + batch.to(device);
}

// Loaded without a device: it keeps the devices it was saved from.
torch::Tensor saved_device_unknown(const std::string &path) {
  torch::NoGradGuard no_grad;
  torch::jit::Module m = torch::jit::load(path);
  return m.forward({torch::rand({1, 3})}).toTensor();
}
