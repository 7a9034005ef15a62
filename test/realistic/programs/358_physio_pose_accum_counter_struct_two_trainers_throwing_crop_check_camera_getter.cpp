// Pose estimation for a physiotherapy app: a small conv net predicts 17
// COCO keypoint heatmaps (32x24) and sub-pixel offsets from 128x96 person
// crops. Two trainers share the network and an AccumCounter struct for
// gradient accumulation (micro-batches per step from their constructors):
// the heatmap trainer runs in bfloat16 autocast, the offset refiner in
// float32. Hard poses from the clinic are fine-tuned in float16 (their T4
// cards have no bfloat16), and the session camera's crops are scored live.
// LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <vector>

namespace nn = torch::nn;

#if TORCH_VERSION_MAJOR >= 2
#define POSE_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define POSE_AUTOCAST_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#define POSE_AUTOCAST_GET_DTYPE() at::autocast::get_autocast_dtype(at::kCUDA)
#else
#define POSE_AUTOCAST(on) at::autocast::set_enabled(on)
#define POSE_AUTOCAST_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#define POSE_AUTOCAST_GET_DTYPE() at::autocast::get_autocast_gpu_dtype()
#endif

constexpr int64_t kJoints = 17, kCropH = 128, kCropW = 96, kHeatH = 32, kHeatW = 24;

struct PoseNetImpl : nn::Module {
  PoseNetImpl()
      : backbone(register_module("backbone", nn::Sequential(
                     nn::Conv2d(nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                     nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
                     nn::Conv2d(nn::Conv2dOptions(64, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU()))),
        heat_head(register_module("heat_head", nn::Conv2d(64, kJoints, 1))),
        offset_head(register_module("offset_head", nn::Conv2d(64, 2 * kJoints, 1))) {}
  // crops [B, 3, 128, 96] -> heatmaps [B, 17, 32, 24]
  torch::Tensor forward(const torch::Tensor& crops) { return heat_head(backbone->forward(crops)); }
  // crops -> (dx, dy) per joint and heatmap cell [B, 34, 32, 24]
  torch::Tensor offsets(const torch::Tensor& crops) { return offset_head(backbone->forward(crops)); }
  nn::Sequential backbone;
  nn::Conv2d heat_head, offset_head;
};
TORCH_MODULE(PoseNet);

struct PoseBatch {
  torch::Tensor crops, heatmaps, visible, offsets;
};

PoseBatch make_batch(int64_t n, torch::Device device) {
  return {torch::randn({n, 3, kCropH, kCropW}, device), torch::rand({n, kJoints, kHeatH, kHeatW}, device),
          torch::randint(0, 2, {n, kJoints}, device).to(torch::kFloat),
          0.5 * torch::randn({n, 2 * kJoints, kHeatH, kHeatW}, device)};
}

// Micro-batches per optimizer step.
struct AccumCounter {
  explicit AccumCounter(int64_t n) : every(n) {}
  bool tick() {
    if (++micro < every) return false;
    micro = 0;
    return true;
  }
  int64_t every;
  int64_t micro = 0;
};

// Heatmap MSE over the joints annotated as visible.
torch::Tensor visible_heatmap_loss(PoseNet& net, const PoseBatch& b) {
  auto per_joint = (net->forward(b.crops) - b.heatmaps).pow(2).mean({2, 3});
  return (per_joint * b.visible).mean();
}

class HeatmapTrainer {
 public:
  HeatmapTrainer(PoseNet net, int64_t accum_steps, double lr)
      : net_(std::move(net)), opt_(net_->parameters(), torch::optim::AdamOptions(lr)), accum_(accum_steps) {}

  void epoch(const std::vector<PoseBatch>& data) {
    net_->train();
    opt_.zero_grad();
    const auto saved_dtype = POSE_AUTOCAST_GET_DTYPE();
    POSE_AUTOCAST_DTYPE(at::kBFloat16);
    for (const auto& b : data) {
      POSE_AUTOCAST(true);
      auto loss = visible_heatmap_loss(net_, b);
      POSE_AUTOCAST(false);
      // OK(torch-autocast-region, torch-grad-accumulation-unscaled): a
      // bfloat16 region, and the loss is divided by the accumulation.
      (loss / static_cast<double>(accum_.every)).backward();
      if (accum_.tick()) {
        opt_.step();
        opt_.zero_grad();
      }
    }
    POSE_AUTOCAST_DTYPE(saved_dtype);
  }

 private:
  PoseNet net_;
  torch::optim::Adam opt_;
  AccumCounter accum_;
};

class OffsetRefiner {
 public:
  OffsetRefiner(PoseNet net, int64_t accum_steps, double lr)
      : net_(std::move(net)), opt_(net_->parameters(), torch::optim::SGDOptions(lr).momentum(0.9)), accum_(accum_steps) {}

  void epoch(const std::vector<PoseBatch>& data) {
    net_->train();
    opt_.zero_grad();
    for (const auto& b : data) {
      auto loss = torch::smooth_l1_loss(net_->offsets(b.crops), b.offsets);
      // BUG(torch-grad-accumulation-unscaled): accum_.tick() steps once per
      // accum_.every micro-batches; unlike HeatmapTrainer, the mean loss is
      // not divided.
      loss.backward();
      if (accum_.tick()) {
        opt_.step();
        opt_.zero_grad();
      }
    }
  }

 private:
  PoseNet net_;
  torch::optim::SGD opt_;
  AccumCounter accum_;
};

namespace adapt {
// Poses the clinic flagged (deep squats, occluded knees), in float16.
void fine_tune_hard_poses(PoseNet& net, const std::vector<PoseBatch>& hard, int64_t epochs) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-5));
  net->train();
  POSE_AUTOCAST_DTYPE(at::kHalf);
  for (int64_t e = 0; e < epochs; ++e)
    for (const auto& b : hard) {
      opt.zero_grad();
      POSE_AUTOCAST(true);
      auto loss = visible_heatmap_loss(net, b);
      POSE_AUTOCAST(false);
      // BUG(torch-autocast-region): the helper's mean loss comes from an
      // explicitly float16 region and reaches backward() with no loss scale.
      loss.backward();
      opt.step();
    }
}
}  // namespace adapt

// The session camera: person crops of the latest frame, written by the
// detector into one buffer.
class Camera {
 public:
  explicit Camera(int64_t people) : crops_(torch::zeros({people, 3, kCropH, kCropW})) {}
  void grab() { crops_.uniform_(-1.0, 1.0); }
  const torch::Tensor& crops() const { return crops_; }
 private:
  torch::Tensor crops_;
};

void check_crops(const torch::Tensor& crops) {
  if (crops.numel() == 0 || crops.size(2) < kCropH / 2)
    throw std::invalid_argument("person crop too small for the pose net");
}

torch::Tensor fetch_heatmaps(const torch::Tensor& heat) { return heat.to(torch::kCPU, /*non_blocking=*/true); }

struct Keypoint {
  int64_t x, y;
  float score;
};

std::vector<Keypoint> peaks(const torch::TensorAccessor<float, 4>& acc) {
  std::vector<Keypoint> joints;
  for (int64_t n = 0; n < acc.size(0); ++n)
    for (int64_t k = 0; k < kJoints; ++k) {
      Keypoint best{0, 0, -1e9f};
      for (int64_t y = 0; y < kHeatH; ++y)
        for (int64_t x = 0; x < kHeatW; ++x)
          if (acc[n][k][y][x] > best.score) best = {x, y, acc[n][k][y][x]};
      joints.push_back(best);
    }
  return joints;
}

std::vector<Keypoint> estimate_poses(PoseNet& net, const Camera& cam, torch::Device device) {
  torch::NoGradGuard no_grad;
  // BUG(torch-non-blocking-pageable): the camera buffer is a plain
  // torch::zeros from its constructor: pageable, so the copy is synchronous.
  auto crops = cam.crops().to(device, /*non_blocking=*/true);
  // BUG(torch-autocast-region): check_crops() throws on a tiny crop and the
  // exception leaves the thread in autocast.
  POSE_AUTOCAST(true);
  check_crops(crops);
  auto heat = net->forward(crops).to(torch::kFloat);
  POSE_AUTOCAST(false);
  auto host = fetch_heatmaps(heat);
  // BUG(torch-non-blocking-d2h-race): fetch_heatmaps() only queued the copy;
  // the peaks are read before any synchronisation.
  return peaks(host.accessor<float, 4>());
}

// The therapist's preview of one person, with the crop checked up front.
std::vector<Keypoint> preview_pose(PoseNet& net, const torch::Tensor& crop) {
  torch::NoGradGuard no_grad;
  check_crops(crop);
  // OK(torch-autocast-region): nothing between the switches can leave the function.
  POSE_AUTOCAST(true);
  auto heat = net->forward(crop).to(torch::kFloat);
  POSE_AUTOCAST(false);
  auto host = fetch_heatmaps(heat);
  if (torch::cuda::is_available()) torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised above.
  return peaks(host.accessor<float, 4>());
}

int main() {
  torch::manual_seed(358);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  PoseNet net;
  net->to(device);
  std::vector<PoseBatch> train, hard;
  for (int i = 0; i < 48; ++i) train.push_back(make_batch(16, device));
  for (int i = 0; i < 8; ++i) hard.push_back(make_batch(8, device));

  HeatmapTrainer heat_trainer(net, 4, 1e-3);
  OffsetRefiner refiner(net, 8, 5e-4);
  for (int epoch = 0; epoch < 3; ++epoch) {
    heat_trainer.epoch(train);
    refiner.epoch(train);
  }
  adapt::fine_tune_hard_poses(net, hard, 2);

  net->eval();
  Camera cam(3);
  for (int frame = 0; frame < 5; ++frame) {
    cam.grab();
    auto joints = estimate_poses(net, cam, device);
    std::cout << "frame " << frame << ": " << joints.size() << " joints, nose score " << joints.front().score << '\n';
  }
  auto preview = preview_pose(net, make_batch(1, device).crops);
  std::cout << "preview nose at (" << preview.front().x << ", " << preview.front().y << ")\n";
}
