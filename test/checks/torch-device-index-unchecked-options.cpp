// ExtraDeviceCountFunctions: a project's own device counter guards too.
// RUN: %check_torch_tidy %s torch-device-index-unchecked %t
// RUN: %check_torch_tidy -check-suffix=OPT %s torch-device-index-unchecked %t \
// RUN:   -- --config="{CheckOptions: {torch-device-index-unchecked.ExtraDeviceCountFunctions: 'cluster::visible_gpus;::other::gpus'}}"

#include <torch/torch.h>

namespace cluster {
int visible_gpus();
}
namespace other {
long gpus();
}

void use(const torch::Tensor &t);

// Namespace scope: weighed against every comparison in the file.
const torch::Device kSecondGpu(torch::kCUDA, 1);
// CHECK-MESSAGES: :[[@LINE-1]]:46: warning: hard-coded CUDA device ordinal 1 is never checked

void guarded_by_project_counter(torch::Tensor x) {
  if (cluster::visible_gpus() < 2)
    return;
  x = x.to(torch::Device(torch::kCUDA, 1));
  // CHECK-MESSAGES: :[[@LINE-1]]:40: warning: hard-coded CUDA device ordinal 1 is never checked against torch::cuda::device_count()
  use(x);
}

void guarded_through_variable(torch::Tensor x) {
  const long n = other::gpus();
  if (n > 3)
    x = x.to("cuda:3");
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: hard-coded CUDA device ordinal 3 is never checked
  use(x);
}

void project_counter_bound_too_small(torch::Tensor x) {
  if (cluster::visible_gpus() > 1)
    x = x.to(torch::Device(torch::kCUDA, 2));
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: hard-coded CUDA device ordinal 2 is never checked
  // CHECK-MESSAGES-OPT: :[[@LINE-2]]:42: warning: hard-coded CUDA device ordinal 2 is above what the torch::cuda::device_count() check proves (2 devices)
  // CHECK-MESSAGES-OPT: :[[@LINE-4]]:31: note: the device count is compared here
  use(x);
}
