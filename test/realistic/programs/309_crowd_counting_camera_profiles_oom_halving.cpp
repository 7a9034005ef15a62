// Crowd counting for a stadium's concourse cameras: a CSRNet-style density
// regressor (a small VGG front end, a dilated back end) predicts a density
// map whose integral is the head count. Every camera has a profile with a
// region-of-interest mask (the walkway, not the facade or the sky). Frames
// come from a video decoder as HWC bytes. The service runs on the stadium's
// GPU box only.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kH = 256, kW = 256, kOutH = kH / 4, kOutW = kW / 4;

struct CameraProfile {
  std::string name;
  torch::Tensor roi;  // [1, 1, kOutH, kOutW], 1 on the walkway
  double pixels_per_metre;
};

std::map<std::string, CameraProfile> load_camera_profiles() {
  std::map<std::string, CameraProfile> out;
  for (const char *name : {"gate_a", "gate_b", "north_ramp"}) {
    auto roi = torch::ones({1, 1, kOutH, kOutW});
    roi.narrow(2, 0, kOutH / 5).zero_();  // sky and signage
    out.emplace(name, CameraProfile{name, roi, 42.0});
  }
  return out;
}

// Decodes frames into one reusable byte buffer, HWC as the codec emits them.
class FrameDecoder {
 public:
  explicit FrameDecoder(int64_t batch) : batch_(batch), pixels_(batch * kH * kW * 3) {}
  torch::Tensor next_batch() {
    for (auto &p : pixels_)
      p = static_cast<uint8_t>(rng_() % 256);
    auto hwc = torch::from_blob(pixels_.data(), {batch_, kH, kW, 3}, torch::kByte);
    return hwc.permute({0, 3, 1, 2}).to(torch::kFloat).div(255.0);
  }
  torch::Tensor density_for_last_batch() { return torch::rand({batch_, 1, kOutH, kOutW}) * 0.02; }
  const std::string &camera() const { return cameras_[frame_++ % 3]; }
  int64_t batch_size() const { return batch_; }

 private:
  int64_t batch_;
  std::vector<uint8_t> pixels_;
  std::minstd_rand rng_{309};
  std::vector<std::string> cameras_{"gate_a", "gate_b", "north_ramp"};
  mutable size_t frame_ = 0;
};

struct CrowdNetImpl : nn::Module {
  CrowdNetImpl()
      : front(register_module("front", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 32, 3).padding(1)),
                                                      nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                                                      nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                                                      nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2)))),
        back(register_module("back", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(64, 64, 3).padding(2).dilation(2)),
                                                    nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(64, 1, 1))))) {}
  torch::Tensor forward(const torch::Tensor &x) { return torch::relu(back->forward(front->forward(x))); }
  nn::Sequential front, back;
};
TORCH_MODULE(CrowdNet);

// Images per second over the whole run, for the capacity report.
class Throughput {
 public:
  void tick(int64_t images) {
    // BUG(torch-host-sync-in-loop): waits for the whole device on every
    // training step just to time it.
    torch::cuda::synchronize();
    auto now = std::chrono::steady_clock::now();
    seconds_ += std::chrono::duration<double>(now - last_).count();
    last_ = now;
    images_ += images;
  }
  double rate() const { return images_ / std::max(seconds_, 1e-9); }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  double seconds_ = 0.0;
  int64_t images_ = 0;
};

void train_epoch(CrowdNet &net, torch::optim::Optimizer &opt, FrameDecoder &decoder,
                 const std::map<std::string, CameraProfile> &cameras, torch::Device device, int64_t steps,
                 Throughput &meter) {
  net->train();
  std::vector<torch::Tensor> count_errors;
  for (int64_t step = 0; step < steps; ++step) {
    const auto &prof = cameras.at(decoder.camera());
    // BUG(torch-non-blocking-pageable): the frames are computed on the host
    // from the decoder's std::vector; nothing is pinned.
    auto frames = decoder.next_batch().to(device, /*non_blocking=*/true);
    auto gt = decoder.density_for_last_batch().to(device);
    opt.zero_grad();
    auto density = net->forward(frames);
    // BUG(torch-device-mismatch): the profile's ROI mask was loaded on the
    // host and never moved; the density map is on the GPU.
    auto masked = density * prof.roi;
    auto loss = F::mse_loss(masked, gt) * 1000.0;
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the count error is computed from
    // the undetached density map; the vector keeps every step's graph.
    count_errors.push_back(torch::abs(masked.sum({1, 2, 3}) - gt.sum({1, 2, 3})));
    meter.tick(frames.size(0));
  }
  const double mae = std::accumulate(count_errors.begin(), count_errors.end(), 0.0,
                                     [](double acc, const torch::Tensor &e) { return acc + e.sum().item<double>(); });
  const auto frames = static_cast<double>(count_errors.size()) * static_cast<double>(decoder.batch_size());
  std::cout << "train count MAE " << mae / frames << '\n';
}

// Largest batch that trains one step without running out of memory.
int64_t calibrate_batch(CrowdNet &net, torch::optim::Optimizer &opt, torch::Device device, int64_t batch) {
  while (true) {
    bool oom = false;
    try {
      opt.zero_grad();
      auto x = torch::rand({batch, 3, kH, kW}, device);
      net->forward(x).sum().backward();
      opt.zero_grad();
    } catch (const c10::OutOfMemoryError &) {
      oom = true;
      // OK(torch-empty-cache-oom-retry): the next attempt uses half the batch.
      // BUG(torch-empty-cache-in-loop): still a device-wide cudaFree on every
      // failed pass of the calibration loop.
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
    if (!oom)
      return batch;
    TORCH_CHECK(batch > 1, "not even one frame fits");
    batch /= 2;
  }
}

// One 4K panorama stitched from all cameras, for the evening capacity report.
double estimate_panorama(CrowdNet &net, const torch::Tensor &pano) {
  torch::NoGradGuard no_grad;
  std::optional<torch::Tensor> density;
  try {
    density = net->forward(pano);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the allocator already emptied its
    // cache before raising; the same panorama is run again below.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  if (!density)
    density = net->forward(pano);
  return density->sum().item<double>();
}

void evaluate(CrowdNet &net, FrameDecoder &decoder, const std::map<std::string, CameraProfile> &cameras,
              torch::Device device, int64_t batches) {
  net->eval();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> counts_host, gt_counts;
  for (int64_t b = 0; b < batches; ++b) {
    const auto &prof = cameras.at(decoder.camera());
    auto frames = decoder.next_batch().to(device);
    // OK(torch-device-mismatch): the mask is moved to the frames' device here.
    auto density = net->forward(frames) * prof.roi.to(device);
    gt_counts.push_back(decoder.density_for_last_batch().sum({1, 2, 3}));
    counts_host.push_back(density.sum({1, 2, 3}).to(torch::kCPU, /*non_blocking=*/true));
  }
  double mae = 0.0;
  for (size_t i = 0; i < counts_host.size(); ++i) {
    // BUG(torch-non-blocking-d2h-race): the per-batch counts were only queued
    // for copy; nothing waited before they are read.
    const float *pred = counts_host[i].data_ptr<float>();
    auto truth = gt_counts[i].accessor<float, 1>();
    for (int64_t j = 0; j < truth.size(0); ++j)
      mae += std::abs(pred[j] - truth[j]);
  }
  const auto frames = static_cast<double>(counts_host.size()) * static_cast<double>(decoder.batch_size());
  std::cout << "val count MAE " << mae / frames << '\n';

  std::vector<torch::Tensor> roi_area;
  for (const auto &kv : cameras)
    roi_area.push_back(kv.second.roi.to(device).sum().to(torch::kCPU, /*non_blocking=*/true));
  c10::cuda::getCurrentCUDAStream().synchronize();
  // OK(torch-non-blocking-d2h-race): the stream was synchronised after the copies.
  std::cout << "ROI cells at " << cameras.begin()->first << ": " << roi_area.front().item<double>() << '\n';
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "crowd_count: needs the stadium GPU box\n";
    return 1;
  }
  torch::manual_seed(309);
  // OK(torch-cuda-unguarded): main returned above without a GPU.
  torch::Device device(torch::kCUDA);
  const auto cameras = load_camera_profiles();

  CrowdNet net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-4));
  const int64_t batch = calibrate_batch(net, opt, device, 32);
  std::cout << "training with " << batch << " frames per step\n";

  FrameDecoder decoder(batch);
  Throughput meter;
  for (int epoch = 0; epoch < 5; ++epoch)
    train_epoch(net, opt, decoder, cameras, device, 200, meter);
  std::cout << meter.rate() << " frames/s\n";

  evaluate(net, decoder, cameras, device, 20);
  net->eval();
  auto pano = torch::rand({1, 3, 2160, 3840}, device);
  std::cout << "panorama head count " << estimate_panorama(net, pano) << '\n';
}
