// Optical flow for a drone's downward camera: a small coarse-to-fine network
// predicts flow at three scales. Training mixes the supervised multi-scale
// end-point error with a photometric term (the second frame warped back by
// the predicted flow) and an edge-aware smoothness term. Frame pairs are
// uploaded from a pool of pinned host buffers that each step leases and
// returns; validation hands the per-pair EPE to a reporter callback.
#include <torch/torch.h>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace flow {
constexpr int64_t kH = 64, kW = 64, kBatch = 8;

struct FramePairs {
  torch::Tensor frames;  // B x 6 x H x W: both frames stacked on channels
  torch::Tensor flow;    // B x 2 x H x W ground truth
};

FramePairs synth_pairs(int64_t b) {
  auto img1 = F::avg_pool2d(torch::rand({b, 3, kH, kW}), F::AvgPool2dFuncOptions(5).stride(1).padding(2));
  auto shift = torch::randint(-3, 4, {2});
  // OK(torch-host-sync-in-loop): item() of a host tensor waits for no device.
  auto img2 = torch::roll(img1, {shift[1].item<int64_t>(), shift[0].item<int64_t>()}, {2, 3});
  auto gt = shift.to(torch::kFloat).view({1, 2, 1, 1}).expand({b, 2, kH, kW}).clone();
  return {torch::cat({img1, img2}, 1), gt};
}

struct CoarseToFineImpl : nn::Module {
  CoarseToFineImpl()
      : enc1(register_module("enc1", nn::Conv2d(nn::Conv2dOptions(6, 32, 3).stride(2).padding(1)))),
        enc2(register_module("enc2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)))),
        head2(register_module("head2", nn::Conv2d(nn::Conv2dOptions(64, 2, 3).padding(1)))),
        head1(register_module("head1", nn::Conv2d(nn::Conv2dOptions(32 + 2, 2, 3).padding(1)))),
        refine(register_module("refine", nn::Conv2d(nn::Conv2dOptions(6 + 2, 2, 3).padding(1)))) {}
  // Flows at 1/4, 1/2 and full resolution, in pixels of each scale.
  std::vector<torch::Tensor> forward(const torch::Tensor &frames) {
    auto f1 = torch::leaky_relu(enc1->forward(frames), 0.1);
    auto f2 = torch::leaky_relu(enc2->forward(f1), 0.1);
    auto up = F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kBilinear).align_corners(false);
    auto flow2 = head2->forward(f2);
    auto flow1 = head1->forward(torch::cat({f1, F::interpolate(flow2, up) * 2.0}, 1));
    auto flow0 = refine->forward(torch::cat({frames, F::interpolate(flow1, up) * 2.0}, 1));
    return {flow2, flow1, flow0};
  }
  nn::Conv2d enc1, enc2, head2, head1, refine;
};
TORCH_MODULE(CoarseToFine);

// Samples image at (x + u, y + v); a module so the trainer can hold it with the net.
struct BackwardWarpImpl : nn::Module {
  torch::Tensor forward(const torch::Tensor &image, const torch::Tensor &flow) {
    const int64_t n = image.size(0), h = image.size(2), w = image.size(3);
    auto ys = torch::linspace(-1.0, 1.0, h).view({1, h, 1}).expand({n, h, w});
    auto xs = torch::linspace(-1.0, 1.0, w).view({1, 1, w}).expand({n, h, w});
    auto base = torch::stack({xs, ys}, -1);
    auto offset = torch::stack({flow.select(1, 0) * (2.0 / (w - 1)), flow.select(1, 1) * (2.0 / (h - 1))}, -1);
    return F::grid_sample(image, base + offset, F::GridSampleFuncOptions().align_corners(true).padding_mode(torch::kBorder));
  }
};
TORCH_MODULE(BackwardWarp);

// Pinned host buffers for the frame pairs, handed out one per step and given back.
class PinnedFramePool {
 public:
  explicit PinnedFramePool(int64_t buffers) {
    for (int64_t i = 0; i < buffers; ++i)
      free_.push_back(torch::empty({kBatch, 6, kH, kW}, torch::TensorOptions().pinned_memory(true)));
  }
  torch::Tensor acquire() {
    if (free_.empty()) throw std::runtime_error("frame pool exhausted");
    auto buffer = free_.front();
    free_.pop_front();
    return buffer;
  }
  void release(torch::Tensor buffer) { free_.push_back(std::move(buffer)); }

 private:
  std::deque<torch::Tensor> free_;
};

class Lease {
 public:
  explicit Lease(PinnedFramePool &pool) : pool_(pool), buffer_(pool.acquire()) {}
  ~Lease() { pool_.release(buffer_); }
  Lease(const Lease &) = delete;
  Lease &operator=(const Lease &) = delete;
  torch::Tensor &buffer() { return buffer_; }

 private:
  PinnedFramePool &pool_;
  torch::Tensor buffer_;
};

using EpeReporter = std::function<void(int64_t, const torch::Tensor &)>;
using SmoothnessFn = std::function<torch::Tensor(const torch::Tensor &, const torch::Tensor &)>;

class FlowTrainer {
 public:
  FlowTrainer(torch::Device device, EpeReporter reporter)
      : device_(device), pool_(3), reporter_(std::move(reporter)),
        scale_weights_(torch::tensor({0.32, 0.08, 0.02})),
        opt_(net_->parameters(), torch::optim::AdamOptions(4e-4)) {
    net_->to(device_);
    warp_->to(device_);
    auto luma = torch::tensor({0.299f, 0.587f, 0.114f}).view({1, 3, 1, 1});
    // Edge-aware first-order smoothness of the flow, weighted by the image gradient.
    smoothness_ = [luma](const torch::Tensor &flow, const torch::Tensor &image) {
      auto gray = (image * luma).sum(1, true);
      auto wx = torch::exp(-10.0 * (gray.slice(3, 1) - gray.slice(3, 0, -1)).abs());
      auto wy = torch::exp(-10.0 * (gray.slice(2, 1) - gray.slice(2, 0, -1)).abs());
      return (wx * (flow.slice(3, 1) - flow.slice(3, 0, -1)).abs()).mean() +
             (wy * (flow.slice(2, 1) - flow.slice(2, 0, -1)).abs()).mean();
    };
  }

  void train_step(const FramePairs &pairs, bool swap_frames) {
    Lease lease(pool_);
    lease.buffer().copy_(pairs.frames);
    torch::Tensor frames, gt = pairs.flow.to(device_);
    if (swap_frames) {
      // BUG(torch-non-blocking-pageable): the swapped pair is a new host tensor in pageable memory; only the leased buffer is pinned.
      frames = torch::roll(lease.buffer(), 3, 1).to(device_, /*non_blocking=*/true);
      gt = -gt;
    } else {
      // OK(torch-non-blocking-pageable): the leased buffer is pinned.
      frames = lease.buffer().to(device_, /*non_blocking=*/true);
    }
    auto flows = net_->forward(frames);
    std::vector<torch::Tensor> per_scale;
    for (const auto &f : flows) {
      const double scale = static_cast<double>(f.size(2)) / kH;
      auto target = F::interpolate(gt, F::InterpolateFuncOptions().size(std::vector<int64_t>{f.size(2), f.size(3)}).mode(torch::kBilinear).align_corners(false)) * scale;
      // OK(torch-device-mismatch): the ground truth was moved with the frames.
      per_scale.push_back((f - target).pow(2).sum(1).sqrt().mean());
    }
    // BUG(torch-device-mismatch): scale_weights_ was made on the host in the constructor; the per-scale EPEs are on device_.
    auto supervised = (torch::stack(per_scale) * scale_weights_).sum();
    auto img1 = frames.slice(1, 0, 3), img2 = frames.slice(1, 3, 6);
    // BUG(torch-device-mismatch): the warp builds its sampling grid with torch::linspace on the host and adds the flow to it.
    auto warped = warp_->forward(img2, flows.back());
    auto photometric = (warped - img1).abs().mean();
    // BUG(torch-device-mismatch): the smoothness functor captured the luma weights on the host; the image is on device_.
    auto smooth = smoothness_(flows.back(), img1);
    auto loss = supervised + 0.1 * photometric + 0.05 * smooth;
    opt_.zero_grad();
    loss.backward();
    opt_.step();
  }

  void validate(const std::vector<FramePairs> &sequences) {
    torch::NoGradGuard no_grad;
    net_->eval();
    for (size_t seq = 0; seq < sequences.size(); ++seq) {
      auto flows = net_->forward(sequences[seq].frames.to(device_));
      auto epe = (flows.back() - sequences[seq].flow.to(device_)).pow(2).sum(1).sqrt().mean({1, 2});
      auto epe_host = epe.to(torch::kCPU, /*non_blocking=*/true);
      // BUG(torch-non-blocking-d2h-race): the reporter reads the per-pair EPE while the copy may still be in flight.
      reporter_(static_cast<int64_t>(seq), epe_host);
    }
    net_->train();
  }

  // Flow magnitude of the first pair as an 8-bit PGM image.
  void save_magnitude(const FramePairs &pair, const std::string &path) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto magnitude = net_->forward(pair.frames.to(device_)).back()[0].norm(2, 0);
    auto host = (magnitude * 16.0).clamp(0, 255).to(torch::kUInt8).to(torch::kCPU, /*non_blocking=*/true);
    torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised before the bytes are written.
    auto bytes = host.contiguous().data_ptr<uint8_t>();
    std::ofstream out(path, std::ios::binary);
    out << "P5\n" << kW << ' ' << kH << "\n255\n";
    out.write(reinterpret_cast<const char *>(bytes), kH * kW);
    net_->train();
  }

 private:
  torch::Device device_;
  PinnedFramePool pool_;
  EpeReporter reporter_;
  torch::Tensor scale_weights_;
  CoarseToFine net_;
  BackwardWarp warp_;
  SmoothnessFn smoothness_;
  torch::optim::Adam opt_;
};
}  // namespace flow

int main() {
  using namespace flow;
  torch::manual_seed(403);
  if (torch::cuda::device_count() < 1) {
    std::cerr << "no CUDA device; flow training needs one\n";
    return 1;
  }
  // OK(torch-cuda-unguarded): main returned above unless a CUDA device is visible.
  torch::Device device(torch::kCUDA, 0);
  std::map<int64_t, double> epe_table;
  FlowTrainer trainer(device, [&epe_table](int64_t seq, const torch::Tensor &epe) {
    // OK(torch-host-sync-in-loop): the reporter is handed host tensors.
    epe_table[seq] = epe.mean().item<double>();
  });
  std::vector<FramePairs> val;
  for (int i = 0; i < 6; ++i) val.push_back(synth_pairs(kBatch));
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    for (int64_t step = 0; step < 150; ++step) trainer.train_step(synth_pairs(kBatch), step % 2 == 1);
    trainer.validate(val);
    double mean = 0.0;
    for (const auto &kv : epe_table) mean += kv.second / static_cast<double>(epe_table.size());
    std::cout << "epoch " << epoch << " validation EPE " << mean << '\n';
  }
  trainer.save_magnitude(val.front(), "flow_magnitude.pgm");
  return 0;
}
