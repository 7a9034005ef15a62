// RUN: %check_torch_tidy %s torch-non-blocking-pageable %t

#include <cuda_runtime_api.h>
#include <torch/torch.h>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

// --- Sources from helpers and getters -------------------------------------

torch::Tensor load_batch(std::ifstream &in) {
  std::vector<float> buffer(64);
  in.read(reinterpret_cast<char *>(buffer.data()), 256);
  return torch::from_blob(buffer.data(), {64}).clone();
}

void helper_returns_pageable(std::ifstream &in, torch::Device device) {
  auto batch = load_batch(in);
  auto gpu = batch.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: non_blocking copy of 'batch' (from 'load_batch()' at {{.*}}:15) to 'device' (CUDA on a machine with a GPU) from pageable memory runs synchronously
  // CHECK-MESSAGES: :[[@LINE-3]]:16: note: 'batch' comes from the call of 'load_batch()' here
  // CHECK-MESSAGES: :15:48: note: 'batch' was allocated in pageable memory here
}

torch::Tensor wrap(std::vector<float> &pixels) {
  return torch::from_blob(pixels.data(), {static_cast<long>(pixels.size())});
}

void from_blob_of_a_vector(std::vector<float> &pixels) {
  wrap(pixels).to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: non_blocking copy of 'wrap(pixels)' (from 'wrap()' at {{.*}}:27) to CUDA from pageable memory
}

class Camera {
public:
  Camera() : image_(torch::empty({3, 224, 224})) {}
  const torch::Tensor &image() const { return image_; }

private:
  torch::Tensor image_;
};

void getter_over_a_pageable_member(const Camera &camera) {
  auto frame = camera.image().to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:31: warning: non_blocking copy of 'camera.image()' (from 'image()' at {{.*}}:[[@LINE-9]]) to CUDA from pageable memory
}

// --- The copy sits in a helper ------------------------------------------------

torch::Tensor upload(const torch::Tensor &t, torch::Device device) {
  return t.to(device, /*non_blocking=*/true);
}

void helper_copies_what_it_is_given(torch::Device device) {
  auto host = torch::randn({8});
  upload(host, device);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: non_blocking copy of 'host' to 'device' (CUDA on a machine with a GPU) from pageable memory runs synchronously
  // CHECK-MESSAGES: :[[@LINE-3]]:15: note: 'host' was allocated in pageable memory here
  // CHECK-MESSAGES: :[[@LINE-8]]:12: note: the non_blocking copy is made here
  upload(host.pin_memory(), device);
  upload(torch::empty({8}, torch::TensorOptions().pinned_memory(true)), device);
}

class Uploader {
public:
  explicit Uploader(torch::Device device) : device_(device) {}
  torch::Tensor up(const torch::Tensor &t) const {
    return t.to(device_, /*non_blocking=*/true);
  }

private:
  torch::Device device_;
};

void member_device_helper(const Uploader &uploader) {
  uploader.up(torch::ones({4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: non_blocking copy of 'torch::ones({4})' to 'device_' (CUDA on a machine with a GPU) from pageable memory
}

torch::Tensor upload_twice_removed(const torch::Tensor &t, torch::Device d) {
  return upload(t, d);
}

void copy_two_calls_down() {
  auto host = torch::zeros({4});
  upload_twice_removed(host, torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: non_blocking copy of 'host' to CUDA from pageable memory
  // CHECK-MESSAGES: :[[@LINE-7]]:10: note: which calls 'upload()' here
}

// --- Writing through data_ptr() changes contents, not memory --------------

void read_into_tensor(std::ifstream &in, torch::Device device) {
  auto t = torch::empty({16});
  in.read(reinterpret_cast<char *>(t.data_ptr<float>()), 64);
  auto g = t.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 't' to 'device'
}

void memcpy_into_tensor(const float *src, torch::Device device) {
  auto t = torch::empty({16});
  float *dst = t.data_ptr<float>();
  std::memcpy(dst, src, 64);
  auto g = t.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 't' to 'device'
}

// --- Templates ----------------------------------------------------------------

template <typename Loader> void train(Loader &loader, torch::Device device) {
  for (auto &batch : loader) {
    auto data = batch.data.to(device, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: non_blocking copy of 'batch.data' to 'device' (CUDA on a machine with a GPU) from pageable memory
  }
}

void run(torch::Device device) {
  auto loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(
          torch::data::transforms::Stack<>()),
      64);
  train(*loader, device);
}

// --- Negatives ----------------------------------------------------------------

torch::Tensor opaque_source();
torch::Tensor from_parameter(float *data) { return torch::from_blob(data, {4}); }

void unknown_sources_stay_silent(float *data, torch::Tensor param) {
  opaque_source().to(torch::kCUDA, true);
  from_parameter(data).to(torch::kCUDA, true);
  upload(param, torch::kCUDA);
}

void pinned_host_buffer() {
  float *buffer = nullptr;
  cudaMallocHost(reinterpret_cast<void **>(&buffer), 64);
  auto t = torch::from_blob(buffer, {16});
  t.to(torch::kCUDA, true);
}

torch::Tensor pinned_batch() {
  return torch::empty({8}, torch::TensorOptions().pinned_memory(true));
}

void pinned_from_a_helper() {
  pinned_batch().to(torch::kCUDA, true);
  upload(pinned_batch(), torch::kCUDA);
}

void upload_to_the_cpu() { upload(torch::ones({2}), torch::kCPU); }

#include <deque>
#include <map>
#include <string>

// A member container filled by one method and read by another that calls it.
class SampleQueue {
public:
  explicit SampleQueue(torch::Device target) : target_(target) {}
  void top_up(size_t want) {
    for (size_t i = staged_.size(); i < want; ++i)
      staged_.push_back(torch::rand({16, 3}));
  }
  torch::Tensor take() {
    top_up(2);
    torch::Tensor out = staged_.back().to(target_, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:40: warning: non_blocking copy of 'staged_.back()' (from 'top_up()' {{.*}}) to 'device' (CUDA on a machine with a GPU) from pageable memory {{.*}}[torch-non-blocking-pageable]
    staged_.pop_back();
    return out;
  }

private:
  torch::Device target_;
  std::vector<torch::Tensor> staged_;
};

// The same class filled with pinned memory stays silent.
class PinnedPrefetcher {
public:
  explicit PinnedPrefetcher(torch::Device device) : device_(device) {}
  void fill() { ready_.push_back(torch::randn({8}).pin_memory()); }
  torch::Tensor next() {
    fill();
    return ready_.front().to(device_, /*non_blocking=*/true);
  }

private:
  torch::Device device_;
  std::deque<torch::Tensor> ready_;
};

torch::Tensor prefetch_both(torch::Device device) {
  SampleQueue p(device);
  PinnedPrefetcher q(device);
  return p.take() + q.next();
}

// A dataset of records, filled by its constructor and handed out by a
// getter; a subset copied by iterator range reaches a method that copies a
// field of each record: the copy of the record's field is reported.
struct Record {
  torch::Tensor features;
  torch::Tensor label;
};

class RecordSet {
public:
  explicit RecordSet(int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      records_.push_back({torch::rand({4, 8}), torch::zeros({4})});
  }
  const std::vector<Record> &records() const { return records_; }

private:
  std::vector<Record> records_;
};

void replay_records(const std::vector<Record> &subset, torch::Device device) {
  for (const auto &r : subset) {
    auto x = r.features.to(device, /*non_blocking=*/true);
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: non_blocking copy of 'r.features' (from 'RecordSet' {{.*}}) to 'device' (CUDA on a machine with a GPU) from pageable memory {{.*}}[torch-non-blocking-pageable]
    auto y = r.label.to(device);
  }
}

void replay_hardest(torch::Device device) {
  RecordSet set(32);
  std::vector<Record> hardest(set.records().begin(), set.records().begin() + 4);
  replay_records(hardest, device);
}

// The same records pinned before they are stored: silent.
void replay_pinned(const std::vector<Record> &subset, torch::Device device) {
  for (const auto &r : subset)
    auto x = r.features.to(device, /*non_blocking=*/true);
}

void replay_pinned_set(torch::Device device) {
  std::vector<Record> pinned;
  for (int i = 0; i < 4; ++i)
    pinned.push_back({torch::rand({4, 8}).pin_memory(), torch::zeros({4})});
  std::vector<Record> some(pinned.begin(), pinned.end());
  replay_pinned(some, device);
}

// `torch::stack(v)` of a named vector of host tensors is a new pageable
// host tensor, like `torch::stack({a, b})`.
void upload_stacked(torch::Device device) {
  std::vector<torch::Tensor> windows;
  for (int i = 0; i < 4; ++i)
    windows.push_back(torch::randn({16}));
  auto batch = torch::stack(windows);
  auto on_device = batch.to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: non_blocking copy of 'batch' {{.*}}[torch-non-blocking-pageable]
}

// A struct handed to a helper as a temporary (`upload_graph(make_graph())`):
// its fields are what the function that built it returned.
struct GraphBatch {
  torch::Tensor features;
  torch::Tensor adjacency;
};
GraphBatch make_graph() { return {torch::rand({4, 4}), torch::rand({4, 4}).pin_memory()}; }
GraphBatch upload_graph(const GraphBatch &g, torch::Device d) {
  GraphBatch out;
  out.features = g.features.to(d, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: non_blocking copy of 'g.features' (from 'make_graph()'{{.*}}from pageable memory{{.*}}[torch-non-blocking-pageable]
  out.adjacency = g.adjacency.to(d, /*non_blocking=*/true); // near-miss: pinned
  return out;
}
void train_graph(torch::Device device) {
  GraphBatch g = upload_graph(make_graph(), device);
}

// A helper that computes on its parameter returns a fresh tensor on the
// parameter's device: pageable on the host, even from a pinned argument.
torch::Tensor standardise(const torch::Tensor &features) {
  return (features - 0.5) * 2.0;
}
void upload_computed(torch::Device device) {
  auto host = torch::randn({8, 16}).pin_memory();
  auto x = standardise(host).to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:30: warning: non_blocking copy of 'standardise(host)'{{.*}}[torch-non-blocking-pageable]
  auto on_device = torch::randn({8, 16}, device);
  auto y = standardise(on_device).to(device, /*non_blocking=*/true);
}

// A loader that pins only when asked and CUDA is there: a call that passes
// false gets pageable memory (the flag decides the branch).
torch::Tensor load_tile(bool pin) {
  auto pixels = torch::randn({8, 16});
  if (pin && torch::cuda::is_available())
    pixels = pixels.pin_memory();
  return pixels;
}
void upload_tiles(torch::Device device) {
  auto x = load_tile(/*pin=*/false).to(device, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:37: warning: non_blocking copy of 'load_tile(/*pin=*/false)'{{.*}}from pageable memory{{.*}}[torch-non-blocking-pageable]
  auto y = load_tile(/*pin=*/true).to(device, /*non_blocking=*/true);
}
