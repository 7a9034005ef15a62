// Symbolic music generation: a GRU over note events (pitch, duration bin,
// velocity bin) with one head per attribute. The trainer keeps the three head
// losses in a std::array, updates through a small Stepper wrapper around AdamW
// and reports every step to a hook the application installs. A short style
// fine-tune prints a StepReport per step. The sampler reads the pitch
// distribution back through a reused pinned staging buffer.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace composer {

constexpr int64_t kPitches = 128, kDurBins = 16, kVelBins = 8, kSeq = 64;

struct Heads {
  torch::Tensor pitch, dur, vel, hidden;
};

struct ComposerNetImpl : nn::Module {
  ComposerNetImpl()
      : pitch_emb(register_module("pitch_emb", nn::Embedding(kPitches, 64))),
        dur_emb(register_module("dur_emb", nn::Embedding(kDurBins, 16))),
        vel_emb(register_module("vel_emb", nn::Embedding(kVelBins, 16))),
        gru(register_module("gru", nn::GRU(nn::GRUOptions(96, 192).batch_first(true)))),
        pitch_head(register_module("pitch_head", nn::Linear(192, kPitches))),
        dur_head(register_module("dur_head", nn::Linear(192, kDurBins))),
        vel_head(register_module("vel_head", nn::Linear(192, kVelBins))) {}

  // tokens: B x T x 3 (pitch, duration bin, velocity bin)
  Heads forward(const torch::Tensor &tokens, const torch::Tensor &hidden = {}) {
    auto x = torch::cat({pitch_emb->forward(tokens.select(2, 0)), dur_emb->forward(tokens.select(2, 1)),
                         vel_emb->forward(tokens.select(2, 2))}, -1);
    auto [h, last] = gru->forward(x, hidden);
    return {pitch_head->forward(h), dur_head->forward(h), vel_head->forward(h), last};
  }

  nn::Embedding pitch_emb, dur_emb, vel_emb;
  nn::GRU gru;
  nn::Linear pitch_head, dur_head, vel_head;
};
TORCH_MODULE(ComposerNet);

// Random walks on the keyboard with a few rhythmic patterns.
torch::Tensor synth_phrases(int64_t n) {
  auto steps = torch::randint(-3, 4, {n, kSeq}, torch::kLong);
  auto pitch = (60 + steps.cumsum(1)).clamp(21, 108);
  auto dur = torch::randint(0, 4, {n, kSeq}, torch::kLong) * 4;
  auto vel = torch::randint(2, 6, {n, kSeq}, torch::kLong);
  return torch::stack({pitch, dur, vel}, 2);
}

std::array<torch::Tensor, 3> head_losses(const Heads &out, const torch::Tensor &target) {
  return {F::cross_entropy(out.pitch.flatten(0, 1), target.select(2, 0).flatten()),
          F::cross_entropy(out.dur.flatten(0, 1), target.select(2, 1).flatten()),
          F::cross_entropy(out.vel.flatten(0, 1), target.select(2, 2).flatten())};
}

// AdamW behind a narrow interface: the trainer clears, the trainer updates.
class Stepper {
 public:
  Stepper(std::vector<torch::Tensor> params, double lr)
      : opt_(std::move(params), torch::optim::AdamWOptions(lr).weight_decay(0.01)) {}
  void clear() { opt_.zero_grad(); }
  void update() {
    ++updates_;
    // BUG(torch-missing-zero-grad): fit_epoch() clears once per epoch, so every step applies the sum of all earlier steps' gradients.
    opt_.step();
  }
  int64_t updates() const { return updates_; }

 private:
  torch::optim::AdamW opt_;
  int64_t updates_ = 0;
};

class Trainer {
 public:
  using StepHook = std::function<void(int64_t, const torch::Tensor &)>;

  Trainer(ComposerNet model, torch::Device device, double lr)
      : model_(std::move(model)), device_(device), stepper_(model_->parameters(), lr),
        on_step_([](int64_t, const torch::Tensor &) {}) {
    model_->to(device_);
  }
  void on_step(StepHook hook) { on_step_ = std::move(hook); }

  std::array<double, 3> fit_epoch(int64_t steps, int64_t batch) {
    for (auto &r : running_) r = torch::zeros({}, torch::TensorOptions().device(device_));
    correct_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    stepper_.clear();
    for (int64_t s = 0; s < steps; ++s) {
      auto tokens = synth_phrases(batch).to(device_);
      auto out = model_->forward(tokens.narrow(1, 0, kSeq - 1));
      auto target = tokens.narrow(1, 1, kSeq - 1);
      auto losses = head_losses(out, target);
      auto loss = losses[0] + 0.5 * losses[1] + 0.5 * losses[2];
      loss.backward();
      stepper_.update();
      for (size_t h = 0; h < running_.size(); ++h)
        // BUG(torch-loss-accumulation-graph): the head losses are still on their graphs; running_ keeps every step's.
        running_[h] += losses[h];
      // OK(torch-loss-accumulation-graph): argmax and eq carry no graph.
      correct_ += out.pitch.argmax(-1).eq(target.select(2, 0)).sum();
      on_step_(s, loss);
    }
    std::array<double, 3> means{};
    // OK(torch-host-sync-in-loop): one read per head per epoch, after the loop.
    for (size_t h = 0; h < running_.size(); ++h) means[h] = running_[h].item<double>() / static_cast<double>(steps);
    pitch_acc_ = correct_.item<double>() / static_cast<double>(steps * batch * (kSeq - 1));
    return means;
  }
  double pitch_accuracy() const { return pitch_acc_; }
  int64_t updates() const { return stepper_.updates(); }

 private:
  ComposerNet model_;
  torch::Device device_;
  Stepper stepper_;
  StepHook on_step_;
  std::array<torch::Tensor, 3> running_;
  torch::Tensor correct_;
  double pitch_acc_ = 0.0;
};

struct StepReport {
  int64_t step;
  torch::Tensor loss;
};

std::ostream &operator<<(std::ostream &os, const StepReport &r) {
  // BUG(torch-host-sync-in-loop): the fine-tune prints a report with the device loss on every step.
  return os << "[style " << r.step << "] loss " << r.loss;
}

void finetune_on_style(ComposerNet &model, const torch::Tensor &phrases, torch::Device device) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
  std::vector<torch::Tensor> entropies;
  for (int64_t s = 0; s < phrases.size(0); ++s) {
    // OK(torch-missing-zero-grad): the module drops its gradients (set_to_none) before each backward.
    model->zero_grad(/*set_to_none=*/true);
    auto tokens = phrases[s].unsqueeze(0).to(device);
    auto out = model->forward(tokens.narrow(1, 0, kSeq - 1));
    auto losses = head_losses(out, tokens.narrow(1, 1, kSeq - 1));
    auto loss = losses[0] + losses[1] + losses[2];
    loss.backward();
    opt.step();
    auto p = torch::softmax(out.pitch, -1);
    auto entropy = -(p * torch::log(p + 1e-9)).sum(-1).mean();
    // OK(torch-loss-accumulation-graph): detached before it is kept for the summary.
    entropies.push_back(entropy.detach());
    std::cout << StepReport{s, loss} << '\n';
  }
  std::cout << "style entropy " << torch::stack(entropies).mean().item<double>() << '\n';
}

void wait_for_device(const torch::Device &device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

struct Note {
  int64_t pitch, dur, vel;
};

class Sampler {
 public:
  Sampler(ComposerNet model, torch::Device device, double temperature)
      : model_(std::move(model)), device_(device), temperature_(temperature),
        host_probs_(torch::empty({kPitches}, torch::TensorOptions().pinned_memory(device.is_cuda()))) {}

  std::vector<Note> generate(int64_t length, std::mt19937 &rng) {
    torch::NoGradGuard no_grad;
    std::vector<Note> notes;
    auto token = torch::tensor({60, 4, 4}, torch::kLong).view({1, 1, 3}).to(device_);
    torch::Tensor hidden;
    for (int64_t i = 0; i < length; ++i) {
      auto out = model_->forward(token, hidden);
      hidden = out.hidden;
      host_probs_.copy_(torch::softmax(out.pitch.flatten() / temperature_, 0), /*non_blocking=*/true);
      const int64_t pitch = draw(rng);
      auto picks = torch::stack({out.dur.flatten().argmax(), out.vel.flatten().argmax()}).to(torch::kCPU, /*non_blocking=*/true);
      // OK(torch-non-blocking-d2h-race): select() only makes views; nothing is read yet.
      auto dur_host = picks.select(0, 0), vel_host = picks.select(0, 1);
      wait_for_device(device_);
      // OK(torch-non-blocking-d2h-race): wait_for_device() synchronised after the copy.
      notes.push_back({pitch, dur_host.item<int64_t>(), vel_host.item<int64_t>()});
      token = torch::tensor({pitch, notes.back().dur, notes.back().vel}, torch::kLong).view({1, 1, 3}).to(device_);
    }
    return notes;
  }

 private:
  int64_t draw(std::mt19937 &rng) {
    // BUG(torch-non-blocking-d2h-race): generate() draws right after staging the probabilities; the copy may not have landed.
    const float *p = host_probs_.data_ptr<float>();
    std::discrete_distribution<int64_t> dist(p, p + kPitches);
    return dist(rng);
  }

  ComposerNet model_;
  torch::Device device_;
  double temperature_;
  torch::Tensor host_probs_;
};

}  // namespace composer

int main() {
  using namespace composer;
  torch::manual_seed(361);
  std::mt19937 rng(361);
  // OK(torch-cuda-unguarded): CUDA only when available.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  ComposerNet model;
  Trainer trainer(model, device, 1e-3);
  std::vector<float> curve;
  trainer.on_step([&curve](int64_t, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the hook runs on every training step and reads the device loss.
    curve.push_back(loss.item<float>());
  });
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const auto m = trainer.fit_epoch(100, 32);
    std::cout << "epoch " << epoch << " pitch " << m[0] << " dur " << m[1] << " vel " << m[2] << " acc "
              << trainer.pitch_accuracy() << " updates " << trainer.updates() << '\n';
  }
  finetune_on_style(model, synth_phrases(16), device);

  Sampler sampler(model, device, 0.9);
  const auto notes = sampler.generate(128, rng);
  std::cout << "generated " << notes.size() << " notes, first pitch " << notes.front().pitch << ", curve "
            << curve.size() << '\n';
  return 0;
}
