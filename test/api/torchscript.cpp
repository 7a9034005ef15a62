// RUN: %check_torch_tidy %s torch-device-mismatch,torch-inference-without-no-grad,torch-host-sync-in-loop %t

// A TorchScript module (torch::jit::Module, also spelt
// torch::jit::script::Module) is a module like a torch::nn one: forward()
// runs it, to() and torch::jit::load(path, device) place it, and its
// inputs travel in a std::vector<IValue> (a braced list or a variable). What
// it returns is an IValue whose toTensor(), toTuple()->elements()[i] hold
// the output.

#include <torch/torch.h>
#include <torch/script.h>

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

// The same loop under a guard: nothing to say.
std::vector<int64_t> classify_no_grad(torch::jit::Module &module,
                                      const std::vector<torch::Tensor> &images) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> labels;
  for (const auto &image : images)
    labels.push_back(module.forward({image}).toTensor().argmax(1).item<int64_t>());
  return labels;
}

torch::Tensor loaded_onto_cuda(const std::string &path) {
  torch::NoGradGuard no_grad;
  auto encoder = torch::jit::load(path, torch::kCUDA);
  auto batch = torch::rand({2, 3});
  return encoder.forward({batch}).toTensor();
  // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: module 'encoder' has its parameters on CUDA but is called with 'batch' on CPU [torch-device-mismatch]
}

torch::Tensor inputs_in_a_variable(const std::string &path, torch::Device device) {
  torch::NoGradGuard no_grad;
  torch::jit::Module m = torch::jit::load(path);
  m.to(device);
  std::vector<torch::jit::IValue> in;
  in.emplace_back(torch::ones({2, 3}));
  torch::jit::IValue out = m.forward(in);
  // CHECK-MESSAGES: :[[@LINE-1]]:30: warning: module 'm' has its parameters on 'device' but is called with 'in' on CPU; this crashes on a machine where 'device' is CUDA [torch-device-mismatch]
  return out.toTensor();
}

// The output of a tuple-returning script: on the module's device.
torch::Tensor tuple_output(const std::string &path, torch::Device device) {
  torch::NoGradGuard no_grad;
  torch::jit::Module m = torch::jit::load(path, device);
  std::vector<torch::jit::IValue> in{torch::ones({2, 3}).to(device)};
  auto logits = m.forward(in).toTuple()->elements()[0].toTensor();
  return logits + torch::ones({2, 3});
  // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: operator '+' combines 'logits' on 'device' with 'torch::ones({2, 3})' on CPU
}

// Loaded without a device: the module keeps the devices it was saved from,
// which nothing here says.
torch::Tensor saved_device_unknown(const std::string &path) {
  torch::NoGradGuard no_grad;
  torch::jit::Module m = torch::jit::load(path);
  auto out = m.forward({torch::rand({1, 3})}).toTensor();
  return out + torch::rand({1, 3});
}

// A script module trained in a loop: its output's .item() each step.
void fine_tune(torch::jit::Module &m, torch::optim::Optimizer &opt,
               torch::Device device) {
  m.to(device);
  m.train();
  for (int step = 0; step < 100; ++step) {
    auto x = torch::rand({8, 3}).to(device);
    auto loss = m.forward({x}).toTensor().mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    float value = loss.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: {{.*}}[torch-host-sync-in-loop]
    (void)value;
  }
}
