// REQUIRES: check-torch-autocast-region
// AutocastGuardTypes: the project's own RAII guard, whose body is not
// visible; BackwardFunctions: its own backward pass.
// RUN: %check_torch_tidy %s torch-autocast-region %t
// RUN: %check_torch_tidy -check-suffix=OPTS %s torch-autocast-region %t \
// RUN:   -- --config="{CheckOptions: {torch-autocast-region.AutocastGuardTypes: 'amp::Scope', torch-autocast-region.BackwardFunctions: 'run_backward'}}"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

torch::Tensor loss_of_batch();
void run_backward(const torch::Tensor &loss); // defined elsewhere
namespace amp {
struct Scope { // switches autocast on, restores it (defined elsewhere)
  Scope();
  ~Scope();
};
} // namespace amp

void guard_scope() {
  for (int i = 0; i < 10; ++i) {
    amp::Scope scope;
    loss_of_batch().mean().backward();
    // CHECK-MESSAGES-OPTS: :[[@LINE-1]]:28: warning: backward() runs inside an autocast region
  }
}

void own_backward() {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  run_backward(loss_of_batch());
  // CHECK-MESSAGES-OPTS: :[[@LINE-1]]:3: warning: backward() runs inside an autocast region
  at::autocast::set_autocast_enabled(at::kCUDA, false);
}

void plain_backward() {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  loss_of_batch().sum().backward();
  // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: backward() runs inside an autocast region
  // CHECK-MESSAGES-OPTS: :[[@LINE-2]]:25: warning: backward() runs inside an autocast region
  at::autocast::set_autocast_enabled(at::kCUDA, false);
}
