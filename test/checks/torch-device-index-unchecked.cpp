// RUN: %check_torch_tidy %s torch-device-index-unchecked %t

#include <torch/torch.h>
#include <c10/cuda/CUDAFunctions.h>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

void use(const torch::Tensor &t);
void use(torch::Device d);

// Positives.

void device_constructor() {
  torch::Device second(torch::kCUDA, 1);
  // CHECK-MESSAGES: :[[@LINE-1]]:38: warning: hard-coded CUDA device ordinal 1 is never checked against torch::cuda::device_count(); CUDA_VISIBLE_DEVICES renumbers the devices a process sees, so ordinal 1 may not exist [torch-device-index-unchecked]
  use(torch::Device(c10::DeviceType::CUDA, 2));
  // CHECK-MESSAGES: :[[@LINE-1]]:44: warning: hard-coded CUDA device ordinal 2 is never checked
  use(torch::Device{at::kCUDA, 3});
  // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: hard-coded CUDA device ordinal 3 is never checked
  use(second);
}

void tensor_options() {
  auto a = torch::ones({2}, torch::TensorOptions().device(torch::kCUDA, 1));
  // CHECK-MESSAGES: :[[@LINE-1]]:73: warning: hard-coded CUDA device ordinal 1 is never checked
  auto b = torch::zeros({2}, torch::TensorOptions().device_index(2));
  // CHECK-MESSAGES: :[[@LINE-1]]:66: warning: hard-coded CUDA device ordinal 2 is never checked
  auto c = torch::empty({2}, torch::device_index(1));
  // CHECK-MESSAGES: :[[@LINE-1]]:50: warning: hard-coded CUDA device ordinal 1 is never checked
  auto d = torch::randn({2}, torch::device({torch::kCUDA, 1}));
  // CHECK-MESSAGES: :[[@LINE-1]]:59: warning: hard-coded CUDA device ordinal 1 is never checked
  auto e = torch::ones({2}, torch::TensorOptions(torch::kCUDA, 2));
  // CHECK-MESSAGES: :[[@LINE-1]]:64: warning: hard-coded CUDA device ordinal 2 is never checked
  use(a + b + c + d + e);
}

void device_strings(torch::Tensor x, torch::nn::Module &net) {
  torch::Device dev("cuda:1");
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: hard-coded CUDA device ordinal 1 is never checked
  x = x.to("cuda:3");
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: hard-coded CUDA device ordinal 3 is never checked
  net.to(torch::Device("cuda:2"));
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: hard-coded CUDA device ordinal 2 is never checked
  auto y = torch::ones({1}, torch::TensorOptions().device("cuda:1"));
  // CHECK-MESSAGES: :[[@LINE-1]]:59: warning: hard-coded CUDA device ordinal 1 is never checked
  use(dev);
  use(y);
}

void bound_too_small(torch::Tensor x) {
  if (torch::cuda::device_count() > 1)
    x = x.to(torch::Device(torch::kCUDA, 3));
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: hard-coded CUDA device ordinal 3 is above what the torch::cuda::device_count() check proves (2 devices); CUDA_VISIBLE_DEVICES renumbers the devices a process sees, so ordinal 3 may not exist
  // CHECK-MESSAGES: :[[@LINE-3]]:35: note: the device count is compared here
  use(x);
}

void only_nonzero_checked(torch::Tensor x) {
  if (torch::cuda::device_count() == 0)
    return;
  x = x.to("cuda:1");
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: hard-coded CUDA device ordinal 1 is never checked
  use(x);
}

void in_lambda_and_loop(std::vector<torch::Tensor> &batches) {
  auto to_gpu1 = [](torch::Tensor t) { return t.to(torch::Device(torch::kCUDA, 1)); };
  // CHECK-MESSAGES: :[[@LINE-1]]:80: warning: hard-coded CUDA device ordinal 1 is never checked
  for (auto &b : batches)
    b = to_gpu1(b).to(torch::Device("cuda:2"));
  // CHECK-MESSAGES: :[[@LINE-1]]:37: warning: hard-coded CUDA device ordinal 2 is never checked
}

struct Trainer {
  // Class- and namespace-scope ordinals are weighed against every comparison
  // in the file; this file has unbounded ones below, so this one is silent
  // (see torch-device-index-unchecked-options.cpp for one that warns).
  torch::Device device{torch::kCUDA, 1};
  Trainer() : other(torch::kCUDA, 2) {}
  // CHECK-MESSAGES: :[[@LINE-1]]:35: warning: hard-coded CUDA device ordinal 2 is never checked
  torch::Device other;
};

// Negatives.

void ordinal_zero_and_cpu(torch::Tensor x) {
  use(torch::Device(torch::kCUDA, 0));
  use(torch::Device("cuda:0"));
  use(torch::Device("cuda"));
  use(torch::Device(torch::kCPU, 1));
  use(torch::Device("cpu"));
  use(torch::Device(torch::kCUDA));
  x = x.to(torch::TensorOptions().device_index(0));
}

void non_literal_ordinals(int rank, const std::string &name, torch::Tensor x) {
  use(torch::Device(torch::kCUDA, rank));
  use(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rank % 2)));
  use(torch::Device(name));
  x = x.to(torch::TensorOptions().device_index(rank));
}

void checked_greater(torch::Tensor x) {
  if (torch::cuda::device_count() > 1)
    x = x.to(torch::Device(torch::kCUDA, 1));
  use(x);
}

void checked_reversed(torch::Tensor x) {
  if (2 <= torch::cuda::device_count())
    x = x.to("cuda:1");
  use(x);
}

void checked_early_exit(torch::Tensor x) {
  if (torch::cuda::device_count() < 4)
    throw std::runtime_error("need four GPUs");
  x = x.to(torch::Device(torch::kCUDA, 3));
  use(x);
}

void checked_through_variable(torch::Tensor x) {
  const auto gpus = torch::cuda::device_count();
  if (gpus >= 3)
    x = x.to(torch::Device(torch::kCUDA, 2));
  use(x);
}

void checked_with_torch_check(torch::Tensor x) {
  TORCH_CHECK(torch::cuda::device_count() > 2, "needs three GPUs");
  x = x.to(torch::TensorOptions().device(torch::kCUDA, 2));
  use(x);
}

void checked_against_non_constant(torch::Tensor x, int64_t wanted) {
  if (wanted < static_cast<int64_t>(c10::cuda::device_count()))
    x = x.to(torch::Device(torch::kCUDA, 5));
  use(x);
}

void checked_with_cuda_runtime(torch::Tensor x) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (n > 1)
    x = x.to("cuda:1");
  use(x);
}

void checked_in_lambda_scope(torch::Tensor x) {
  if (torch::cuda::device_count() > 1) {
    auto move = [](torch::Tensor t) { return t.to(torch::Device(torch::kCUDA, 1)); };
    x = move(x);
  }
  use(x);
}

torch::Device second_gpu() { return torch::Device(torch::kCUDA, 1); }

void caller_checks(torch::Tensor x) {
  if (torch::cuda::device_count() > 1)
    x = x.to(second_gpu());
  use(x);
}

void suppressed(torch::Tensor x) {
  x = x.to("cuda:1"); // NOLINT(torch-device-index-unchecked)
}


// Ordinals in a list assigned to a container (`gpus = {0, 2}`), as in one
// it is built from.
struct Rig {
  std::vector<int> gpus;
};
void place_on_rig(const Rig &rig) {
  for (int g : rig.gpus)
    auto t = torch::ones({2}, torch::Device(torch::kCUDA, g));
}
void rig_from_list() {
  if (!torch::cuda::is_available())
    return;
  Rig rig;
  rig.gpus = {0, 2};
  // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: hard-coded CUDA device ordinal 2 is never checked{{.*}}[torch-device-index-unchecked]
  place_on_rig(rig);
}
