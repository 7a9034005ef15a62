// Stereo depth for a warehouse robot's rectified camera pair: a shared
// feature tower at 1/4 resolution, a correlation cost volume over candidate
// disparities, a small refinement CNN and a soft-argmin regression. Training
// pairs are rendered on the fly (textured planes, right view warped from the
// left by the plane's disparity); the evaluation scenes carry lidar ground
// truth only when the lidar was in range, hence the std::optional. The rig
// has two cards: training on the first, evaluation on the second, chosen
// through a Placement policy object.
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kH = 64, kW = 128, kMaxDisp = 24, kBatch = 8;
// BUG(torch-device-index-unchecked): the evaluation card is ordinal 1 of the
// rig, spelled into a "cuda:N" string; nothing compares it with
// device_count(), and a one-GPU job sees no cuda:1.
constexpr int kEvalGpu = 1;

struct StereoBatch {
  torch::Tensor left, right, disparity;  // [N,3,H,W], [N,3,H,W], [N,H,W] pixels
};

struct EvalSample {
  torch::Tensor left, right;
  std::optional<torch::Tensor> gt;  // lidar disparity, when the lidar saw the scene
};

// Textured planes with disparity in [2, 22] px; right(x) = left(x + d),
// warped with nearest-pixel lookups (good enough for a synthetic prior).
StereoBatch render_pairs(int64_t n) {
  auto ys = torch::linspace(0, 1, kH).view({1, kH, 1});
  auto xs = torch::arange(kW, torch::kFloat).view({1, 1, kW});
  auto c = torch::rand({n, 3, 1, 1});
  auto disp = 2 + 10 * c.select(1, 0) + 5 * c.select(1, 1) * xs / (kW - 1) + 5 * c.select(1, 2) * ys;  // [n,H,W]
  auto left = torch::rand({n, 3, kH / 4, kW / 4}).repeat_interleave(4, 2).repeat_interleave(4, 3) +
              0.05 * torch::randn({n, 3, kH, kW});
  auto src = (xs + disp).round().clamp(0, kW - 1).to(torch::kLong).unsqueeze(1).expand({n, 3, kH, kW});
  auto right = left.gather(3, src);
  return {left, right, disp};
}

torch::Tensor correlation(const torch::Tensor &fl, const torch::Tensor &fr, int64_t max_disp) {
  const int64_t w = fl.size(3);
  std::vector<torch::Tensor> slices;
  for (int64_t d = 0; d < max_disp; ++d) {
    auto prod = (fl.narrow(3, d, w - d) * fr.narrow(3, 0, w - d)).mean(1, true);
    slices.push_back(F::pad(prod, F::PadFuncOptions({d, 0, 0, 0})));
  }
  return torch::cat(slices, 1);
}

struct StereoNetImpl : torch::nn::Cloneable<StereoNetImpl> {
  StereoNetImpl() { reset(); }

  void reset() override {
    tower = register_module(
        "tower", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)),
                                       torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                       torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).stride(2).padding(1)),
                                       torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                       torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1))));
    refine = register_module(
        "refine", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(kMaxDisp / 4, 32, 3).padding(1)),
                                        torch::nn::ReLU(),
                                        torch::nn::Conv2d(torch::nn::Conv2dOptions(32, kMaxDisp / 4, 3).padding(1))));
  }

  // -> disparity [N,H,W] in full-resolution pixels
  torch::Tensor forward(const torch::Tensor &left, const torch::Tensor &right) {
    auto prob = refine->forward(correlation(tower->forward(left), tower->forward(right), kMaxDisp / 4)).softmax(1);
    // OK(torch-device-mismatch): the candidate disparities take prob's options.
    auto candidates = torch::arange(kMaxDisp / 4, prob.options()).view({1, -1, 1, 1});
    auto disp = (prob * candidates).sum(1, true) * 4.0;
    return F::interpolate(disp, F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{kH, kW})
                                    .mode(torch::kBilinear)
                                    .align_corners(false))
        .squeeze(1);
  }

  torch::nn::Sequential tower{nullptr}, refine{nullptr};
};
TORCH_MODULE(StereoNet);

// Where a stage runs. The serving stack adds round-robin placements; the
// trainer only needs a fixed card.
class Placement {
 public:
  virtual ~Placement() = default;
  virtual torch::Device device() const = 0;
};

class FixedPlacement final : public Placement {
 public:
  explicit FixedPlacement(torch::Device device) : device_(device) {}
  torch::Device device() const override { return device_; }

 private:
  torch::Device device_;
};

template <typename Batch>
void to_device(Batch &b, torch::Device device) {
  // OK(torch-tensor-to-discarded): assigned back.
  b.left = b.left.to(device);
  // BUG(torch-tensor-to-discarded): the moved right view is dropped.
  b.right.to(device);
  b.disparity = b.disparity.to(device);
}

void train(StereoNet &net, torch::Device device, int64_t steps) {
  net->to(device);
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  for (int64_t step = 1; step <= steps; ++step) {
    auto batch = render_pairs(kBatch);
    to_device(batch, device);
    // BUG(torch-device-mismatch): to_device() lost the right view's copy, so
    // batch.right is still the renderer's CPU tensor while net is on device.
    auto pred = net->forward(batch.left, batch.right);
    auto loss = F::smooth_l1_loss(pred, batch.disparity);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0)
      std::cout << "step " << step << " smooth-l1 " << loss.item<double>() << "\n";
  }
}

std::vector<EvalSample> make_eval_set(int64_t scenes) {
  std::vector<EvalSample> samples;
  for (int64_t i = 0; i < scenes; ++i) {
    auto pair = render_pairs(1);
    EvalSample s{pair.left, pair.right, std::nullopt};
    if (i % 4 != 3)  // the lidar misses one scene in four
      s.gt = pair.disparity;
    samples.push_back(s);
  }
  return samples;
}

// End-point error on the scenes that have lidar ground truth.
double evaluate(const StereoNet &net, const Placement &where, int64_t scenes) {
  torch::NoGradGuard no_grad;
  auto replica = std::dynamic_pointer_cast<StereoNetImpl>(net->clone(where.device()));
  replica->eval();
  double epe = 0.0;
  int64_t scored = 0;
  for (const auto &s : make_eval_set(scenes)) {
    // OK(torch-device-mismatch): both views follow the placement.
    auto pred = replica->forward(s.left.to(where.device()), s.right.to(where.device()));
    if (!s.gt)
      continue;
    // BUG(torch-device-mismatch): the lidar disparity stays on the CPU while
    // pred is on the placement's card.
    epe += (pred - *s.gt).abs().mean().item<double>();
    ++scored;
  }
  return scored ? epe / scored : 0.0;
}

// Times the correlation layer alone, for the profiler.
void profile_correlation() {
  // BUG(torch-cuda-unguarded): --profile runs before main() asks for a GPU.
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  auto fl = torch::randn({1, 32, kH, kW}, opts);
  auto fr = torch::randn_like(fl);
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i)
    correlation(fl, fr, kMaxDisp);
  torch::cuda::synchronize();
  const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
  std::cout << "correlation " << took.count() / 50 << " ms\n";
}

void run_on_gpus(int64_t steps) {
  // OK(torch-cuda-unguarded, torch-device-index-unchecked): main() calls this
  // only after is_available(), and ordinal 0 always exists.
  const torch::Device train_dev(torch::kCUDA, 0);
  StereoNet net;
  train(net, train_dev, steps);
  const torch::Device eval_dev(std::string("cuda:") + std::to_string(kEvalGpu));
  const FixedPlacement placement(eval_dev);
  std::cout << "EPE " << evaluate(net, placement, 64) << " px on " << eval_dev << "\n";
  torch::save(net, "stereo.pt");
}

int main(int argc, char **argv) {
  torch::manual_seed(242);
  bool profile = false;
  int64_t steps = 1500;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--profile")
      profile = true;
    else if (arg.rfind("--steps=", 0) == 0)
      steps = std::stoll(arg.substr(8));
  }
  if (profile)
    profile_correlation();
  if (torch::cuda::is_available()) {
    run_on_gpus(steps);
  } else {
    std::cout << "no GPU: CPU smoke run\n";
    StereoNet net;
    train(net, torch::Device(torch::kCPU), 20);
  }
  return 0;
}
