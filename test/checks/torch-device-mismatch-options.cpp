// The option ExtraFactories: a project function that creates a tensor on the
// device of its TensorOptions/Device argument (CPU without one), like
// torch::randn. Without the option its result has an unknown device and the
// check stays silent.
// RUN: %check_torch_tidy %s torch-device-mismatch %t
// RUN: %check_torch_tidy -check-suffix=FACTORY %s torch-device-mismatch %t \
// RUN:   -- --config="{CheckOptions: {torch-device-mismatch.ExtraFactories: '::data::make_batch'}}"

#include <torch/torch.h>

namespace data {
torch::Tensor make_batch(int64_t size, torch::TensorOptions options = {});
torch::Tensor load_batch(int64_t size);
} // namespace data

void factory_without_device() {
  torch::nn::Linear fc(4, 2);
  fc->to(torch::kCUDA);
  auto x = data::make_batch(8);
  fc(x);
  // CHECK-MESSAGES-FACTORY: :[[@LINE-1]]:3: warning: module 'fc' has its parameters on CUDA but is called with 'x' on CPU [torch-device-mismatch]
  // CHECK-MESSAGES-FACTORY: :[[@LINE-4]]:7: note: 'fc' is on CUDA from here
  // CHECK-MESSAGES-FACTORY: :[[@LINE-4]]:12: note: 'x' is on CPU from here
}

void factory_with_device() {
  torch::nn::Linear fc(4, 2);
  auto x = data::make_batch(8, torch::kCUDA);
  fc(x);
  // CHECK-MESSAGES-FACTORY: :[[@LINE-1]]:3: warning: module 'fc' has its parameters on CPU but is called with 'x' on CUDA
}

void factory_on_the_module_device() {
  torch::nn::Linear fc(4, 2);
  fc->to(torch::kCUDA);
  auto x = data::make_batch(8, torch::kCUDA);
  fc(x);
}

// Not named in the option: unknown device, silent either way.
void other_function() {
  torch::nn::Linear fc(4, 2);
  fc->to(torch::kCUDA);
  auto x = data::load_batch(8);
  fc(x);
}
