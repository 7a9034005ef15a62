// TrainingStepFunctions: project functions whose call makes a loop a training
// loop. MaxLoopDepth: how many enclosing loops, innermost first, are searched
// for the training loop. ExtraSyncFunctions: project functions that
// synchronise the device.
// RUN: %check_torch_tidy %s torch-host-sync-in-loop %t
// RUN: %check_torch_tidy -check-suffix=STEP %s torch-host-sync-in-loop %t \
// RUN:   -- --config="{CheckOptions: {torch-host-sync-in-loop.TrainingStepFunctions: 'train_step;trainer::Trainer::run_batch'}}"
// RUN: %check_torch_tidy -check-suffix=DEPTH %s torch-host-sync-in-loop %t \
// RUN:   -- --config="{CheckOptions: {torch-host-sync-in-loop.MaxLoopDepth: 2}}"
// RUN: %check_torch_tidy -check-suffix=SYNC %s torch-host-sync-in-loop %t \
// RUN:   -- --config="{CheckOptions: {torch-host-sync-in-loop.ExtraSyncFunctions: 'util::wait_for_gpu'}}"

#include <torch/torch.h>

torch::Tensor train_step(torch::Tensor input);
torch::Tensor next_input();
void log_value(float v);
namespace util {
void wait_for_gpu();
}
namespace trainer {
struct Trainer {
  torch::Tensor run_batch(torch::Tensor input);
  torch::Tensor run_eval(torch::Tensor input);
};
} // namespace trainer

void project_training_step() {
  for (int step = 0; step < 100; ++step) {
    auto loss = train_step(next_input()).cuda();
    log_value(loss.item<float>());
    // CHECK-MESSAGES-STEP: :[[@LINE-1]]:20: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step; the GPU idles while the host waits; sync under a condition (e.g. every N steps) or accumulate on the device [torch-host-sync-in-loop]
    // CHECK-MESSAGES-STEP: :[[@LINE-3]]:17: note: inside this training loop, which calls 'train_step()'
  }
}

void qualified_method_name(trainer::Trainer &t) {
  for (int step = 0; step < 100; ++step) {
    auto loss = t.run_batch(next_input()).cuda();
    log_value(loss.item<float>());
    // CHECK-MESSAGES-STEP: :[[@LINE-1]]:20: warning: 'loss.item<float>()' synchronises
  }
  for (int step = 0; step < 100; ++step) {
    auto loss = t.run_eval(next_input()).cuda();
    log_value(loss.item<float>());
  }
}

void gradient_norms(torch::optim::Optimizer &optimizer, std::vector<torch::Tensor> &params) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    for (size_t k = 0; k < params.size(); ++k)
      log_value(w.sum().item<float>());
    // CHECK-MESSAGES-DEPTH: :[[@LINE-1]]:25: warning: 'w.sum().item<float>()' synchronises
    for (size_t k = 0; k < params.size(); ++k)
      for (size_t j = 0; j < params.size(); ++j)
        log_value(w.sum().item<float>());
  }
}

void inner_continue_skips(torch::optim::Optimizer &optimizer) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    for (int k = 0; k < next_input().size(0); ++k) {
      if (k != 0)
        continue;
      log_value(w.sum().item<float>());
    }
  }
}

void project_sync(torch::optim::Optimizer &optimizer) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    w.matmul(next_input().cuda()).sum().backward();
    optimizer.step();
    util::wait_for_gpu();
    // CHECK-MESSAGES-SYNC: :[[@LINE-1]]:5: warning: 'util::wait_for_gpu()' blocks the host until the GPU is idle on every training step
  }
}
