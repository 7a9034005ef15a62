// RUN: %check_torch_tidy %s torch-non-blocking-pageable %t

#include <torch/torch.h>

torch::Tensor load_batch();
torch::Device pick_device();

// --- Positives -------------------------------------------------------------

void to_device_bare_bool() {
  auto x = torch::randn({64, 3, 224, 224});
  auto y = x.to(torch::kCUDA, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory runs synchronously; pin the source (pin_memory() or TensorOptions().pinned_memory(true)) for the copy to overlap [torch-non-blocking-pageable]
  // CHECK-MESSAGES: :[[@LINE-3]]:12: note: 'x' was allocated in pageable memory here
}

void to_device_comment_label() {
  auto x = torch::zeros({8});
  auto y = x.to(torch::Device(torch::kCUDA, 1), /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to cuda:1 from pageable memory runs synchronously
}

void to_device_dtype_overload() {
  auto x = torch::ones({8});
  auto y = x.to(torch::kCUDA, torch::kHalf, true, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
}

void to_options_overload() {
  auto x = torch::empty({8});
  auto y = x.to(torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf), true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
}

void bool_variable() {
  bool non_blocking = true;
  auto x = torch::rand({8});
  auto y = x.to("cuda:0", non_blocking);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to cuda:0 from pageable memory
}

void symbolic_device(torch::Device device) {
  auto x = torch::arange(10);
  auto y = x.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to 'device' (CUDA on a machine with a GPU) from pageable memory runs synchronously
}

void device_from_helper() {
  auto x = torch::randn({4}) * 2;
  auto y = x.to(pick_device(), true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to 'pick_device' (CUDA on a machine with a GPU) from pageable memory
}

void copy_into_cuda() {
  auto dst = torch::empty({8}, torch::kCUDA);
  auto src = torch::randn({8});
  dst.copy_(src, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: non_blocking copy of 'src' to CUDA from pageable memory
  // CHECK-MESSAGES: :[[@LINE-3]]:14: note: 'src' was allocated in pageable memory here
}

void loader_batches() {
  auto loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>()), 64);
  for (auto &batch : *loader) {
    auto data = batch.data.to(torch::kCUDA, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: non_blocking copy of 'batch.data' to CUDA from pageable memory
    // CHECK-MESSAGES: :[[@LINE-3]]:14: note: 'batch.data' comes from a torch::data loader, which collates batches into pageable memory
    auto target = batch.target.to(torch::kCUDA, true);
    // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: non_blocking copy of 'batch.target' to CUDA from pageable memory
  }
}

void unpinned_options() {
  auto opts = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(false);
  auto x = torch::empty({8}, opts);
  auto y = x.to(torch::kCUDA, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
}

void in_a_loop(int n) {
  auto x = torch::randn({8});
  for (int i = 0; i < n; ++i) {
    auto y = x.to(torch::kCUDA, true);
    // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: non_blocking copy of 'x' to CUDA from pageable memory
  }
}

void in_a_lambda() {
  auto f = [] {
    auto x = torch::randn({8});
    return x.to(torch::kCUDA, true);
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
  };
  f();
}

// --- Negatives -------------------------------------------------------------

void pinned_by_pin_memory() {
  auto x = torch::randn({8}).pin_memory();
  auto y = x.to(torch::kCUDA, true);
}

void pinned_later() {
  auto x = torch::randn({8});
  x = x.pin_memory();
  auto y = x.to(torch::kCUDA, /*non_blocking=*/true);
}

void pinned_options_variable() {
  auto opts = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true);
  auto x = torch::empty({8}, opts);
  auto y = x.to(torch::kCUDA, true);
}

void checked_with_is_pinned(torch::Tensor x) {
  auto x2 = torch::randn({8});
  if (x2.is_pinned())
    auto y = x2.to(torch::kCUDA, true);
}

void blocking_copy() {
  auto x = torch::randn({8});
  auto y = x.to(torch::kCUDA);
  auto z = x.to(torch::kCUDA, /*non_blocking=*/false);
  bool nb = false;
  auto w = x.to(torch::kCUDA, nb);
}

void unknown_pinning(torch::Tensor param, float *p) {
  auto a = param.to(torch::kCUDA, true);
  auto b = load_batch().to(torch::kCUDA, true);
  auto c = torch::from_blob(p, {8});
  auto d = c.to(torch::kCUDA, true);
}

void unknown_bool(bool nb) {
  auto x = torch::randn({8});
  auto y = x.to(torch::kCUDA, nb);
}

void destination_is_cpu() {
  auto x = torch::randn({8});
  auto y = x.to(torch::kCPU, true);
  auto z = x.to(torch::kHalf, true);
  auto h = torch::empty({8});
  h.copy_(x, true);
}

void device_to_host_is_not_host_to_device() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  auto e = torch::empty({8}, torch::kCUDA);
  e.copy_(d, true);
}

void merged_paths(bool c) {
  auto x = torch::randn({8});
  if (c)
    x = x.pin_memory();
  auto y = x.to(torch::kCUDA, true);
}

void copy_from_pinned() {
  auto dst = torch::empty({8}, torch::kCUDA);
  auto src = torch::empty({8}, torch::TensorOptions().pinned_memory(true));
  dst.copy_(src, true);
}

void options_without_device() {
  auto x = torch::randn({8});
  auto y = x.to(torch::TensorOptions().dtype(torch::kHalf), true);
}

// A range-for over a container that a helper returns walks its elements: the
// hidden reference owns the returned temporary.
std::vector<torch::Tensor> make_clips(int n) {
  std::vector<torch::Tensor> out;
  for (int i = 0; i < n; ++i)
    out.push_back(torch::randn({8, 40}));
  return out;
}
std::vector<torch::Tensor> make_pinned_clips(int n) {
  std::vector<torch::Tensor> out;
  for (int i = 0; i < n; ++i)
    out.push_back(torch::randn({8, 40}).pin_memory());
  return out;
}
void upload_returned_clips(torch::Device device) {
  for (const auto &clip : make_clips(4))
    auto x = clip.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: non_blocking copy of 'clip'{{.*}}[torch-non-blocking-pageable]
  for (const auto &clip : make_pinned_clips(4))
    auto x = clip.to(device, /*non_blocking=*/true);
}

// Iterators copied from or offset from another walk its container: a
// batch gathered from `j = it` up to `it + n` holds the container's clips.
void upload_iterator_batches(torch::Device device) {
  auto clips = make_clips(64);
  for (auto it = clips.cbegin(); it != clips.cend(); it += 8) {
    std::vector<torch::Tensor> batch;
    for (auto j = it; j != it + 8; ++j)
      batch.push_back(*j);
    auto x = batch.front().to(device, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: non_blocking copy of 'batch.front()'{{.*}}[torch-non-blocking-pageable]
    auto k = std::next(it, 2);
    auto y = k->to(device, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: non_blocking copy of {{.*}}[torch-non-blocking-pageable]
  }
  auto pinned = make_pinned_clips(64);
  for (auto it = pinned.cbegin(); it != pinned.cend(); it += 8)
    for (auto j = it; j != it + 8; ++j)
      auto x = j->to(device, /*non_blocking=*/true);
}

// Each iteration of a range-for visits an element no earlier iteration
// wrote: a copy written back into its element does not make the next
// element pinned or unknown.
struct Tile {
  int64_t row;
  torch::Tensor pixels;
};
void upload_tiles_in_place(torch::Device device) {
  std::vector<Tile> tiles;
  for (int64_t r = 0; r < 4; ++r)
    tiles.push_back({r, torch::randn({3, 8, 8})});
  for (auto &tile : tiles)
    tile.pixels = tile.pixels.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:31: warning: non_blocking copy of 'tile.pixels'{{.*}}[torch-non-blocking-pageable]
  std::vector<Tile> pinned;
  for (int64_t r = 0; r < 4; ++r)
    pinned.push_back({r, torch::randn({3, 8, 8}).pin_memory()});
  for (auto &tile : pinned)
    tile.pixels = tile.pixels.to(device, /*non_blocking=*/true);
  // After the loop every element holds its device copy.
  for (auto &tile : tiles)
    auto again = tile.pixels.to(device, /*non_blocking=*/true);
}
