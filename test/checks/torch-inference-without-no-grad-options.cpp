// REQUIRES: check-torch-inference-without-no-grad
// BackwardFunctions and GuardTypes change what counts.
// RUN: %check_torch_tidy %s torch-inference-without-no-grad %t
// RUN: %check_torch_tidy -check-suffix=BW %s torch-inference-without-no-grad %t \
// RUN:   -- --config="{CheckOptions: {torch-inference-without-no-grad.BackwardFunctions: 'trainer::apply_gradients'}}"
// RUN: %check_torch_tidy -check-suffix=GUARD %s torch-inference-without-no-grad %t \
// RUN:   -- --config="{CheckOptions: {torch-inference-without-no-grad.GuardTypes: 'EvalScope'}}"

#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
namespace trainer {
void apply_gradients(); // runs backward on state it owns
}
struct EvalScope {
  EvalScope();
  ~EvalScope();
};

void project_backward_function(Net &net) {
  for (const auto &x : load_batches()) {
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES-GUARD: :[[@LINE-2]]:5: warning: module forward in a loop that never calls backward()
    trainer::apply_gradients();
  }
}

void project_guard_type(Net &net) {
  EvalScope eval;
  for (const auto &x : load_batches()) {
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES-BW: :[[@LINE-2]]:5: warning: module forward in a loop that never calls backward()
  }
}
