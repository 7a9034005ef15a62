// P/S phase picking for a regional seismic network (PhaseNet-style): a 1-D
// encoder-decoder labels every sample of a 30 s three-component window as
// noise, P arrival or S arrival. The catalogue-pretrained picker is
// fine-tuned station by station on each station's analyst picks (restarting
// from the pretrained weights each time), then run over a day of continuous
// record in half-overlapping windows. Host buffers share one namespace-scope
// TensorOptions; evaluation switches modes with a small RAII guard.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace F = torch::nn::functional;

namespace picker {

constexpr int64_t kSamples = 3000;  // 30 s at 100 Hz
constexpr int64_t kChannels = 3;    // Z, N, E
constexpr int64_t kPhases = 3;      // noise, P, S
constexpr double kThreshold = 0.5;
const torch::TensorOptions kHostOpts = torch::TensorOptions().dtype(torch::kFloat);

struct StationTask {
  double noise;   // site noise level
  double ps_gap;  // typical S-P time in samples for the station's events
  int64_t steps;
  uint64_t seed;

  // ([8, 3, kSamples] waveforms, [8, kSamples] per-sample phase labels)
  std::tuple<torch::Tensor, torch::Tensor> sample(int64_t step) const {
    auto gen = at::detail::createCPUGenerator(seed + static_cast<uint64_t>(step));
    const int64_t b = 8;
    auto t = torch::arange(kSamples, kHostOpts).view({1, kSamples});
    auto p_at = torch::randint(300, 1500, {b, 1}, gen, kHostOpts);
    auto s_at = p_at + ps_gap * (0.8 + 0.4 * torch::rand({b, 1}, gen));
    auto env_p = (t >= p_at).to(torch::kFloat) * torch::exp(-(t - p_at).clamp_min(0) / 200.0);
    auto env_s = (t >= s_at).to(torch::kFloat) * torch::exp(-(t - s_at).clamp_min(0) / 300.0);
    auto z = env_p * torch::sin(t * 0.50) + 0.5 * env_s * torch::sin(t * 0.21);
    auto n = 0.3 * env_p * torch::sin(t * 0.45) + 1.2 * env_s * torch::sin(t * 0.18);
    auto e = 0.3 * env_p * torch::cos(t * 0.45) + 1.5 * env_s * torch::sin(t * 0.20);
    auto wave = torch::stack({z, n, e}, 1) + noise * torch::randn({b, kChannels, kSamples}, gen);
    auto labels = torch::zeros({b, kSamples}, torch::kLong);
    labels.masked_fill_((t - p_at).abs() <= 10, 1);
    labels.masked_fill_((t - s_at).abs() <= 10, 2);
    return {wave, labels};
  }
};

struct PickerImpl : torch::nn::Module {
  static torch::nn::Sequential block(int64_t in, int64_t out) {
    return torch::nn::Sequential(torch::nn::Conv1d(torch::nn::Conv1dOptions(in, out, 7).padding(3)),
                                 torch::nn::BatchNorm1d(out), torch::nn::ReLU());
  }
  PickerImpl()
      : enc1(register_module("enc1", block(kChannels, 16))), enc2(register_module("enc2", block(16, 32))),
        bottom(register_module("bottom", block(32, 64))),
        up2(register_module("up2", torch::nn::ConvTranspose1d(torch::nn::ConvTranspose1dOptions(64, 32, 2).stride(2)))),
        dec2(register_module("dec2", block(64, 32))),
        up1(register_module("up1", torch::nn::ConvTranspose1d(torch::nn::ConvTranspose1dOptions(32, 16, 2).stride(2)))),
        dec1(register_module("dec1", block(32, 16))),
        out(register_module("out", torch::nn::Conv1d(torch::nn::Conv1dOptions(16, kPhases, 1)))) {}

  // [B, 3, kSamples] -> phase logits [B, kPhases, kSamples]
  torch::Tensor forward(torch::Tensor x) {
    auto e1 = enc1->forward(x);
    auto e2 = enc2->forward(torch::max_pool1d(e1, 2));
    auto b = bottom->forward(torch::max_pool1d(e2, 2));
    auto d2 = dec2->forward(torch::cat({up2->forward(b), e2}, 1));
    auto d1 = dec1->forward(torch::cat({up1->forward(d2), e1}, 1));
    return out->forward(d1);
  }

  torch::nn::Sequential enc1, enc2, bottom;
  torch::nn::ConvTranspose1d up2;
  torch::nn::Sequential dec2;
  torch::nn::ConvTranspose1d up1;
  torch::nn::Sequential dec1;
  torch::nn::Conv1d out;
};
TORCH_MODULE(Picker);

// Puts a module in evaluation mode for a scope and restores its mode after.
class ScopedEval {
 public:
  explicit ScopedEval(torch::nn::Module &module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~ScopedEval() { module_.train(was_training_); }
  ScopedEval(const ScopedEval &) = delete;
  ScopedEval &operator=(const ScopedEval &) = delete;

 private:
  torch::nn::Module &module_;
  bool was_training_;
};

struct StationStats {
  torch::Tensor loss_sum;
  int64_t steps = 0;
  double p_recall = 0.0;
};

struct Pick {
  int64_t sample;
  int64_t phase;  // 1 = P, 2 = S
};

struct PendingWindow {
  torch::Tensor above;  // [1, kPhases, kSamples] bool, copied from the device
  int64_t offset;
};

// Fraction of the held-out P arrivals that the picker finds.
double p_recall(Picker &net, const StationTask &task, torch::Device device) {
  torch::NoGradGuard no_grad;
  ScopedEval eval_scope(*net);
  int64_t found = 0, total = 0;
  for (int64_t i = 0; i < 4; ++i) {
    auto [wave, labels] = task.sample(100000 + i);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
    // scope guard and the no-grad guard.
    auto pred = net->forward(wave.to(device)).argmax(1);
    auto is_p = labels.to(device) == 1;
    found += (pred.eq(1) & is_p).sum().item<int64_t>();
    total += is_p.sum().item<int64_t>();
  }
  return total == 0 ? 0.0 : static_cast<double>(found) / static_cast<double>(total);
}

void restore(Picker &net, const std::vector<torch::Tensor> &snapshot) {
  torch::NoGradGuard no_grad;
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    params[i].copy_(snapshot[i]);
}

std::map<std::string, StationStats> finetune_stations(Picker &net, const std::map<std::string, StationTask> &tasks,
                                                      torch::Device device) {
  std::vector<torch::Tensor> pretrained;
  for (const auto &p : net->parameters())
    pretrained.push_back(p.detach().clone());
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-4));
  const auto weights = torch::tensor({0.2, 1.0, 1.0}, kHostOpts).to(device);
  std::map<std::string, StationStats> stats;
  for (const auto &[name, task] : tasks) {
    restore(net, pretrained);
    net->zero_grad();
    net->train();
    stats[name].loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
    for (int64_t step = 0; step < task.steps; ++step) {
      auto [wave, labels] = task.sample(step);
      auto logits = net->forward(wave.to(device));
      auto loss = F::cross_entropy(logits, labels.to(device), F::CrossEntropyFuncOptions().weight(weights));
      loss.backward();
      // BUG(torch-missing-zero-grad): the only reset is the one per station,
      // before this loop; every step adds the earlier steps' gradients.
      opt.step();
      // BUG(torch-loss-accumulation-graph): the station's statistics outlive
      // the step and keep every step's graph.
      stats[name].loss_sum += loss;
      ++stats[name].steps;
    }
    stats[name].p_recall = p_recall(net, task, device);
  }
  return stats;
}

void extract_picks(const torch::Tensor &above, int64_t offset, std::vector<Pick> &out) {
  auto a = above.accessor<bool, 3>();
  for (int64_t phase = 1; phase < kPhases; ++phase)
    for (int64_t s = 1; s < a.size(2); ++s)
      if (a[0][phase][s] && !a[0][phase][s - 1])
        out.push_back({offset + s, phase});
}

std::vector<Pick> pick_day(Picker &net, const torch::Tensor &day, torch::Device device) {
  ScopedEval eval_scope(*net);
  std::vector<PendingWindow> pending;
  for (int64_t start = 0; start + kSamples <= day.size(1); start += kSamples / 2) {
    auto window = torch::empty({1, kChannels, kSamples}, kHostOpts);
    window.copy_(day.narrow(1, start, kSamples).unsqueeze(0));
    window.sub_(window.mean(2, true)).div_(window.std(2, true, true) + 1e-6);
    // BUG(torch-non-blocking-pageable): kHostOpts has no pinned_memory, so
    // the window is pageable and the copy runs synchronously.
    auto x = window.to(device, /*non_blocking=*/true);
    // BUG(torch-inference-without-no-grad): the scope guard switches to
    // eval mode but not off autograd; every window records activations.
    auto probs = torch::softmax(net->forward(x), 1);
    pending.push_back({probs.gt(kThreshold).to(torch::kCPU, /*non_blocking=*/true), start});
  }
  std::vector<Pick> picks;
  for (const auto &w : pending) {
    // BUG(torch-non-blocking-d2h-race): nothing waited for the copies of the
    // thresholded windows before they are read.
    extract_picks(w.above, w.offset, picks);
  }
  return picks;
}

}  // namespace picker

int main(int argc, char **argv) {
  using namespace picker;
  torch::manual_seed(205);
  // BUG(torch-cuda-unguarded): with no argument the picker asks for CUDA on
  // every machine, the CPU-only field laptops included.
  const torch::Device device(argc > 1 ? argv[1] : "cuda");
  Picker net;
  if (argc > 2)
    torch::load(net, argv[2]);
  net->to(device);

  const std::map<std::string, StationTask> tasks{
      {"BRK", {0.05, 250.0, 150, 1}}, {"MHC", {0.15, 400.0, 150, 2}}, {"PKD", {0.10, 180.0, 200, 3}}};
  auto stats = finetune_stations(net, tasks, device);
  for (const auto &[name, s] : stats)
    std::cout << name << " mean loss " << (s.loss_sum / static_cast<double>(s.steps)).item<double>()
              << " P recall " << s.p_recall << '\n';

  // A stretch of continuous PKD record (the weights are PKD's after the last
  // station).
  auto [waves, unused] = tasks.at("PKD").sample(777);
  auto day = waves.permute({1, 0, 2}).reshape({kChannels, -1});
  const auto picks = pick_day(net, day, device);
  std::cout << picks.size() << " picks on the day record\n";
  return 0;
}
