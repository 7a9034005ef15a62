// Machine-learned surrogate potential for molecular dynamics of small organic
// molecules (H, C, N, O). Radial-basis descriptors of each atom's
// neighbourhood feed a shared trunk with an energy head (per-atom energies
// plus the species' reference energies) and a direct force head. Training is
// staged through one template with a loss functor per stage; configurations
// the committee flags as uncertain are refitted; the surrogate then drives a
// short velocity-Verlet run.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kSpecies = 4, kDescriptor = 48;

struct MdConfig {
  std::optional<int64_t> accum_steps;  // frames per update; unset: 4
  double lr = 5e-4, clip = 10.0, dt = 0.5;
  int pretrain_epochs = 3, force_epochs = 2;
  int64_t md_steps = 200;
};

struct Frame {
  torch::Tensor positions;  // [A, 3] Angstrom
  torch::Tensor species;    // [A] long
  torch::Tensor energy;     // [] eV
  torch::Tensor forces;     // [A, 3] eV/Angstrom
};

struct Prediction {
  torch::Tensor energy, forces;
};

torch::Tensor radial_descriptors(const torch::Tensor& pos) {
  auto d = torch::cdist(pos, pos).unsqueeze(-1);  // [A, A, 1]
  auto centers = torch::linspace(0.5, 6.0, kDescriptor, pos.options());
  return torch::exp(-4.0 * (d - centers).pow(2)).sum(1);  // [A, kDescriptor]
}

struct PotentialImpl : nn::Module {
  explicit PotentialImpl(int64_t hidden)
      : trunk(register_module("trunk", nn::Sequential(nn::Linear(kDescriptor, hidden), nn::SiLU(),
                                                      nn::LayerNorm(nn::LayerNormOptions({hidden})),
                                                      nn::Linear(hidden, hidden), nn::SiLU()))),
        energy_head(register_module("energy_head", nn::Linear(hidden, 1))),
        force_head(register_module("force_head", nn::Linear(hidden, 3))),
        self_energy(torch::tensor({-13.6, -1029.8, -1484.3, -2041.8}, torch::kFloat)) {}

  Prediction forward(const torch::Tensor& positions, const torch::Tensor& species) {
    auto h = trunk->forward(radial_descriptors(positions));
    // BUG(torch-device-mismatch): self_energy is a plain member, not a
    // registered buffer, so model->to(device) left it on the CPU.
    auto atomic = energy_head->forward(h).squeeze(1) + self_energy.index_select(0, species);
    return {atomic.sum(), force_head->forward(h)};
  }

  nn::Sequential trunk;
  nn::Linear energy_head, force_head;
  torch::Tensor self_energy;  // eV per isolated atom, by species
};
TORCH_MODULE(Potential);

// DFT pretraining: energies and forces, already averaged over the frames of
// one accumulated update.
struct EnergyForceLoss {
  int64_t accum;
  torch::Tensor operator()(const Prediction& p, const Frame& f) const {
    return (F::mse_loss(p.energy, f.energy) + F::mse_loss(p.forces, f.forces)) / static_cast<double>(accum);
  }
};

// AIMD refinement: forces only (the thermostat's energies are not comparable).
struct ForceMatchLoss {
  torch::Tensor operator()(const Prediction& p, const Frame& f) const { return F::mse_loss(p.forces, f.forces); }
};

// Collects a stage's losses for the run log.
struct StageMonitor {
  explicit StageMonitor(torch::Device device)
      : sum(torch::zeros({}, torch::TensorOptions().device(device))),
        on_loss([this](const torch::Tensor& loss) {
          // BUG(torch-loss-accumulation-graph): on_loss() gets every step's
          // attached loss and the monitor outlives the stage's loop.
          sum += loss;
          ++count;
        }) {}
  torch::Tensor sum;
  int64_t count = 0;
  std::function<void(const torch::Tensor&)> on_loss;
};

template <typename LossFn>
void train_stage(Potential& model, torch::optim::Optimizer& opt, const std::vector<Frame>& frames, LossFn loss_fn,
                 int64_t accum, int epochs, torch::Device device, const std::string& name) {
  model->train();
  opt.zero_grad();
  StageMonitor monitor(device);
  int64_t micro = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto& f : frames) {
      auto loss = loss_fn(model->forward(f.positions, f.species), f);
      // BUG(torch-grad-accumulation-unscaled): the ForceMatchLoss stage
      // back-propagates a plain mean force error on each of `accum` frames
      // per step (the EnergyForceLoss stage divides by accum).
      loss.backward();
      monitor.on_loss(loss);
      if (++micro % accum == 0) {
        // OK(torch-missing-zero-grad): reset under the same condition.
        opt.step();
        opt.zero_grad();
      }
    }
  }
  std::cout << name << ": mean loss " << monitor.sum.item<double>() / static_cast<double>(monitor.count) << '\n';
}

void apply_update(torch::optim::Optimizer& opt, Potential& model, double clip) {
  torch::nn::utils::clip_grad_norm_(model->parameters(), clip);
  // BUG(torch-missing-zero-grad): refit_on_uncertain() calls this after
  // every backward() and resets only once, before its loop.
  opt.step();
}

void accumulate(torch::Tensor& acc, const torch::Tensor& value) {
  // BUG(torch-loss-accumulation-graph): called with the attached per-atom
  // errors of every refit step; species_err lives across the whole loop.
  acc += value;
}

// Refit on the frames where the committee disagreed, tracking the force error
// per species for the report.
void refit_on_uncertain(Potential& model, const std::vector<Frame>& frames, const MdConfig& cfg, torch::Device device) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  std::array<torch::Tensor, kSpecies> species_err;
  for (auto& e : species_err)
    e = torch::zeros({}, torch::TensorOptions().device(device));
  auto frames_loss = torch::zeros({}, torch::TensorOptions().device(device));
  model->train();
  opt.zero_grad();
  for (const auto& f : frames) {
    auto pred = model->forward(f.positions, f.species);
    auto per_atom = (pred.forces - f.forces).pow(2).mean(1);  // [A]
    auto loss = per_atom.mean();
    loss.backward();
    apply_update(opt, model, cfg.clip);
    // OK(torch-loss-accumulation-graph): detached.
    frames_loss += loss.detach();
    for (int64_t s = 0; s < kSpecies; ++s)
      accumulate(species_err[s], per_atom.masked_select(f.species == s).sum());
  }
  for (int64_t s = 0; s < kSpecies; ++s)
    std::cout << "species " << s << " force SSE " << species_err[s].item<double>() << '\n';
  std::cout << "refit mean loss " << frames_loss.item<double>() / static_cast<double>(frames.size()) << '\n';
}

// NVE velocity-Verlet run (unit masses); returns the final kinetic energy.
double run_md(Potential& model, Frame frame, int64_t steps, double dt) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto pos = frame.positions.clone();
  auto vel = torch::zeros_like(pos);
  auto forces = model->forward(pos, frame.species).forces;
  for (int64_t t = 0; t < steps; ++t) {
    vel = vel + 0.5 * dt * forces;
    pos = pos + dt * vel;
    // OK(torch-inference-without-no-grad): guard above.
    forces = model->forward(pos, frame.species).forces;
    vel = vel + 0.5 * dt * forces;
  }
  return 0.5 * vel.pow(2).sum().item<double>();
}

std::vector<Frame> synth_frames(int64_t n, int64_t atoms, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  std::vector<Frame> frames;
  for (int64_t i = 0; i < n; ++i)
    frames.push_back({3.0 * torch::randn({atoms, 3}, opts), torch::randint(kSpecies, {atoms}, opts.dtype(torch::kLong)),
                      -1000.0 * torch::rand({}, opts), torch::randn({atoms, 3}, opts)});
  return frames;
}

int main() {
  torch::manual_seed(279);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  MdConfig cfg;
  const int64_t accum = cfg.accum_steps.value_or(4);
  Potential model(128);
  model->to(device);

  torch::optim::Adam pre_opt(model->parameters(), torch::optim::AdamOptions(cfg.lr));
  train_stage(model, pre_opt, synth_frames(64, 18, device), EnergyForceLoss{accum}, accum, cfg.pretrain_epochs, device,
              "dft-pretrain");
  torch::optim::Adam aimd_opt(model->parameters(), torch::optim::AdamOptions(cfg.lr * 0.3));
  train_stage(model, aimd_opt, synth_frames(48, 18, device), ForceMatchLoss{}, accum, cfg.force_epochs, device,
              "aimd-forces");

  refit_on_uncertain(model, synth_frames(12, 18, device), cfg, device);
  std::cout << "final kinetic energy " << run_md(model, synth_frames(1, 18, device).front(), cfg.md_steps, cfg.dt)
            << '\n';
}
