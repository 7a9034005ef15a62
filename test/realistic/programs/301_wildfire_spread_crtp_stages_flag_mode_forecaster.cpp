// Next-day wildfire spread on a 64x64 km grid: six input channels (fuel
// load, slope, wind u/v, relative humidity, today's fire mask) predict
// tomorrow's burned mask. Training, scoring and calibration are CRTP stages
// sharing one network; each stage picks its mode in an on_begin() hook that
// the base's run() calls before its loop. A forecaster service owns its own
// train/eval flag and applies it lazily, and rolls the fire forward day by
// day from a single ignition scene.
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace fire {

constexpr int64_t kChannels = 6, kGrid = 64, kFireChannel = 5;

struct Scene {
  torch::Tensor features;   // [B, 6, 64, 64]
  torch::Tensor next_mask;  // [B, 1, 64, 64]
};

torch::Device pick_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

std::vector<Scene> synth_scenes(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Scene> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto f = torch::rand({n, kChannels, kGrid, kGrid}, device);
    auto burning = (f.select(1, kFireChannel) > 0.97).to(torch::kFloat).unsqueeze(1);
    f.select(1, kFireChannel).copy_(burning.squeeze(1));
    // The front advances one cell wherever the fuel load can carry it.
    auto fuel = (f.select(1, 0).unsqueeze(1) > 0.4).to(torch::kFloat);
    out.push_back({f, torch::max_pool2d(burning, {3, 3}, {1, 1}, {1, 1}) * fuel});
  }
  return out;
}

struct SpreadNetImpl : nn::Module {
  SpreadNetImpl()
      : c1(register_module("c1", nn::Conv2d(nn::Conv2dOptions(kChannels, 32, 3).padding(1)))),
        b1(register_module("b1", nn::BatchNorm2d(32))),
        c2(register_module("c2", nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(2).dilation(2)))),
        b2(register_module("b2", nn::BatchNorm2d(32))),
        drop(register_module("drop", nn::Dropout(0.25))),
        out(register_module("out", nn::Conv2d(nn::Conv2dOptions(32, 1, 1)))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::relu(b1->forward(c1->forward(x)));
    h = torch::relu(b2->forward(c2->forward(h)));
    return out->forward(drop->forward(h));
  }
  nn::Conv2d c1;
  nn::BatchNorm2d b1;
  nn::Conv2d c2;
  nn::BatchNorm2d b2;
  nn::Dropout drop;
  nn::Conv2d out;
};
TORCH_MODULE(SpreadNet);

double mask_iou(const torch::Tensor &logits, const torch::Tensor &truth) {
  auto pred = logits > 0.0;
  auto real = truth > 0.5;
  auto inter = (pred & real).sum().to(torch::kFloat);
  auto uni = (pred | real).sum().to(torch::kFloat).clamp_min(1.0);
  // OK(torch-host-sync-in-loop): a validation read per scored scene, never per training step.
  return (inter / uni).item<double>();
}

template <typename Derived>
class Stage {
 public:
  explicit Stage(SpreadNet net) : net_(std::move(net)) {}
  double run(const std::vector<Scene> &scenes) {
    auto &self = static_cast<Derived &>(*this);
    self.on_begin();
    double sum = 0.0;
    for (const auto &s : scenes)
      sum += self.step(s);
    return sum / static_cast<double>(scenes.size());
  }
  void on_begin() {}  // stages that need a particular mode hide this

 protected:
  SpreadNet net_;
};

class FitStage : public Stage<FitStage> {
 public:
  FitStage(SpreadNet net, double lr) : Stage(std::move(net)), opt_(net_->parameters(), torch::optim::AdamOptions(lr)) {}
  void on_begin() { net_->train(); }
  double step(const Scene &s) {
    opt_.zero_grad();
    // OK(torch-eval-mode-missing): on_begin() switched the net to train() before run()'s loop.
    auto loss = F::binary_cross_entropy_with_logits(net_->forward(s.features), s.next_mask);
    loss.backward();
    opt_.step();
    // BUG(torch-host-sync-in-loop): run() calls step() once per scene, so
    // every optimisation step waits for the device to read the loss.
    return loss.item<double>();
  }

 private:
  torch::optim::Adam opt_;
};

class ScoreStage : public Stage<ScoreStage> {
 public:
  using Stage::Stage;
  void on_begin() { net_->eval(); }
  double step(const Scene &s) {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): on_begin() called eval(); guarded.
    return mask_iou(net_->forward(s.features), s.next_mask);
  }
};

// Expected calibration error of the burn probabilities over ten bins.
class ReliabilityStage : public Stage<ReliabilityStage> {
 public:
  using Stage::Stage;
  double step(const Scene &s) {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): no on_begin() of its own; the base's
    // no-op keeps the training mode that fit.run(recent) left.
    auto prob = torch::sigmoid(net_->forward(s.features)).flatten();
    auto truth = s.next_mask.flatten();
    auto bins = (prob * 10.0).floor().clamp_max(9.0).to(torch::kLong);
    auto gap = torch::zeros({}, prob.options());
    for (int64_t b = 0; b < 10; ++b) {
      auto in = bins.eq(b);
      gap += (prob.masked_select(in).sum() - truth.masked_select(in).sum()).abs();
    }
    return gap.item<double>() / static_cast<double>(prob.numel());
  }
};

// A few SGD steps on the newest region's scenes (fuel maps drift each year).
void adapt_to_region(SpreadNet &net, const std::vector<Scene> &scenes, double lr) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  for (const auto &s : scenes) {
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): score.run() left the net in eval mode;
    // the adaptation trains with dropout off and frozen batch statistics.
    auto logits = net->forward(s.features);
    auto loss = F::binary_cross_entropy_with_logits(logits, s.next_mask);
    loss.backward();
    opt.step();
  }
}

// Restores the best checkpoint, if the run produced one, for inference.
bool load_best(SpreadNet &net, const std::string &path) {
  if (!std::ifstream(path).good()) {
    std::cerr << "no checkpoint at " << path << ", keeping the last weights\n";
    return false;
  }
  torch::load(net, path);
  net->eval();
  return true;
}

// Relative error of the predicted burned area, the number the agency reports.
double burned_area_error(SpreadNet &net, const std::vector<Scene> &scenes) {
  torch::NoGradGuard no_grad;
  double err = 0.0;
  for (const auto &s : scenes) {
    // BUG(torch-eval-mode-missing): on load_best()'s early return (no
    // checkpoint) eval() never ran, and the net is still in training mode.
    auto area = (net->forward(s.features) > 0.0).sum().to(torch::kFloat);
    auto real = s.next_mask.sum().clamp_min(1.0);
    err += ((area - real).abs() / real).item<double>();
  }
  return err / static_cast<double>(scenes.size());
}

class Forecaster {
 public:
  explicit Forecaster(SpreadNet net) : net_(std::move(net)) {}
  void set_eval(bool on) { is_eval_ = on; }

  double score_archive(const std::vector<Scene> &archive) {
    apply_mode();
    torch::NoGradGuard no_grad;
    double iou = 0.0;
    for (const auto &s : archive)
      // BUG(torch-eval-mode-missing): nobody called set_eval(true): the flag
      // is still false and apply_mode() switched main()'s eval net to train.
      iou += mask_iou(net_->forward(s.features), s.next_mask);
    return iou / static_cast<double>(archive.size());
  }

  // Burned fraction per day, feeding each predicted mask back as the fire channel.
  std::vector<double> rollout(const Scene &ignition, int days) {
    apply_mode();
    auto features = ignition.features.slice(0, 0, 1).clone();
    std::vector<double> burned;
    for (int d = 0; d < days; ++d) {
      // OK(torch-eval-mode-missing): set_eval(true) ran before; apply_mode() called train(false).
      // BUG(torch-inference-without-no-grad): the daily rollout loop has no
      // guard and never backpropagates.
      auto front = net_->forward(features) > 0.0;
      features.select(1, kFireChannel).copy_(front.squeeze(1).to(torch::kFloat));
      burned.push_back(front.to(torch::kFloat).mean().item<double>());
    }
    return burned;
  }

 private:
  void apply_mode() { net_->train(!is_eval_); }
  SpreadNet net_;
  bool is_eval_ = false;
};

}  // namespace fire

int main(int argc, char **argv) {
  using namespace fire;
  torch::manual_seed(301);
  const torch::Device device = pick_device();
  auto train = synth_scenes(50, 16, device);
  auto val = synth_scenes(6, 32, device);
  auto recent = synth_scenes(8, 16, device);
  auto test = synth_scenes(6, 32, device);

  SpreadNet net;
  net->to(device);
  FitStage fit(net, 1e-3);
  ScoreStage score(net);
  ReliabilityStage reliability(net);
  for (int epoch = 0; epoch < 6; ++epoch) {
    const double loss = fit.run(train);
    std::cout << "epoch " << epoch << " loss " << loss << " val IoU " << score.run(val) << '\n';
  }
  adapt_to_region(net, recent, 5e-4);
  fit.run(recent);
  std::cout << "ECE " << reliability.run(test) << '\n';

  load_best(net, argc > 1 ? argv[1] : "spread_best.pt");
  std::cout << "burned-area error " << burned_area_error(net, test) << '\n';

  net->eval();
  Forecaster forecaster(net);
  std::cout << "archive IoU " << forecaster.score_archive(val) << '\n';
  forecaster.set_eval(true);
  for (double f : forecaster.rollout(test.front(), 7))
    std::cout << "burned fraction " << f << '\n';
  return 0;
}
