// The option ExtraSyncFunctions: a project's own synchronisation, a free
// function or a method, whose body the analysis cannot see.
// RUN: %check_torch_tidy -check-suffix=DEFAULT %s torch-non-blocking-d2h-race %t
// RUN: %check_torch_tidy -check-suffix=OPTIONS %s torch-non-blocking-d2h-race %t -- \
// RUN:   --config="{CheckOptions: {torch-non-blocking-d2h-race.ExtraSyncFunctions: '::myproj::wait_all;myproj::Queue::drain'}}"

#include <torch/torch.h>

namespace myproj {
void wait_all();
struct Queue {
  void drain();
  void push(int);
};
} // namespace myproj

float free_function() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  myproj::wait_all();
  return h.item<float>();
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

float method(myproj::Queue &q) {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  q.drain();
  return h.item<float>();
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

float other_method_is_no_sync(myproj::Queue &q) {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  q.push(1);
  return h.item<float>();
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
  // CHECK-MESSAGES-OPTIONS: :[[@LINE-2]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
}
