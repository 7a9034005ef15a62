// The fix-it that resets the gradients before backward() is unsafe (it
// changes what is trained): it rides on the note, so plain --fix leaves the
// code alone and only --fix-notes applies it.
// RUN: %check_torch_tidy -check-suffix=SAFE %s torch-missing-zero-grad %t
// RUN: %check_torch_tidy -check-suffix=UNSAFE %s torch-missing-zero-grad %t -- --fix-notes

#include <torch/torch.h>
#include <memory>

torch::Tensor loss_of_batch();

void object(torch::optim::SGD &opt) {
  for (int i = 0; i < 10; ++i) {
    auto loss = loss_of_batch();
    loss.backward();
    // CHECK-FIXES-SAFE: {{^}}    loss.backward();{{$}}
    // CHECK-FIXES-UNSAFE: {{^}}    opt.zero_grad();{{$}}
    // CHECK-FIXES-UNSAFE-NEXT: {{^}}    loss.backward();{{$}}
    opt.step();
    // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset
    // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:9: warning: optimizer step() with no gradient reset
  }
}

void pointer(std::unique_ptr<torch::optim::Adam> &opt) {
  for (int i = 0; i < 10; ++i) {
    loss_of_batch().backward();
    // CHECK-FIXES-UNSAFE: {{^}}    opt->zero_grad();{{$}}
    // CHECK-FIXES-UNSAFE-NEXT: {{^}}    loss_of_batch().backward();{{$}}
    opt->step();
    // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:10: warning: optimizer step() with no gradient reset
    // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:10: warning: optimizer step() with no gradient reset
  }
}
