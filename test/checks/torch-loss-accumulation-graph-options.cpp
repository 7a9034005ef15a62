// REQUIRES: check-torch-loss-accumulation-graph
// AccumulatingFunctions, BackwardFunctions and GuardTypes change what counts.
// RUN: %check_torch_tidy %s torch-loss-accumulation-graph %t
// RUN: %check_torch_tidy -check-suffix=ACC %s torch-loss-accumulation-graph %t \
// RUN:   -- --config="{CheckOptions: {torch-loss-accumulation-graph.AccumulatingFunctions: 'AverageMeter::update'}}"
// RUN: %check_torch_tidy -check-suffix=BW %s torch-loss-accumulation-graph %t \
// RUN:   -- --config="{CheckOptions: {torch-loss-accumulation-graph.BackwardFunctions: 'apply_backward'}}"
// RUN: %check_torch_tidy -check-suffix=GUARD %s torch-loss-accumulation-graph %t \
// RUN:   -- --config="{CheckOptions: {torch-loss-accumulation-graph.GuardTypes: '::mylib::EvalScope'}}"

#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
void report(const torch::Tensor &t);
void apply_backward(const torch::Tensor &total); // calls total.backward()
namespace mylib {
struct EvalScope {
  EvalScope();
  ~EvalScope();
};
} // namespace mylib

struct AverageMeter {
  void update(const torch::Tensor &value); // keeps `value`
  torch::Tensor sum;
};

void meter_update(Net &net) {
  AverageMeter meter;
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    meter.update(loss);
    // CHECK-MESSAGES-ACC: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is stored into 'meter', declared outside the loop
    // CHECK-FIXES-ACC: {{^}}    meter.update(loss.detach());{{$}}
  }
}

void backward_in_a_project_function(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total'
    // CHECK-MESSAGES-ACC: :[[@LINE-2]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total'
    // CHECK-MESSAGES-GUARD: :[[@LINE-3]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total'
  }
  apply_backward(total);
}

void project_guard(Net &net) {
  mylib::EvalScope eval;
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total'
    // CHECK-MESSAGES-ACC: :[[@LINE-2]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total'
    // CHECK-MESSAGES-BW: :[[@LINE-3]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total'
  }
  report(total);
}
