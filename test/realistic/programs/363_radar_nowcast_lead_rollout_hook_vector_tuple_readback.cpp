// Precipitation nowcasting from weather radar: a convolutional encoder-decoder
// maps the last four reflectivity scans to the next one and is rolled out
// autoregressively over six lead times. Training updates per lead time and
// tracks a critical success index; a fine-tune on the most recent scans
// reports to hooks the application registers. The nowcast service reads its
// rain-rate and exceedance-probability fields back for the tile writer.
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <tuple>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace nowcast {

constexpr int64_t kPast = 4, kLeads = 6, kH = 64, kW = 64;

struct NowcastNetImpl : nn::Module {
  NowcastNetImpl()
      : enc(register_module("enc", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kPast, 32, 3).padding(1)), nn::ReLU(),
                                                  nn::Conv2d(nn::Conv2dOptions(32, 32, 3).stride(2).padding(1)), nn::ReLU()))),
        dec(register_module("dec", nn::Sequential(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(32, 16, 4).stride(2).padding(1)),
                                                  nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(16, 1, 3).padding(1))))) {}
  torch::Tensor forward(const torch::Tensor &past) { return dec->forward(enc->forward(past)); }  // B x 1 x H x W
  nn::Sequential enc, dec;
};
TORCH_MODULE(NowcastNet);

// Advected Gaussian rain cells, mm/h: B x frames x H x W.
torch::Tensor synth_radar(int64_t b, int64_t frames) {
  auto ys = torch::arange(kH, torch::kFloat).view({1, 1, kH, 1});
  auto xs = torch::arange(kW, torch::kFloat).view({1, 1, 1, kW});
  auto t = torch::arange(frames, torch::kFloat).view({1, frames, 1, 1});
  auto dy = ys - (torch::rand({b, 1, 1, 1}) * kH + torch::randn({b, 1, 1, 1}) * t);
  auto dx = xs - (torch::rand({b, 1, 1, 1}) * kW + torch::randn({b, 1, 1, 1}) * t);
  return 10.0 * torch::exp(-(dy * dy + dx * dx) / 50.0);
}

// Hits, misses and false alarms above a rain-rate threshold.
class CsiTracker {
 public:
  explicit CsiTracker(double threshold) : threshold_(threshold) {}
  void observe(const torch::Tensor &pred, const torch::Tensor &target) {
    auto p = pred.detach() > threshold_, t = target > threshold_;
    // BUG(torch-host-sync-in-loop): observe() runs on every lead-time update and pulls the counts to the host.
    auto counts = torch::stack({(p & t).sum(), (~p & t).sum(), (p & ~t).sum()}).cpu();
    auto c = counts.accessor<int64_t, 1>();
    hits_ += c[0], misses_ += c[1], false_alarms_ += c[2];
  }
  double csi() const { return static_cast<double>(hits_) / static_cast<double>(std::max<int64_t>(hits_ + misses_ + false_alarms_, 1)); }

 private:
  double threshold_;
  int64_t hits_ = 0, misses_ = 0, false_alarms_ = 0;
};

struct RolloutStats {
  std::vector<torch::Tensor> per_lead;
};

void train_rollout(NowcastNet &net, CsiTracker &csi, torch::Device device, int64_t iters) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-4));
  RolloutStats stats;
  for (int64_t lead = 0; lead < kLeads; ++lead) stats.per_lead.push_back(torch::zeros({}, torch::TensorOptions().device(device)));
  for (int64_t it = 0; it < iters; ++it) {
    auto seq = synth_radar(8, kPast + kLeads).to(device);
    auto window = seq.narrow(1, 0, kPast);
    opt.zero_grad();
    for (int64_t lead = 0; lead < kLeads; ++lead) {
      auto pred = net->forward(window);
      auto target = seq.narrow(1, kPast + lead, 1);
      auto loss = F::mse_loss(pred, target) + 0.1 * F::l1_loss(pred, target);
      loss.backward();
      // BUG(torch-missing-zero-grad): gradients are cleared once per sequence; each lead's update re-applies the earlier leads' gradients.
      opt.step();
      // BUG(torch-loss-accumulation-graph): the lead's loss keeps its graph in the per-lead sums.
      stats.per_lead[static_cast<size_t>(lead)] += loss;
      csi.observe(pred, target);
      window = torch::cat({window.narrow(1, 1, kPast - 1), pred.detach()}, 1);
    }
  }
  for (int64_t lead = 0; lead < kLeads; ++lead)
    std::cout << "lead " << (lead + 1) * 5 << " min: mse " << stats.per_lead[static_cast<size_t>(lead)].item<double>() / iters << '\n';
}

class Finetuner {
 public:
  using Hook = std::function<void(const torch::Tensor &)>;
  explicit Finetuner(int64_t steps) : steps_(steps) {}
  void add_hook(Hook hook) { hooks_.push_back(std::move(hook)); }

  double run(NowcastNet &net, const torch::Tensor &recent, torch::Device device) {
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(5e-5));
    auto scans = recent.to(device);
    auto loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
    for (int64_t step = 0; step < steps_; ++step) {
      for (auto &p : net->parameters())
        if (p.grad().defined()) p.grad().zero_();
      const int64_t start = step % (scans.size(1) - kPast);
      auto pred = net->forward(scans.narrow(1, start, kPast));
      auto loss = F::mse_loss(pred, scans.narrow(1, start + kPast, 1));
      loss.backward();
      // OK(torch-missing-zero-grad): every defined gradient is zeroed at the top of the next step.
      opt.step();
      for (const auto &hook : hooks_) hook(loss);
      {
        torch::NoGradGuard no_grad;
        // OK(torch-loss-accumulation-graph): added under a NoGradGuard; the sum records no graph.
        loss_sum += loss;
      }
      if (step % 10 != 0) continue;
      // OK(torch-host-sync-in-loop): only every 10th step gets past the continue.
      std::cout << "finetune " << step << " loss " << loss.item<double>() << '\n';
    }
    return loss_sum.item<double>() / static_cast<double>(steps_);
  }

 private:
  int64_t steps_;
  std::vector<Hook> hooks_;
};

class NowcastService {
 public:
  NowcastService(NowcastNet net, torch::Device device)
      : net_(std::move(net)), device_(device), rain_(torch::zeros({1, 1, kH, kW}, torch::TensorOptions().device(device))),
        prob_(torch::zeros({1, 1, kH, kW}, torch::TensorOptions().device(device))) {
    net_->to(device_);
  }
  void predict(const torch::Tensor &past) {
    c10::InferenceMode guard;
    rain_ = net_->forward(past.to(device_)).clamp_min(0.0);
    prob_ = torch::sigmoid((rain_ - 1.0) * 4.0);
  }
  std::tuple<torch::Tensor, torch::Tensor> start_readback() const {
    return {rain_.to(torch::kCPU, /*non_blocking=*/true), prob_.to(torch::kCPU, /*non_blocking=*/true)};
  }
  torch::Device device() const { return device_; }

 private:
  NowcastNet net_;
  torch::Device device_;
  torch::Tensor rain_, prob_;
};

struct TileWriter {
  double rain_total = 0.0, prob_max = 0.0;
  void write_tile(const torch::Tensor &rain) {
    auto a = rain.accessor<float, 4>();
    for (int64_t y = 0; y < kH; ++y)
      for (int64_t x = 0; x < kW; ++x) rain_total += a[0][0][y][x];
  }
  void write_probability(const torch::Tensor &prob) { prob_max = std::max<double>(prob_max, *std::max_element(prob.data_ptr<float>(), prob.data_ptr<float>() + prob.numel())); }
};

void publish_cycle(NowcastService &svc, const std::vector<torch::Tensor> &scans, TileWriter &writer) {
  std::vector<torch::Tensor> archive;
  for (const auto &past : scans) {
    svc.predict(past);
    auto [rain_h, prob_h] = svc.start_readback();
    // OK(torch-non-blocking-d2h-race): queued only; read after the stream sync below.
    archive.push_back(prob_h);
    // BUG(torch-non-blocking-d2h-race): the tile writer reads the rain field before its copy has landed.
    writer.write_tile(rain_h);
  }
  if (svc.device().is_cuda()) c10::cuda::getCurrentCUDAStream().synchronize();
  // OK(torch-non-blocking-d2h-race): the stream was synchronised after the last copy.
  for (const auto &p : archive) writer.write_probability(p);
}

// Latency of one nowcast on the GPU; main only calls it when CUDA is present.
double gpu_latency_ms(NowcastService &svc, const torch::Tensor &past, int reps) {
  double total = 0.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    svc.predict(past);
    // OK(torch-host-sync-in-loop): a timing loop of inference; nothing trains here.
    torch::cuda::synchronize();
    total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return total / reps;
}

}  // namespace nowcast

int main() {
  using namespace nowcast;
  torch::manual_seed(363);
  // OK(torch-cuda-unguarded): CUDA only when available.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  NowcastNet net;
  net->to(device);
  CsiTracker csi(1.0);
  train_rollout(net, csi, device, 40);
  std::cout << "CSI@1mm/h " << csi.csi() << '\n';

  Finetuner tuner(60);
  auto hook_total = torch::zeros({}, torch::TensorOptions().device(device));
  int64_t hook_calls = 0;
  tuner.add_hook([&hook_total, &hook_calls](const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the hook keeps every fine-tune step's loss graph in hook_total.
    hook_total += loss;
    ++hook_calls;
  });
  const double mean = tuner.run(net, synth_radar(1, 24), device);
  std::cout << "finetune mean " << mean << " hook mean " << hook_total.item<double>() / hook_calls << '\n';

  NowcastService svc(net, device);
  std::vector<torch::Tensor> scans;
  for (int i = 0; i < 5; ++i) scans.push_back(synth_radar(1, kPast));
  TileWriter writer;
  publish_cycle(svc, scans, writer);
  std::cout << "rain total " << writer.rain_total << " max prob " << writer.prob_max << '\n';
  if (device.is_cuda()) std::cout << "latency " << gpu_latency_ms(svc, scans.front(), 20) << " ms\n";
  return 0;
}
