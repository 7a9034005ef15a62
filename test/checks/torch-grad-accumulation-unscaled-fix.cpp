// The fix-it that divides the loss by the accumulation count is unsafe (it
// changes what is trained): it rides on the note, so plain --fix leaves the
// code alone and only --fix-notes applies it.
// RUN: %check_torch_tidy -check-suffix=SAFE %s torch-grad-accumulation-unscaled %t
// RUN: %check_torch_tidy -check-suffix=UNSAFE %s torch-grad-accumulation-unscaled %t -- --fix-notes

#include <torch/torch.h>

torch::Tensor loss_of_batch();

void variable_count(torch::optim::SGD &opt, int accum_steps) {
  for (int i = 0; i < 100; ++i) {
    auto loss = loss_of_batch().mean();
    loss.backward();
    // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:10: warning: backward() of a mean loss
    // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:10: warning: backward() of a mean loss
    // CHECK-FIXES-SAFE: {{^}}    loss.backward();{{$}}
    // CHECK-FIXES-UNSAFE: {{^}}    (loss / accum_steps).backward();{{$}}
    if ((i + 1) % accum_steps == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void literal_count(torch::optim::SGD &opt) {
  for (int i = 0; i < 100; ++i) {
    torch::mse_loss(loss_of_batch(), loss_of_batch()).backward();
    // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:55: warning: backward() of a mean loss
    // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:55: warning: backward() of a mean loss
    // CHECK-FIXES-UNSAFE: {{^}}    (torch::mse_loss(loss_of_batch(), loss_of_batch()) / 4).backward();{{$}}
    if (i % 4 == 3) {
      opt.step();
      opt.zero_grad();
    }
  }
}

// No count to divide by (the period is a call's): the warning stands
// without a fix.
void no_count(torch::optim::SGD &opt, int (*period)()) {
  for (int i = 0; i < 100; ++i) {
    auto loss = loss_of_batch().mean();
    loss.backward();
    // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:10: warning: backward() of a mean loss
    // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:10: warning: backward() of a mean loss
    // CHECK-FIXES-UNSAFE: {{^}}    loss.backward();{{$}}
    if (i % period() == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
