// Crowd counting from CCTV frames: a CSRNet-style density regressor (a
// VGG-like front end, a dilated back end) trained on synthetic frames in which
// every head is a bright dot and the target density map integrates to the
// head count. Every training step is timed by a RAII CudaStepTimer declared
// in the loop, the photometric augmentations are lambdas kept in a vector of
// std::function inside the frame source, and the validation report copies the
// per-frame counts back to the host asynchronously.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace crowd {

constexpr int64_t kFrame = 96, kStride = 8, kMap = kFrame / kStride;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t dilation = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(dilation).dilation(dilation));
}

struct DensityNetImpl : torch::nn::Module {
  DensityNetImpl()
      : front(register_module("front", torch::nn::Sequential(conv(3, 32), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                                                              conv(32, 64), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                                                              conv(64, 64), torch::nn::ReLU(),
                                                              torch::nn::MaxPool2d(2)))),
        back(register_module("back", torch::nn::Sequential(conv(64, 64, 2), torch::nn::ReLU(), conv(64, 32, 2),
                                                             torch::nn::ReLU(),
                                                             torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 1))))) {}
  // [B, 3, 96, 96] -> density [B, 1, 12, 12]
  torch::Tensor forward(const torch::Tensor &x) { return torch::relu(back->forward(front->forward(x))); }
  torch::nn::Sequential front, back;
};
TORCH_MODULE(DensityNet);

struct Frame {
  torch::Tensor image;    // [3, 96, 96]
  torch::Tensor density;  // [1, 12, 12]
};

Frame render_frame(int64_t heads) {
  auto image = torch::rand({3, kFrame, kFrame}) * 0.3;
  auto density = torch::zeros({1, kMap, kMap});
  auto ys = torch::randint(0, kFrame, {heads}, torch::kLong);
  auto xs = torch::randint(0, kFrame, {heads}, torch::kLong);
  auto ya = ys.accessor<int64_t, 1>();
  auto xa = xs.accessor<int64_t, 1>();
  auto img = image.accessor<float, 3>();
  auto den = density.accessor<float, 3>();
  for (int64_t i = 0; i < heads; ++i) {
    for (int64_t c = 0; c < 3; ++c)
      img[c][ya[i]][xa[i]] += 0.7f;
    den[0][ya[i] / kStride][xa[i] / kStride] += 1.0f;
  }
  return {image, density};
}

class FrameSource {
 public:
  using Augment = std::function<torch::Tensor(torch::Tensor)>;

  FrameSource() {
    augments_.push_back([](torch::Tensor img) { return (img * (0.8 + 0.4 * torch::rand({1}))).clamp(0.0, 1.0); });
    augments_.push_back([](torch::Tensor img) { return (img + 0.02 * torch::randn_like(img)).clamp(0.0, 1.0); });
    augments_.push_back([](torch::Tensor img) {
      if (torch::rand({1}).item<float>() > 0.2f)
        return img;
      auto gray = img.mean(0, /*keepdim=*/true).expand({3, -1, -1});
      // BUG(torch-tensor-to-discarded): the expanded view was meant to be
      // materialised; contiguous() returns a new tensor that is dropped.
      gray.contiguous();
      return gray;
    });
  }

  std::pair<torch::Tensor, torch::Tensor> batch(int64_t n) {
    std::vector<torch::Tensor> images, maps;
    for (int64_t i = 0; i < n; ++i) {
      auto frame = render_frame(torch::randint(5, 120, {1}).item<int64_t>());
      auto img = frame.image;
      for (auto &augment : augments_)
        img = augment(img);
      images.push_back(img);
      maps.push_back(frame.density);
    }
    return {torch::stack(images), torch::stack(maps)};
  }

 private:
  std::vector<Augment> augments_;
};

// Wall time of one step, including the GPU work it queued.
class CudaStepTimer {
 public:
  explicit CudaStepTimer(std::vector<double> &sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~CudaStepTimer() {
    // BUG(torch-host-sync-in-loop): fit() declares a timer at the top of
    // every training step, so every step ends in a device-wide sync.
    torch::cuda::synchronize();
    sink_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  std::vector<double> &sink_;
  std::chrono::steady_clock::time_point start_;
};

class CrowdTrainer {
 public:
  CrowdTrainer(DensityNet net, torch::Device device)
      : net_(std::move(net)), device_(device), opt_(net_->parameters(), torch::optim::AdamOptions(1e-4)) {
    net_->to(device_);
  }

  DensityNet &net() { return net_; }

  void fit(FrameSource &source, int steps) {
    net_->train();
    for (int step = 0; step < steps; ++step) {
      CudaStepTimer timer(step_ms_);
      auto [images, maps] = source.batch(8);
      auto pred = net_->forward(images.to(device_));
      // OK(torch-device-mismatch): the target maps move with the frames.
      auto loss = torch::mse_loss(pred, maps.to(device_)) * 100.0;
      opt_.zero_grad();
      loss.backward();
      opt_.step();
      if (step % 100 == 0)
        // OK(torch-host-sync-in-loop): every 100th step only.
        std::cout << "step " << step << " loss " << loss.item<float>() << "\n";
    }
  }

  // Per-frame head counts for the dashboard.
  std::vector<float> count_frames(const torch::Tensor &images) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto counts = net_->forward(images.to(device_)).sum({1, 2, 3}).to(torch::kCPU, /*non_blocking=*/true);
    if (device_.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised right above.
    auto acc = counts.accessor<float, 1>();
    std::vector<float> out;
    for (int64_t i = 0; i < acc.size(0); ++i)
      out.push_back(acc[i]);
    return out;
  }

  void report(FrameSource &source) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto [images, maps] = source.batch(32);
    auto pred = net_->forward(images.to(device_));
    auto host_counts = pred.sum({1, 2, 3}).to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): printed straight after the
    // asynchronous copy was queued.
    std::cout << "predicted counts " << host_counts << "\n";
    // BUG(torch-device-mismatch): `pred` is on the trainer's device, the
    // ground-truth maps never left the CPU.
    auto map_mse = torch::mse_loss(pred, maps);
    std::cout << "map mse " << map_mse.item<float>() << "\n";
    double total = 0.0;
    for (double ms : step_ms_)
      total += ms;
    std::cout << "mean step " << total / std::max<size_t>(1, step_ms_.size()) << " ms\n";
  }

 private:
  DensityNet net_;
  torch::Device device_;
  torch::optim::Adam opt_;
  std::vector<double> step_ms_;
};

}  // namespace crowd

int main() {
  torch::manual_seed(167);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  crowd::FrameSource source;
  crowd::CrowdTrainer trainer(crowd::DensityNet(), device);
  trainer.fit(source, 600);
  trainer.report(source);

  // Sanity check on sparse, medium and dense scenes before the release.
  trainer.net()->eval();
  for (int64_t heads : {5, 40, 160}) {
    auto frame = crowd::render_frame(heads);
    // BUG(torch-inference-without-no-grad): three forwards for a print and
    // autograd records every one of them.
    auto estimate = trainer.net()->forward(frame.image.unsqueeze(0).to(device)).sum().item<float>();
    std::cout << heads << " heads -> " << estimate << "\n";
  }

  auto [images, maps] = source.batch(4);
  auto counts = trainer.count_frames(images);
  std::cout << "dashboard counts: " << counts.size() << " frames, truth " << maps.sum({1, 2, 3}) << "\n";
  return 0;
}
