// Command line, device choice, synthetic single-lead records, step logging.
#include "ecg.h"

#include <cmath>
#include <iostream>
#include <stdexcept>

namespace {

bool take(const std::string &arg, const std::string &key, std::string &value) {
  if (arg.rfind(key, 0) != 0)
    return false;
  value = arg.substr(key.size());
  return true;
}

torch::Tensor as_column(const torch::Tensor &mask) { return mask.to(torch::kFloat).unsqueeze(1); }

}  // namespace

RunConfig parse_args(int argc, char **argv) {
  RunConfig cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string v;
    if (take(arg, "--arch=", v))
      cfg.arch = v;
    else if (take(arg, "--baseline=", v))
      cfg.baseline_ckpt = v;
    else if (take(arg, "--epochs=", v))
      cfg.epochs = std::stoll(v);
    else if (take(arg, "--batch=", v))
      cfg.batch = std::stoll(v);
    else if (take(arg, "--lr=", v))
      cfg.lr = std::stod(v);
    else if (take(arg, "--gpu=", v))
      cfg.gpu = std::stoi(v);
    else if (arg == "--cpu")
      cfg.force_cpu = true;
    else
      throw std::invalid_argument("unknown option " + arg);
  }
  return cfg;
}

torch::Device select_device(const RunConfig &cfg) {
  if (cfg.force_cpu || !torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  if (cfg.gpu < 0 || static_cast<size_t>(cfg.gpu) >= torch::cuda::device_count())
    throw std::runtime_error("--gpu=" + std::to_string(cfg.gpu) + " but only " +
                             std::to_string(torch::cuda::device_count()) + " visible devices");
  // OK(torch-cuda-unguarded): the early return above handles machines
  // without CUDA.
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(cfg.gpu));
}

// AAMI class frequencies of the MIT-BIH DS1 records; added to the logits
// during training (logit adjustment for the long tail of S/V/F beats).
torch::Tensor class_log_prior() {
  auto freq = torch::tensor({0.8946, 0.0274, 0.0712, 0.0079, 0.0089});
  return (freq / freq.sum()).log();
}

// Synthetic beats: P wave, QRS and T wave as Gaussian bumps on a wandering
// baseline. S beats come early, V beats have a wide QRS and no P wave,
// F beats a medium QRS, Q windows are mostly noise.
EcgSplit make_split(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  // [n] class ids drawn from the record mix (the view asserts the shape).
  auto labels = torch::multinomial(torch::tensor({0.80, 0.06, 0.09, 0.03, 0.02}), n, /*replacement=*/true, gen).view({n});
  auto t = torch::linspace(0.0, 2.0, kWindow).view({1, kWindow});
  auto is_s = as_column(labels == 1), is_v = as_column(labels == 2);
  auto is_f = as_column(labels == 3), is_q = as_column(labels == 4);
  auto centre = 1.0 + 0.05 * torch::randn({n, 1}, gen) - 0.25 * is_s;
  auto width = 0.018 + 0.035 * is_v + 0.015 * is_f;
  auto qrs = torch::exp(-(t - centre).pow(2) / (2 * width * width)) * (1.0 - 0.8 * is_q);
  auto p_wave = 0.15 * torch::exp(-(t - centre + 0.18).pow(2) / 0.002) * (1.0 - is_v);
  auto t_wave = 0.3 * torch::exp(-(t - centre - 0.32).pow(2) / 0.008);
  auto phase = 2 * M_PI * torch::rand({n, 1}, gen);
  auto wander = 0.1 * torch::sin(2 * M_PI * 0.3 * t + phase);
  auto noise = 0.03 * torch::randn({n, kWindow}, gen) * (1.0 + 5.0 * is_q);
  return {(qrs + p_wave + t_wave + wander + noise).unsqueeze(1), labels};
}

torch::Tensor make_holter_strip(int64_t beats, uint64_t seed) { return make_split(beats, seed).signals; }

void StepLogger::record(int64_t step, const torch::Tensor &loss, const torch::Tensor &logits,
                        const torch::Tensor &target) {
  // BUG(torch-host-sync-in-loop): Runner::train_step() (runner.cpp) calls
  // this on every training step with the loss on the run's device; the EMA
  // waits for the GPU each time.
  const double value = loss.item<double>();
  ema_ = first_ ? value : 0.98 * ema_ + 0.02 * value;
  first_ = false;
  if (step % every_ == 0) {
    // OK(torch-host-sync-in-loop): one step in every_.
    const double acc = logits.argmax(1).eq(target).to(torch::kFloat).mean().item<double>();
    std::cout << "step " << step << " loss(ema) " << ema_ << " batch acc " << acc << '\n';
  }
}
