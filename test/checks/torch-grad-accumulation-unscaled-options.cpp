// REQUIRES: check-torch-grad-accumulation-unscaled
// TrainingStepFunctions: the project's own step; ZeroGradFunctions: its own
// reset, which ends an accumulation as a step does.
// RUN: %check_torch_tidy %s torch-grad-accumulation-unscaled %t
// RUN: %check_torch_tidy -check-suffix=OPTS %s torch-grad-accumulation-unscaled %t \
// RUN:   -- --config="{CheckOptions: {torch-grad-accumulation-unscaled.TrainingStepFunctions: 'trainer::apply_update', torch-grad-accumulation-unscaled.ZeroGradFunctions: 'clear_gradients'}}"

#include <torch/torch.h>

torch::Tensor loss_of_batch();
void clear_gradients(); // resets every parameter's .grad() elsewhere
namespace trainer {
void apply_update(); // an optimizer step of the project's own
}

void own_step() {
  for (int i = 0; i < 100; ++i) {
    loss_of_batch().mean().backward();
    // CHECK-MESSAGES-OPTS: :[[@LINE-1]]:28: warning: backward() of a mean loss
    if (i % 4 == 3) {
      trainer::apply_update();
      clear_gradients();
    }
  }
}

void own_reset(torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    loss_of_batch().mean().backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: backward() of a mean loss
    if (i % 4 == 3)
      opt.step();
    clear_gradients();
  }
}
