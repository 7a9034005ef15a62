// REQUIRES: check-torch-missing-zero-grad
// ZeroGradFunctions: the project's own reset; TrainingStepFunctions: its
// own step.
// RUN: %check_torch_tidy %s torch-missing-zero-grad %t
// RUN: %check_torch_tidy -check-suffix=OPTS %s torch-missing-zero-grad %t \
// RUN:   -- --config="{CheckOptions: {torch-missing-zero-grad.ZeroGradFunctions: 'clear_gradients', torch-missing-zero-grad.TrainingStepFunctions: 'trainer::apply_update'}}"

#include <torch/torch.h>

torch::Tensor loss_of_batch();
void clear_gradients(); // resets every parameter's .grad() elsewhere
namespace trainer {
void apply_update(); // an optimizer step of the project's own
}

void own_reset(torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    clear_gradients();
    loss_of_batch().backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset
  }
}

void own_step() {
  for (int i = 0; i < 10; ++i) {
    loss_of_batch().backward();
    trainer::apply_update();
    // CHECK-MESSAGES-OPTS: :[[@LINE-1]]:5: warning: optimizer step() with no gradient reset
  }
}
