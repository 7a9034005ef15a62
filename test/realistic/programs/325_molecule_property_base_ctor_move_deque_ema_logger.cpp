// Molecular property prediction (solubility, logP, polar surface area) with a
// small message-passing network over padded atom graphs. Trainers share a
// base class that owns the network and moves it to the device in its
// constructor; the regression trainer accumulates gradients over micro-batches
// and keeps a loss history and a smoothed loss in a MetricLogger.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace molprop {

constexpr int64_t kAtomTypes = 16, kMaxAtoms = 32, kHidden = 96, kTargets = 3;

struct Molecule {
  std::vector<int64_t> atoms;                      // atom type per heavy atom
  std::vector<std::pair<int64_t, int64_t>> bonds;  // undirected
  std::vector<float> props;                        // kTargets values
};

struct MolBatch {
  torch::Tensor atoms;  // [B, N] int64, 0 = padding
  torch::Tensor adj;    // [B, N, N] float, normalised
  torch::Tensor y;      // [B, kTargets]
};

MolBatch make_batch(const std::vector<Molecule> &mols, size_t begin, size_t end) {
  const auto b = static_cast<int64_t>(end - begin);
  auto atoms = torch::zeros({b, kMaxAtoms}, torch::kLong);
  auto adj = torch::eye(kMaxAtoms).repeat({b, 1, 1});
  std::vector<float> y;
  for (size_t i = begin; i < end; ++i) {
    const auto r = static_cast<int64_t>(i - begin);
    for (size_t a = 0; a < mols[i].atoms.size(); ++a)
      atoms[r][static_cast<int64_t>(a)] = mols[i].atoms[a];
    for (const auto &e : mols[i].bonds) {
      adj[r][e.first][e.second] = 1.0;
      adj[r][e.second][e.first] = 1.0;
    }
    y.insert(y.end(), mols[i].props.begin(), mols[i].props.end());
  }
  adj = adj / adj.sum(-1, /*keepdim=*/true);
  return {atoms, adj, torch::tensor(y).view({b, kTargets})};
}

struct MpnnImpl : nn::Module {
  explicit MpnnImpl(int64_t steps)
      : embed(register_module("embed", nn::Embedding(kAtomTypes, kHidden))),
        message(register_module("message", nn::Linear(kHidden, kHidden))),
        head(register_module("head", nn::Sequential(nn::Linear(kHidden, kHidden), nn::ReLU(), nn::Dropout(0.1),
                                                    nn::Linear(kHidden, kTargets)))),
        steps_(steps) {}
  torch::Tensor forward(const torch::Tensor &atoms, const torch::Tensor &adj) {
    auto mask = (atoms > 0).unsqueeze(-1).to(torch::kFloat);
    auto h = embed->forward(atoms) * mask;
    for (int64_t s = 0; s < steps_; ++s)
      h = torch::relu(message->forward(torch::bmm(adj, h))) * mask + h;
    return head->forward(h.sum(1));
  }
  nn::Embedding embed;
  nn::Linear message;
  nn::Sequential head;
  int64_t steps_;
};
TORCH_MODULE(Mpnn);

class MetricLogger {
 public:
  MetricLogger() : ema_(torch::zeros({})) {}
  void log_step(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the history lives as long as the
    // trainer; each element keeps its step's graph alive.
    history_.push_back(loss);
    // BUG(torch-loss-accumulation-graph): the smoothed loss chains every
    // step's graph onto the previous one (probe: an EMA, not a plain sum).
    ema_ = 0.9 * ema_ + 0.1 * loss;
  }
  const torch::Tensor &smoothed() const { return ema_; }
  size_t steps() const { return history_.size(); }

 private:
  std::deque<torch::Tensor> history_;
  torch::Tensor ema_;
};

struct StepRecord {
  int64_t step;
  torch::Tensor loss;
};

std::ostream &operator<<(std::ostream &os, const StepRecord &r) {
  // BUG(torch-host-sync-in-loop): train_epoch() traces every micro-batch;
  // printing the device loss copies it to the host and waits each time.
  return os << "step=" << r.step << " loss=" << r.loss;
}

void check_finite(const torch::Tensor &loss, int64_t step) {
  // BUG(torch-host-sync-in-loop): called on every micro-batch of the
  // training loop; reading the device loss blocks the host each time.
  if (!std::isfinite(loss.item<double>()))
    throw std::runtime_error("loss diverged at step " + std::to_string(step));
}

class TrainerBase {
 public:
  virtual ~TrainerBase() = default;

 protected:
  TrainerBase(Mpnn net, torch::Device device) : net_(std::move(net)), device_(device) { net_->to(device_); }
  void reset_gradients(torch::optim::Optimizer &opt) { opt.zero_grad(); }

  Mpnn net_;
  torch::Device device_;
};

class PropertyRegressor : public TrainerBase {
 public:
  PropertyRegressor(Mpnn net, torch::Device device, int64_t accum_steps)
      : TrainerBase(std::move(net), device), accum_(accum_steps),
        opt_(net_->parameters(), torch::optim::AdamOptions(5e-4)) {}

  void train_epoch(const std::vector<Molecule> &mols, int64_t micro_batch) {
    net_->train();
    reset_gradients(opt_);
    torch::Tensor epoch_sum = torch::zeros({}, device_);
    for (size_t i = 0, k = 0; i + static_cast<size_t>(micro_batch) <= mols.size(); i += micro_batch, ++k) {
      auto b = make_batch(mols, i, i + static_cast<size_t>(micro_batch));
      auto atoms = b.atoms.to(device_), adj = b.adj.to(device_), y = b.y.to(device_);
      // OK(torch-device-mismatch): every input was moved to device_ above.
      auto loss = F::mse_loss(net_->forward(atoms, adj), y) / static_cast<double>(accum_);
      loss.backward();
      check_finite(loss, step_);
      logger_.log_step(loss);
      trace_ << StepRecord{step_, loss.detach()} << '\n';
      // OK(torch-loss-accumulation-graph): detached before it is summed.
      epoch_sum += loss.detach();
      if ((k + 1) % static_cast<size_t>(accum_) == 0) {
        nn::utils::clip_grad_norm_(net_->parameters(), 5.0);
        // BUG(torch-missing-zero-grad): the gradients are reset once per epoch
        // (reset_gradients() above the loop), never after this step.
        opt_.step();
        ++step_;
      }
    }
    std::cout << "  trace bytes " << trace_.str().size() << " epoch loss " << epoch_sum.item<double>() << " smoothed " << logger_.smoothed().item<double>()
              << '\n';
  }

  torch::Tensor evaluate_mae(const std::vector<Molecule> &mols) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto abs_err = torch::zeros({kTargets}, net_->parameters()[0].device());
    for (size_t i = 0; i + 64 <= mols.size(); i += 64) {
      auto b = make_batch(mols, i, i + 64);
      // BUG(torch-device-mismatch): the base constructor moved net_ to
      // device_; the evaluation batch from make_batch() stays on the CPU.
      auto pred = net_->forward(b.atoms, b.adj);
      // OK(torch-device-mismatch): abs_err sits on the device of the network's first parameter.
      abs_err += (pred - b.y.to(abs_err.device())).abs().sum(0);
    }
    net_->train();
    return abs_err.cpu() / static_cast<double>(mols.size() / 64 * 64);
  }

 private:
  int64_t accum_;
  torch::optim::Adam opt_;
  MetricLogger logger_;
  std::ostringstream trace_;
  int64_t step_ = 0;
};

std::vector<Molecule> synth_molecules(std::mt19937 &rng, int n) {
  std::uniform_int_distribution<int64_t> atom(1, kAtomTypes - 1), size(6, kMaxAtoms);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<Molecule> out;
  for (int i = 0; i < n; ++i) {
    Molecule m;
    const int64_t na = size(rng);
    for (int64_t a = 0; a < na; ++a) {
      m.atoms.push_back(atom(rng));
      if (a > 0)
        m.bonds.emplace_back(a - 1, a);
    }
    const float heavy = static_cast<float>(na);
    m.props = {0.1f * heavy + noise(rng), 0.05f * heavy + noise(rng), 2.0f * heavy + noise(rng)};
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace molprop

int main() {
  torch::manual_seed(325);
  std::mt19937 rng(325);
  auto train = molprop::synth_molecules(rng, 4096);
  auto val = molprop::synth_molecules(rng, 512);

  // OK(torch-cuda-unguarded): CUDA only when is_available() says so.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  molprop::PropertyRegressor trainer(molprop::Mpnn(3), device, /*accum_steps=*/4);
  for (int epoch = 0; epoch < 5; ++epoch) {
    trainer.train_epoch(train, 32);
    std::cout << "epoch " << epoch << " val MAE " << trainer.evaluate_mae(val) << '\n';
  }
}
