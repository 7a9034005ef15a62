// Regression of a 64-d sensor vector onto 3 targets, with a Prefetcher that
// uploads the next batch on a side CUDA stream while the current step runs:
// the features go through pinned memory, an event tells the compute stream
// when the copy is done. The validation set is pinned once, up front.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>

struct HostBatch {
  torch::Tensor features;
  torch::Tensor targets;
};

HostBatch read_batch(int64_t n) {
  auto features = torch::randn({n, 64});
  auto w = torch::linspace(-1.0, 1.0, 64 * 3).view({64, 3});
  return {features, features.matmul(w) + 0.01 * torch::randn({n, 3})};
}

class Prefetcher {
 public:
  Prefetcher(torch::Device device, int64_t val_rows)
      : device_(device), stream_(c10::cuda::getStreamFromPool()),
        val_x_(torch::randn({val_rows, 64}).pin_memory()) {}

  // Reads the next batch and starts its upload on the side stream.
  void prefetch(int64_t rows) {
    const HostBatch b = read_batch(rows);
    c10::cuda::CUDAStreamGuard guard(stream_);
    // OK(torch-non-blocking-pageable): pin_memory() gives a page-locked copy.
    next_x_ = b.features.pin_memory().to(device_, /*non_blocking=*/true);
    // BUG(torch-non-blocking-pageable): the targets are the reader's pageable
    // tensor; this copy blocks the host.
    next_y_ = b.targets.to(device_, /*non_blocking=*/true);
    ready_.record(stream_);
  }

  std::pair<torch::Tensor, torch::Tensor> next() {
    ready_.block(c10::cuda::getCurrentCUDAStream());
    return {next_x_, next_y_};
  }

  torch::Tensor validation_inputs() const {
    // OK(torch-non-blocking-pageable): pinned in the constructor.
    return val_x_.to(device_, /*non_blocking=*/true);
  }

 private:
  torch::Device device_;
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent ready_;
  torch::Tensor val_x_;
  torch::Tensor next_x_, next_y_;
};

void write_predictions(const torch::Tensor &host, const std::string &path) {
  std::ofstream out(path);
  auto acc = host.accessor<float, 2>();
  for (int64_t i = 0; i < acc.size(0); ++i) out << acc[i][0] << ',' << acc[i][1] << ',' << acc[i][2] << '\n';
}

// Runs once before training: the largest batch whose step fits, halving
// the batch after each out-of-memory error.
int64_t probe_batch(torch::nn::Sequential &net, torch::Device device, int64_t batch) {
  if (batch < 32) return batch;
  try {
    auto x = torch::randn({batch, 64}, device);
    net->forward(x).sum().backward();
    net->zero_grad();
    return batch;
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry asks for half the batch.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return probe_batch(net, device, batch / 2);
  }
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "the prefetcher needs a CUDA device\n";
    return 1;
  }
  // OK(torch-cuda-unguarded): main() returned above when CUDA is missing.
  torch::Device device(torch::kCUDA);
  torch::nn::Sequential net(torch::nn::Linear(64, 256), torch::nn::GELU(), torch::nn::Linear(256, 3));
  net->to(device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));

  const int64_t batch = probe_batch(net, device, 8192);
  Prefetcher pf(device, 2048);
  pf.prefetch(batch);
  for (int64_t step = 0; step < 3000; ++step) {
    auto xy = pf.next();
    pf.prefetch(batch);
    auto loss = torch::mse_loss(net->forward(xy.first), xy.second);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): the divergence test reads the loss back on
    // every step, whichever branch is taken.
    if (loss.item<float>() > 1e4f) {
      std::cerr << "diverged at step " << step << '\n';
      break;
    }
  }

  torch::NoGradGuard no_grad;
  auto preds = net->forward(pf.validation_inputs());
  auto early = preds.narrow(0, 0, 16).to(torch::kCPU, /*non_blocking=*/true);
  auto host = preds.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): nothing waited for the copy; the writer
  // may read a half-filled buffer.
  write_predictions(host, "preds.csv");
  c10::cuda::getCurrentCUDAStream().synchronize();
  // OK(torch-non-blocking-d2h-race): the stream was synchronised above.
  std::cout << "first predictions\n" << early << '\n';
  return 0;
}
