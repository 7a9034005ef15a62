// RUN: %check_torch_tidy %s torch-device-mismatch %t
//
// Where a value lives outside the function that uses it: the fields of a
// namespace-scope struct (set by its initialiser or by main), a device a
// const reference binds from a getter, and the output of a module called
// on the wrong device (reported once, at that call).

#include <torch/torch.h>
#include <map>
#include <string>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);
torch::Tensor batch();

struct Normaliser {
  torch::Tensor mean, scale;
};
Normaliser g_norm;
Normaliser fit_norm(const torch::Tensor &x) { return {x.mean(0), x.abs().mean(0)}; }

torch::Tensor normalise(const torch::Tensor &x, torch::Device device) {
  auto on_device = x.to(device);
  return (on_device - g_norm.mean) / g_norm.scale;
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: operator '-' combines 'on_device' on 'device' with 'g_norm.mean' on CPU{{.*}}[torch-device-mismatch]
}

// A constant one, built on the CPU by its initialiser.
const Normaliser g_unit{torch::zeros({4}), torch::ones({4})};
torch::Tensor standardise(const torch::Tensor &x, torch::Device device) {
  return (x.to(device) - g_unit.mean) / g_unit.scale;
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: operator '-' combines 'x.to(device)' on 'device' with 'g_unit.mean' on CPU{{.*}}[torch-device-mismatch]
  // CHECK-MESSAGES: :[[@LINE-4]]:25: note: 'g_unit.mean' is on CPU from here
}

// The same struct, moved to the device by main before use: silent.
Normaliser g_moved;
torch::Tensor normalise_moved(const torch::Tensor &x, torch::Device device) {
  return (x.to(device) - g_moved.mean) / g_moved.scale;
}

class DeviceContext {
public:
  static DeviceContext &instance() {
    static DeviceContext ctx;
    return ctx;
  }
  const torch::Device &device() const { return device_; }

private:
  DeviceContext()
      : device_(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU) {}
  torch::Device device_;
};

void weighted(Net &net) {
  const torch::Device &device = DeviceContext::instance().device();
  auto weights = torch::ones({4});
  for (int i = 0; i < 3; ++i) {
    auto out = net->forward(batch().to(device));
    auto loss = (out * weights).sum();
    // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: operator '*' combines 'out' on 'device_' with 'weights' on CPU{{.*}}[torch-device-mismatch]
    loss.backward();
  }
}

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  g_norm = fit_norm(torch::randn({8, 4}));
  normalise(torch::randn({8, 4}), device);
  g_moved = fit_norm(torch::randn({8, 4}));
  g_moved.mean = g_moved.mean.to(device);
  g_moved.scale = g_moved.scale.to(device);
  normalise_moved(torch::randn({8, 4}), device);
  standardise(torch::randn({8, 4}), device);
  Net net;
  net->to(DeviceContext::instance().device());
  weighted(net);
}
