// 2D human pose estimation: a heatmap network regresses 16 joints from 64x64
// crops, and an adversarial pose prior (a small MLP discriminator over joint
// coordinates) pushes the soft-argmax poses towards plausible skeletons.
// After training, the network adapts to each test video with a temporal
// consistency loss before the final PCK is measured.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace pose {

constexpr int64_t kJoints = 16, kCrop = 64, kHeat = 16;
constexpr double kSigma = 1.5;

struct PoseBatch {
  torch::Tensor images;     // [B, 3, 64, 64]
  torch::Tensor keypoints;  // [B, J, 2] in heatmap pixels
};

// Gaussian target heatmaps around each joint: [B, J, 2] -> [B, J, H, W].
torch::Tensor render_heatmaps(const torch::Tensor &kp) {
  auto xs = torch::arange(kHeat, torch::kFloat).view({1, 1, 1, kHeat});
  auto ys = torch::arange(kHeat, torch::kFloat).view({1, 1, kHeat, 1});
  auto dx = xs - kp.select(-1, 0).unsqueeze(-1).unsqueeze(-1);
  auto dy = ys - kp.select(-1, 1).unsqueeze(-1).unsqueeze(-1);
  return torch::exp(-(dx * dx + dy * dy) / (2 * kSigma * kSigma));
}

struct PoseNetImpl : nn::Module {
  PoseNetImpl()
      : body(register_module("body", nn::Sequential(
                                         nn::Conv2d(nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)),
                                         nn::BatchNorm2d(32), nn::ReLU(),
                                         nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)),
                                         nn::BatchNorm2d(64), nn::ReLU(), nn::Conv2d(64, kJoints, 1)))) {}
  // -> heatmaps [B, J, 16, 16], soft-argmax coordinates [B, J, 2]
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor &img) {
    auto heat = body->forward(img);
    auto prob = torch::softmax(heat.flatten(2), -1).view_as(heat);
    // OK(torch-device-mismatch): the grid takes the heatmaps' options.
    auto grid = torch::arange(kHeat, heat.options());
    auto x = (prob.sum(2) * grid).sum(-1), y = (prob.sum(3) * grid).sum(-1);
    return {heat, torch::stack({x, y}, -1)};
  }
  nn::Sequential body;
};
TORCH_MODULE(PoseNet);

struct PosePriorImpl : nn::Module {
  PosePriorImpl()
      : mlp(register_module("mlp", nn::Sequential(nn::Linear(kJoints * 2, 128), nn::LeakyReLU(),
                                                  nn::Linear(128, 64), nn::LeakyReLU(), nn::Linear(64, 1)))) {}
  torch::Tensor forward(const torch::Tensor &coords) { return mlp->forward(coords.flatten(1) / kHeat); }
  nn::Sequential mlp;
};
TORCH_MODULE(PosePrior);

struct Adversary {
  PosePrior disc;
  torch::optim::Adam opt;
};

Adversary make_adversary(double lr, const torch::Device &device) {
  PosePrior disc;
  disc->to(device);
  torch::optim::Adam opt(disc->parameters(), torch::optim::AdamOptions(lr).betas({0.5, 0.999}));
  return {disc, std::move(opt)};
}

// Unpaired motion-capture poses: the "real" samples of the adversarial prior.
class MocapBank {
 public:
  explicit MocapBank(int64_t n) : poses_(torch::rand({n, kJoints, 2}) * (kHeat - 1)) {}
  torch::Tensor sample(int64_t n) const { return poses_.index_select(0, torch::randint(poses_.size(0), {n})); }

 private:
  torch::Tensor poses_;
};

void clear(torch::optim::Optimizer &opt) { opt.zero_grad(); }

struct StepOutputs {
  torch::Tensor pred;  // [B, J, 2] on the training device
  torch::Tensor gt;    // [B, J, 2] on the training device
};

class PoseCallback {
 public:
  virtual ~PoseCallback() = default;
  virtual void on_step(const StepOutputs &out) = 0;
};

// Training PCK@0.5 (fraction of joints within half a heatmap cell of 2 px).
class PckMeter : public PoseCallback {
 public:
  void on_step(const StepOutputs &out) override {
    // BUG(torch-host-sync-in-loop): the trainer runs this hook on every step;
    // copying the device predictions to the host stalls the pipeline.
    auto dist = (out.pred - out.gt).norm(2, -1).to(torch::kCPU);
    hits_ += (dist < 2.0).sum().item<int64_t>();
    seen_ += dist.numel();
  }
  double value() const { return seen_ ? static_cast<double>(hits_) / static_cast<double>(seen_) : 0.0; }

 private:
  int64_t hits_ = 0, seen_ = 0;
};

std::map<std::string, std::vector<torch::Tensor>> train_adversarial(
    PoseNet &gen, Adversary &adv, const MocapBank &mocap, const std::vector<PoseBatch> &data,
    const torch::Device &device, PoseCallback &hook) {
  torch::optim::AdamW g_opt(gen->parameters(), torch::optim::AdamWOptions(1e-3));
  std::map<std::string, std::vector<torch::Tensor>> curves;
  std::pair<torch::Tensor, torch::Tensor> totals{torch::zeros({}, device), torch::zeros({}, device)};
  auto &[d_total, g_total] = totals;
  gen->train();
  for (const auto &b : data) {
    auto img = b.images.to(device), kp = b.keypoints.to(device);
    // BUG(torch-device-mismatch): render_heatmaps() builds its grid on the
    // CPU and subtracts the joints, which this loop moved to the device.
    auto target = render_heatmaps(kp);
    auto [heat, coords] = gen->forward(img);

    // BUG(torch-device-mismatch): make_adversary() moved the prior to the
    // device; the mocap poses that MocapBank::sample() draws stay on the CPU.
    auto real_logit = adv.disc->forward(mocap.sample(kp.size(0)));
    // OK(torch-device-mismatch): the prior and the predicted poses are both on the device.
    auto fake_logit = adv.disc->forward(coords.detach());
    auto d_loss = F::binary_cross_entropy_with_logits(real_logit, torch::ones_like(real_logit)) +
                  F::binary_cross_entropy_with_logits(fake_logit, torch::zeros_like(fake_logit));
    clear(adv.opt);
    d_loss.backward();
    // OK(torch-missing-zero-grad): the generator's zero_grad() runs before the next backward.
    adv.opt.step();

    g_opt.zero_grad();
    auto hm_loss = F::mse_loss(heat, target);
    auto adv_logit = adv.disc->forward(coords);
    auto g_loss = hm_loss + 0.01 * F::binary_cross_entropy_with_logits(adv_logit, torch::ones_like(adv_logit));
    g_loss.backward();
    // OK(torch-missing-zero-grad): clear(adv.opt) resets before the next discriminator backward.
    g_opt.step();

    // OK(torch-loss-accumulation-graph): detached.
    d_total += d_loss.detach();
    // BUG(torch-loss-accumulation-graph): g_total names a part of the pair
    // declared before the loop; it keeps every step's generator graph.
    g_total += g_loss;
    // BUG(torch-loss-accumulation-graph): the curve vectors live in the map
    // returned to the caller, and each element keeps its step's graph.
    curves["heatmap"].push_back(hm_loss);
    hook.on_step(StepOutputs{coords.detach(), kp});
  }
  std::cout << "  D " << d_total.item<double>() / static_cast<double>(data.size()) << " G "
            << g_total.item<double>() / static_cast<double>(data.size()) << '\n';
  return curves;
}

// Test-time adaptation: neighbouring frames of a clip should agree.
void adapt_to_videos(PoseNet &gen, const std::vector<std::pair<PoseBatch, bool>> &clips, const torch::Device &device) {
  torch::optim::SGD sgd(gen->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  std::function<void()> end_of_video = [&sgd]() { sgd.zero_grad(); };
  gen->train();
  for (const auto &[clip, last_of_video] : clips) {
    auto coords = std::get<1>(gen->forward(clip.images.to(device)));
    auto loss = (coords.slice(0, 1) - coords.slice(0, 0, -1)).pow(2).mean();
    loss.backward();
    // BUG(torch-missing-zero-grad): the gradients are reset only at the end
    // of a video; the clips in between step with the sum of all earlier ones.
    sgd.step();
    if (last_of_video)
      end_of_video();
  }
}

double evaluate_pck(PoseNet &gen, const std::vector<PoseBatch> &data, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  gen->eval();
  int64_t hits = 0, seen = 0;
  for (const auto &b : data) {
    auto coords = std::get<1>(gen->forward(b.images.to(device))).cpu();
    hits += ((coords - b.keypoints).norm(2, -1) < 2.0).sum().item<int64_t>();
    seen += coords.size(0) * kJoints;
  }
  return static_cast<double>(hits) / static_cast<double>(seen);
}

std::vector<PoseBatch> synth_crops(int n, int64_t batch) {
  std::vector<PoseBatch> out;
  for (int i = 0; i < n; ++i)
    out.push_back({torch::randn({batch, 3, kCrop, kCrop}), torch::rand({batch, kJoints, 2}) * (kHeat - 1)});
  return out;
}

}  // namespace pose

int main() {
  torch::manual_seed(326);
  // OK(torch-cuda-unguarded): CUDA only when is_available() says so.
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto train = pose::synth_crops(60, 32), val = pose::synth_crops(8, 64);

  pose::PoseNet gen;
  gen->to(device);
  pose::Adversary adv = pose::make_adversary(2e-4, device);
  const pose::MocapBank mocap(20000);
  std::unique_ptr<pose::PoseCallback> pck = std::make_unique<pose::PckMeter>();
  for (int epoch = 0; epoch < 4; ++epoch) {
    auto curves = pose::train_adversarial(gen, adv, mocap, train, device, *pck);
    std::cout << "epoch " << epoch << " steps " << curves["heatmap"].size() << " val PCK "
              << pose::evaluate_pck(gen, val, device) << '\n';
  }

  std::vector<std::pair<pose::PoseBatch, bool>> clips;
  for (int v = 0; v < 3; ++v)
    for (int c = 0; c < 5; ++c)
      clips.emplace_back(pose::PoseBatch{torch::randn({8, 3, pose::kCrop, pose::kCrop}), torch::zeros({8, pose::kJoints, 2})},
                         c == 4);
  pose::adapt_to_videos(gen, clips, device);
  std::cout << "PCK after adaptation " << pose::evaluate_pck(gen, val, device) << '\n';
}
