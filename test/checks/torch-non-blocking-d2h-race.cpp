// RUN: %check_torch_tidy %s torch-non-blocking-d2h-race %t

#include <torch/torch.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <functional>
#include <iostream>
#include <vector>

void consume(const torch::Tensor &t);
void log_progress();
void wait_for_gpu() { torch::cuda::synchronize(); }
void wait_indirectly() { wait_for_gpu(); }

// --- Positives -------------------------------------------------------------

float item_before_sync() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  return h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy that produced it has completed; synchronise first (e.g. torch::cuda::synchronize() or stream.synchronize()) [torch-non-blocking-d2h-race]
  // CHECK-MESSAGES: :[[@LINE-3]]:14: note: non-blocking copy to the host starts here
}

float *data_ptr_before_sync() {
  auto d = torch::randn({8}).cuda();
  auto h = d.to(torch::kCPU, true);
  return h.data_ptr<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

float accessor_before_sync() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  auto a = h.accessor<float, 1>();
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'h' is read on the host before the non-blocking device-to-host copy
  return a[0];
}

void streamed_before_sync() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  std::cout << h << "\n";
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

void passed_to_a_function() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  log_progress(); // An unknown function is no synchronisation.
  consume(h);
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

bool compared_before_sync() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  auto mask = h > 0.5;
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: 'h' is read on the host before the non-blocking device-to-host copy
  return mask.item<bool>();
}

float bool_variable() {
  const bool async = true;
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, async);
  return h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

float copy_into_cpu_destination() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = torch::empty({8}, torch::TensorOptions().pinned_memory(true));
  h.copy_(d, /*non_blocking=*/true);
  return h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
  // CHECK-MESSAGES: :[[@LINE-3]]:5: note: non-blocking copy to the host starts here
}

float in_a_loop(int n) {
  auto d = torch::randn({8}, torch::kCUDA);
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    auto h = d.to(torch::kCPU, true);
    sum += h.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'h' is read on the host before the non-blocking device-to-host copy
  }
  return sum;
}

void in_a_lambda() {
  auto f = [] {
    auto d = torch::randn({8}, torch::kCUDA);
    auto h = d.to(torch::kCPU, true);
    return h.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'h' is read on the host before the non-blocking device-to-host copy
  };
  f();
}

// Passing it is the read, reported once: at the call, not again in the body.
void passed_to_a_lambda() {
  auto use = [](const torch::Tensor &t) { return t.sum(); };
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  use(h);
  // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

// A computation on the host reads its operands.
float summed_on_the_host() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  auto total = h.sum() + 1;
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: 'h' is read on the host before the non-blocking device-to-host copy
  torch::cuda::synchronize();
  return total.item<float>();
}

float read_before_event_sync() {
  at::cuda::CUDAEvent done;
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  done.record();
  float v = h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: 'h' is read on the host before the non-blocking device-to-host copy
  done.synchronize();
  return v;
}

void symbolic_source_device(torch::Device device) {
  auto d = torch::randn({8}).to(device);
  auto h = d.to(torch::kCPU, true);
  std::cout << h;
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

float only_the_first_read() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  float a = h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: 'h' is read on the host before the non-blocking device-to-host copy
  float b = h.item<float>();
  return a + b;
}

// --- Negatives -------------------------------------------------------------

float torch_cuda_synchronize() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  torch::cuda::synchronize();
  return h.item<float>();
}

float current_stream_synchronize() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  c10::cuda::getCurrentCUDAStream().synchronize();
  return h.item<float>();
}

float event_synchronize() {
  at::cuda::CUDAEvent done;
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  done.record();
  done.synchronize();
  return h.item<float>();
}

float cuda_runtime_syncs(cudaStream_t stream) {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  cudaDeviceSynchronize();
  float a = h.item<float>();
  auto h2 = d.to(torch::kCPU, true);
  cudaStreamSynchronize(stream);
  return a + h2.item<float>();
}

float helper_that_synchronises() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  wait_indirectly();
  auto h2 = d.to(torch::kCPU, true);
  auto sync = [] { torch::cuda::synchronize(); };
  sync();
  return h.item<float>() + h2.item<float>();
}

float one_path_synchronises(bool c) {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  if (c)
    torch::cuda::synchronize();
  return h.item<float>();
}

float blocking_copies(torch::Tensor param) {
  auto d = torch::randn({8}, torch::kCUDA);
  auto a = d.to(torch::kCPU);
  auto b = d.cpu();
  bool async = false;
  auto c = d.to(torch::kCPU, async);
  auto e = param.to(torch::kCPU, true);      // device unknown
  auto f = torch::randn({8}).to(torch::kCPU, true); // already on the CPU
  return a.item<float>() + b.item<float>() + c.item<float>() +
         e.item<float>() + f.item<float>();
}

float blocking_read_of_a_cuda_tensor() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  float first = d.sum().item<float>(); // waits for the stream
  return first + h.item<float>();
}

torch::Tensor uses_that_are_not_reads() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  std::vector<torch::Tensor> keep;
  keep.push_back(h);
  auto back = h.to(torch::kCUDA); // ordered on the same stream
  auto n = h.numel();
  (void)n;
  return h;
}

float read_on_the_other_tensor() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  auto other = torch::randn({8});
  std::cout << other;
  return other.item<float>();
}

// A helper that starts the copy from whatever tensor its caller passes: the
// copy is pending when the caller passes a CUDA tensor, through any number
// of helpers.
torch::Tensor download(const torch::Tensor &device_tensor) {
  return device_tensor.to(torch::kCPU, /*non_blocking=*/true);
}
torch::Tensor download_again(const torch::Tensor &t) { return download(t); }

float read_a_download_of_a_cuda_tensor() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = download_again(d);
  return h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy that produced it has completed; {{.*}}[torch-non-blocking-d2h-race]
}

float read_a_download_of_a_host_tensor() {
  auto h = download_again(torch::randn({8}));
  return h.item<float>();
}

float read_a_synchronised_download() {
  auto h = download(torch::randn({8}, torch::kCUDA));
  torch::cuda::synchronize();
  return h.item<float>();
}

// The indices of a (values, indices) tuple are on the receiver's device: a
// non-blocking copy of them to the host is pending.
int64_t read_topk_indices() {
  auto scores = torch::randn({64}, torch::kCUDA);
  auto host = std::get<1>(scores.topk(8)).to(torch::kCPU, /*non_blocking=*/true);
  return host.data_ptr<int64_t>()[0];
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'host' is read on the host before the non-blocking device-to-host copy that produced it has completed; {{.*}}[torch-non-blocking-d2h-race]
}

int64_t read_topk_indices_of_a_host_tensor() {
  auto scores = torch::randn({64});
  auto [values, index] = scores.topk(8);
  auto host = index.to(torch::kCPU, /*non_blocking=*/true);
  return host.data_ptr<int64_t>()[0];
}

// A blocking read of a tensor on a device variable waits for the stream the
// copy is queued on; where the variable holds the CPU, no copy was
// asynchronous.
float read_after_a_blocking_read(torch::Device device) {
  auto d = torch::randn({8}, device);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  auto labels = d.argmax().to(torch::kCPU);
  return h.item<float>();
}

float read_with_no_blocking_read(torch::Device device) {
  auto d = torch::randn({8}, device);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  auto labels = d.argmax();
  return h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy that produced it has completed; {{.*}}[torch-non-blocking-d2h-race]
}

// A view of the destination (`h[i]`, `h.select(...)`) reads its memory.
void view_passed_to_a_function() {
  auto d = torch::randn({4, 8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  for (int64_t i = 0; i < 4; ++i)
    consume(h[i]);
  // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

void view_after_sync() {
  auto d = torch::randn({4, 8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  torch::cuda::synchronize();
  for (int64_t i = 0; i < 4; ++i)
    consume(h[i]);
}

// A scope object whose destructor synchronises completes the copy.
struct DeviceFence {
  ~DeviceFence() { torch::cuda::synchronize(); }
};

float read_after_fence_scope() {
  auto d = torch::randn({8}, torch::kCUDA);
  torch::Tensor h;
  {
    DeviceFence fence;
    h = d.to(torch::kCPU, /*non_blocking=*/true);
  }
  return h.item<float>();
}

float read_inside_fence_scope() {
  auto d = torch::randn({8}, torch::kCUDA);
  DeviceFence fence;
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  return h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

// So does one a std::unique_ptr owns, where the pointer's scope ends.
float read_after_owned_fence_scope() {
  auto d = torch::randn({8}, torch::kCUDA);
  torch::Tensor h;
  {
    auto fence = std::make_unique<DeviceFence>();
    h = d.to(torch::kCPU, /*non_blocking=*/true);
  }
  return h.item<float>();
}

// A callback held in a std::function reads what it is handed.
void hand_to_callback(const std::function<void(const torch::Tensor &)> &on_ready) {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  on_ready(h);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'h' is read on the host before the non-blocking device-to-host copy
}

// A view of the copy's destination reads nothing until it is read: the
// synchronisation in between makes the read safe; without it, the read of
// the view is the race.
float view_then_sync() {
  auto d = torch::randn({2, 8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  auto first = h.select(0, 0), second = h.select(0, 1);
  torch::cuda::synchronize();
  return first.sum().item<float>() + second.sum().item<float>();
}

float view_without_sync() {
  auto d = torch::randn({2, 8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  auto first = h.select(0, 0);
  return first.sum().item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'first' is read on the host before the non-blocking device-to-host copy
}

// A getter's reference to a member a non-blocking copy wrote: handing it
// to a function that reads it is the read.
class ReadbackMonitor {
public:
  void run(const torch::Tensor &scores) {
    host_ = scores.to(torch::kCPU, /*non_blocking=*/true);
  }
  const torch::Tensor &host_scores() const { return host_; }

private:
  torch::Tensor host_;
};
float report_scores(const torch::Tensor &h) { return h.sum().item<float>(); }
float monitor_readback() {
  ReadbackMonitor m;
  m.run(torch::randn({8}, torch::kCUDA));
  return report_scores(m.host_scores());
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'm.host_scores()' is read on the host before the non-blocking device-to-host copy
}
