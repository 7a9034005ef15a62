// Microseismic monitoring at a geothermal site with distributed acoustic
// sensing: a fibre gives 64 strain-rate channels at 500 Hz. A 2-D conv net
// scores each 512-sample window per time step. It is trained with autocast,
// its detection threshold is calibrated on noise-only windows, archived days
// are backfilled in chunks, and a live monitor scores the interrogator's ring
// buffer through a pinned staging slab. LibTorch 1.13/2.x.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace das {

constexpr int64_t kC = 64, kT = 512;

torch::Device gpu_device() {
  // OK(torch-cuda-unguarded): its only call sits behind torch::cuda::is_available() in main.
  return torch::Device(torch::kCUDA);
}

struct DasNetImpl : nn::Module {
  DasNetImpl()
      : conv(register_module("conv", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, {5, 7}).padding({2, 3})), nn::BatchNorm2d(16), nn::ReLU(),
                                                    nn::Conv2d(nn::Conv2dOptions(16, 32, {5, 7}).padding({2, 3})), nn::BatchNorm2d(32), nn::ReLU()))),
        drop(register_module("drop", nn::Dropout(0.2))), head(register_module("head", nn::Conv1d(32, 1, 1))) {}
  // x: B x 1 x C x T -> per-sample event logits B x T
  torch::Tensor forward(const torch::Tensor &x) { return head->forward(drop->forward(conv->forward(x).mean(2))).squeeze(1); }
  nn::Sequential conv;
  nn::Dropout drop;
  nn::Conv1d head;
};
TORCH_MODULE(DasNet);

torch::Tensor taper(const torch::Tensor &x) {
  // OK(torch-device-mismatch): the window is made with the input's options.
  return x * torch::hann_window(x.size(3), x.options()).view({1, 1, 1, -1});
}

struct DasBatch {
  torch::Tensor strain, labels;  // B x 1 x C x T; B x T, 1 inside a picked event
};

std::vector<DasBatch> make_batches(int64_t n, int64_t b) {
  std::vector<DasBatch> out;
  for (int64_t i = 0; i < n; ++i) {
    auto labels = (torch::rand({b, kT}) > 0.93).to(torch::kFloat);
    out.push_back({torch::randn({b, 1, kC, kT}) + labels.view({b, 1, 1, kT}), labels});
  }
  return out;
}

class EventTrainer {
 public:
  EventTrainer(DasNet net, torch::Device device) : net_(std::move(net)), device_(device), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  torch::Tensor forward_loss(const torch::Tensor &x, const torch::Tensor &y, const torch::Tensor &pos_weight) {
    auto logits = net_->forward(x);
    return F::binary_cross_entropy_with_logits(logits, y, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight));
  }

  void fit(const std::vector<DasBatch> &batches, int epochs) {
    for (int e = 0; e < epochs; ++e) {
      auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device_));
      for (const auto &b : batches) {
        // OK(torch-host-sync-in-loop): the labels are still on the host; nothing waits for the GPU.
        const double pos_frac = b.labels.mean().item<double>();
        auto pos_weight = torch::full({1}, (1.0 - pos_frac) / std::max(pos_frac, 1e-3), torch::TensorOptions().device(device_));
        auto x = taper(b.strain.to(device_));
        auto y = b.labels.to(device_);
        opt_.zero_grad();
        at::autocast::set_enabled(true);
        auto loss = forward_loss(x, y, pos_weight);
        at::autocast::set_enabled(false);
        // BUG(torch-autocast-region): the float16 region's mean loss reaches backward() without loss scaling.
        loss.backward();
        opt_.step();
        // OK(torch-loss-accumulation-graph): detached before it joins the epoch sum.
        epoch_loss += loss.detach();
      }
      std::cout << "epoch " << e << " loss " << epoch_loss.item<double>() / static_cast<double>(batches.size()) << '\n';
    }
  }

 private:
  DasNet net_;
  torch::Device device_;
  torch::optim::Adam opt_;
};

// Evaluation mode for as long as it lives; restores the mode it found.
class ScopedEval {
 public:
  explicit ScopedEval(nn::Module &m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~ScopedEval() { m_.train(was_training_); }
 private:
  nn::Module &m_;
  bool was_training_;
};

// Threshold at the 99.9th percentile of noise scores, and recall on catalogued events.
std::pair<double, double> calibrate(DasNet &net, const std::vector<torch::Tensor> &noise, const std::vector<torch::Tensor> &events, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> noise_scores;
  {
    ScopedEval eval_scope(*net);
    for (const auto &w : noise)
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): inside eval_scope, under the guard.
      noise_scores.push_back(torch::sigmoid(net->forward(taper(w.to(device)))).amax(1));
  }
  const double thr = torch::quantile(torch::cat(noise_scores), 0.999).item<double>();
  int64_t hits = 0, total = 0;
  for (const auto &w : events) {
    // BUG(torch-eval-mode-missing): eval_scope restored training mode at its closing brace; dropout is on here.
    auto score = torch::sigmoid(net->forward(taper(w.to(device)))).amax(1);
    hits += (score > thr).sum().item<int64_t>();
    total += score.size(0);
  }
  return {thr, static_cast<double>(hits) / static_cast<double>(std::max<int64_t>(total, 1))};
}

torch::Tensor score_archive(DasNet &net, const torch::Tensor &day, int64_t chunk, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  for (const auto &piece : day.split(chunk)) out.push_back(torch::sigmoid(net->forward(taper(piece.to(device)))).cpu());
  return torch::cat(out);
}

torch::Tensor backfill_day(DasNet &net, const torch::Tensor &day, torch::Device device) {
  int64_t chunk = 64;
  try {
    return score_archive(net, day, chunk, device);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry below uses half the chunk.
    c10::cuda::CUDACachingAllocator::emptyCache();
    chunk /= 2;
  }
  return score_archive(net, day, chunk, device);
}

// The monthly report scores every confirmed event in one batch.
torch::Tensor rescore_catalog(DasNet &net, const torch::Tensor &catalog, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto attempt = [&] { return torch::sigmoid(net->forward(taper(catalog.to(device)))).amax(1).cpu(); };
  try {
    return attempt();
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): attempt() runs again on the same catalogue batch.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return attempt();
  }
}

// Page-locked slabs shared by the acquisition and scoring threads.
class PinnedPool {
 public:
  PinnedPool(int64_t slabs, int64_t c, int64_t t) {
    for (int64_t i = 0; i < slabs; ++i) slabs_.push_back(torch::empty({1, 1, c, t}, torch::TensorOptions().pinned_memory(true)));
  }
  torch::Tensor slab(size_t i) const { return slabs_.at(i); }
 private:
  std::vector<torch::Tensor> slabs_;
};

// The interrogator writes channel-major samples here.
class RingBuffer {
 public:
  RingBuffer() : samples_(static_cast<size_t>(kC * kT)) {}
  void fill_synthetic(int tick) {
    for (size_t i = 0; i < samples_.size(); ++i) samples_[i] = static_cast<float>(((i * 7919 + static_cast<size_t>(tick)) % 2000) / 1000.0 - 1.0);
  }
  torch::Tensor view() { return torch::from_blob(samples_.data(), {1, 1, kC, kT}, torch::kFloat); }
 private:
  std::vector<float> samples_;
};

class DasMonitor {
 public:
  DasMonitor(DasNet net, torch::Device device, torch::Tensor staging) : net_(std::move(net)), device_(device), staging_(std::move(staging)) {
    net_->to(device_);
    net_->eval();
  }
  void score_staged(RingBuffer &ring) {
    staging_.copy_(ring.view());
    // OK(torch-non-blocking-pageable): staging_ is a slab the PinnedPool allocated page-locked.
    run(staging_.to(device_, /*non_blocking=*/true));
  }
  // After an outage the backlog is scored straight from the ring.
  void score_direct(RingBuffer &ring) {
    // BUG(torch-non-blocking-pageable): the ring's from_blob view is pageable; the flag does nothing.
    run(ring.view().to(device_, /*non_blocking=*/true));
  }
  void wait() const { if (device_.is_cuda()) torch::cuda::synchronize(); }
  const torch::Tensor &host_scores() const { return host_; }

 private:
  void run(const torch::Tensor &x) {
    // OK(torch-inference-without-no-grad, torch-eval-mode-missing): run_monitoring holds a NoGradGuard; the constructor called eval().
    scores_ = torch::sigmoid(net_->forward(taper(x)));
    host_ = scores_.to(torch::kCPU, /*non_blocking=*/true);
  }
  DasNet net_;
  torch::Device device_;
  torch::Tensor staging_, scores_, host_;
};

void report_picks(const torch::Tensor &host, double thr, int tick) {
  auto a = host.accessor<float, 2>();
  int64_t picks = 0;
  for (int64_t t = 0; t < a.size(1); ++t) picks += a[0][t] > thr;
  if (picks > 0) std::cout << "tick " << tick << ": " << picks << " samples above threshold\n";
}

void run_monitoring(DasNet net, torch::Device device, double thr) {
  PinnedPool pool(2, kC, kT);
  DasMonitor mon(net, device, pool.slab(0));
  RingBuffer ring;
  torch::NoGradGuard no_grad;
  for (int tick = 0; tick < 50; ++tick) {
    ring.fill_synthetic(tick);
    mon.score_staged(ring);
    mon.wait();
    // OK(torch-non-blocking-d2h-race): wait() synchronised the device after the copy.
    report_picks(mon.host_scores(), thr, tick);
  }
  mon.score_direct(ring);
  // BUG(torch-non-blocking-d2h-race): no wait() between the backlog's readback and the report.
  report_picks(mon.host_scores(), thr, -1);
}

}  // namespace das

int main() {
  using namespace das;
  torch::manual_seed(379);
  const torch::Device device = torch::cuda::is_available() ? gpu_device() : torch::Device(torch::kCPU);
  DasNet net;
  net->to(device);
  EventTrainer trainer(net, device);
  trainer.fit(make_batches(40, 16), 3);

  std::vector<torch::Tensor> noise, events;
  for (int i = 0; i < 6; ++i) noise.push_back(torch::randn({16, 1, kC, kT}));
  for (const auto &b : make_batches(4, 16)) events.push_back(b.strain);
  const auto calib = calibrate(net, noise, events, device);
  std::cout << "threshold " << calib.first << " recall " << calib.second << '\n';

  net->eval();
  std::cout << "backfilled " << backfill_day(net, torch::randn({256, 1, kC, kT}), device).size(0) << " windows\n";
  std::cout << "catalogue mean score " << rescore_catalog(net, torch::cat(events), device).mean().item<double>() << '\n';
  if (device.is_cuda()) run_monitoring(net, device, calib.first);
  return 0;
}
