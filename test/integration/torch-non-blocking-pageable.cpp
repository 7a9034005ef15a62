// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-non-blocking-pageable %t -- -- %libtorch_flags

#include <torch/torch.h>

void train(bool gpu) {
  torch::Device device(gpu ? torch::kCUDA : torch::kCPU);
  auto x = torch::randn({64, 3, 224, 224});
  auto a = x.to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory runs synchronously; pin the source (pin_memory() or TensorOptions().pinned_memory(true)) for the copy to overlap [torch-non-blocking-pageable]
  // CHECK-MESSAGES: :[[@LINE-3]]:12: note: 'x' was allocated in pageable memory here
  auto b = x.to(device, torch::kHalf, true, false);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to 'device' (CUDA on a machine with a GPU) from pageable memory
  auto dst = torch::empty({64, 3, 224, 224}, torch::TensorOptions().device(torch::kCUDA, 0));
  dst.copy_(x, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: non_blocking copy of 'x' to cuda:0 from pageable memory

  // Pinned sources overlap as intended.
  auto p = torch::randn({8}).pin_memory();
  auto c = p.to(torch::kCUDA, true);
  auto q = torch::empty({8}, torch::TensorOptions().pinned_memory(true));
  auto d = q.to(device, true);
  // Blocking copies are not this check's business.
  auto e = x.to(torch::kCUDA);
}

void loader() {
  auto data = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(64));
  for (auto &batch : *data) {
    auto in = batch.data.to(torch::kCUDA, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: non_blocking copy of 'batch.data' to CUDA from pageable memory
  }
}

void unknown(torch::Tensor t) { auto g = t.to(torch::kCUDA, true); }

// Across calls, on the real headers: the MNIST training loop is a template
// over the loader type, whose batches are collated into pageable memory; a
// helper returns from_blob over a vector, another uploads what it is given.
template <typename DataLoader>
void train_epoch(DataLoader &loader, torch::Device device) {
  for (auto &batch : loader) {
    auto data = batch.data.to(device, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: non_blocking copy of 'batch.data' to 'device' (CUDA on a machine with a GPU) from pageable memory runs synchronously
    // CHECK-MESSAGES: :[[@LINE-3]]:14: note: 'batch.data' comes from a torch::data loader, which collates batches into pageable memory
    (void)data;
  }
}

torch::Tensor load_batch(std::vector<float> &pixels) {
  return torch::from_blob(pixels.data(), {8, 784});
}

torch::Tensor upload(const torch::Tensor &t, torch::Device device) {
  return t.to(device, /*non_blocking=*/true);
}

void train_mnist(torch::Device device) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::MNIST("./data").map(torch::data::transforms::Stack<>()),
      64);
  train_epoch(*loader, device);
  std::vector<float> pixels(8 * 784);
  auto x = upload(load_batch(pixels), device);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: non_blocking copy of 'load_batch(pixels)' (from 'load_batch()' at {{.*}}) to 'device' (CUDA on a machine with a GPU) from pageable memory
  // CHECK-MESSAGES: :[[@LINE-11]]:12: note: the non_blocking copy is made here
  auto y = upload(load_batch(pixels).pin_memory(), device);
  (void)x;
  (void)y;
}
