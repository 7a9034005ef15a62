// Molecular solubility regression with a small message-passing network over
// dense, padded adjacency matrices. The run is assembled with a fluent
// RunBuilder (`RunBuilder().on(device).hidden(96).epochs(6).build()`); the
// Trainer built from its RunConfig owns the model, the optimizer and a loss
// history. Held-out scaffolds live in a std::map keyed by scaffold name, and
// a virtual screen of a large library runs once at the end.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

constexpr int64_t kAtomFeat = 16;

struct MolBatch {
  torch::Tensor atoms;  // [B, N, kAtomFeat]
  torch::Tensor adj;    // [B, N, N], with self loops
  torch::Tensor logS;   // [B]
};

MolBatch random_molecules(int64_t b, int64_t n) {
  auto atoms = torch::randn({b, n, kAtomFeat});
  auto bonds = (torch::rand({b, n, n}) > 0.85).to(torch::kFloat);
  auto adj = ((bonds + bonds.transpose(1, 2)) > 0).to(torch::kFloat) + torch::eye(n).unsqueeze(0);
  auto logS = torch::zeros({b});
  logS += atoms.select(2, 0).mean(1);
  logS -= 0.05 * adj.sum({1, 2}) / n;
  return {atoms, adj, logS};
}

struct MpnnImpl : torch::nn::Module {
  explicit MpnnImpl(int64_t hidden)
      : embed(register_module("embed", torch::nn::Linear(kAtomFeat, hidden))),
        msg1(register_module("msg1", torch::nn::Linear(hidden, hidden))),
        msg2(register_module("msg2", torch::nn::Linear(hidden, hidden))),
        readout(register_module("readout", torch::nn::Linear(hidden, 1))) {}

  torch::Tensor forward(const torch::Tensor &atoms, const torch::Tensor &adj) {
    auto deg = adj.sum(-1, /*keepdim=*/true);
    auto h = torch::relu(embed(atoms));
    h = torch::relu(h + torch::matmul(adj, msg1(h)) / deg);
    h = torch::relu(h + torch::matmul(adj, msg2(h)) / deg);
    return readout(h.sum(1)).squeeze(-1);
  }

  torch::nn::Linear embed, msg1, msg2, readout;
};
TORCH_MODULE(Mpnn);

struct RunConfig {
  torch::Device device = torch::kCPU;
  int64_t hidden = 64;
  int epochs = 4;
  int steps_per_epoch = 200;
  int log_every = 50;
  double lr = 1e-3;
};

class RunBuilder {
 public:
  RunBuilder &on(torch::Device d) {
    cfg_.device = d;
    return *this;
  }
  RunBuilder &hidden(int64_t h) {
    cfg_.hidden = h;
    return *this;
  }
  RunBuilder &epochs(int e) {
    cfg_.epochs = e;
    return *this;
  }
  RunBuilder &lr(double lr) {
    cfg_.lr = lr;
    return *this;
  }
  RunConfig build() const { return cfg_; }

 private:
  RunConfig cfg_;
};

class Trainer {
 public:
  explicit Trainer(const RunConfig &cfg)
      : cfg_(cfg), model_(cfg.hidden), opt_(model_->parameters(), torch::optim::AdamOptions(cfg.lr)) {
    model_->to(cfg_.device);
  }

  void fit() {
    for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
      auto epoch_sum = torch::zeros({}, torch::TensorOptions().device(cfg_.device));
      for (int step = 0; step < cfg_.steps_per_epoch; ++step) {
        auto batch = random_molecules(32, 24);
        auto pred = model_->forward(batch.atoms.to(cfg_.device), batch.adj.to(cfg_.device));
        // BUG(torch-device-mismatch): the model and the graph were moved to
        // the configured device; the solubility targets are still on the host.
        auto loss = torch::mse_loss(pred, batch.logS);
        opt_.zero_grad();
        loss.backward();
        opt_.step();
        // OK(torch-loss-accumulation-graph): detached before summing.
        epoch_sum += loss.detach();
        // BUG(torch-loss-accumulation-graph): the history lives as long as
        // the trainer and keeps every step's graph alive.
        history_.push_back(loss);
        if (step % cfg_.log_every == 0)
          // OK(torch-host-sync-in-loop): a logging step.
          std::cout << "epoch " << epoch << " step " << step << " mse " << loss.item<float>() << "\n";
      }
      std::cout << "epoch " << epoch << " mean mse " << (epoch_sum / cfg_.steps_per_epoch).item<float>() << "\n";
    }
  }

  // Mean absolute error per held-out scaffold.
  std::map<std::string, double> evaluate(const std::map<std::string, MolBatch> &splits) {
    std::map<std::string, double> out;
    for (const auto &[scaffold, split] : splits) {
      // BUG(torch-inference-without-no-grad): the scaffold loop never calls
      // backward, and nothing turns autograd off.
      auto pred = model_->forward(split.atoms.to(cfg_.device), split.adj.to(cfg_.device));
      out[scaffold] = (pred - split.logS.to(cfg_.device)).abs().mean().item<double>();
    }
    return out;
  }

  // Scores one chunk of a library; the caller holds the no-grad guard.
  torch::Tensor predict_chunks(const MolBatch &lib, int64_t chunk) {
    std::vector<torch::Tensor> parts;
    for (int64_t s = 0; s < lib.atoms.size(0); s += chunk) {
      const int64_t n = std::min<int64_t>(chunk, lib.atoms.size(0) - s);
      // OK(torch-inference-without-no-grad): the only caller holds a NoGradGuard.
      parts.push_back(model_->forward(lib.atoms.narrow(0, s, n).to(cfg_.device),
                                      lib.adj.narrow(0, s, n).to(cfg_.device)));
    }
    return torch::cat(parts).cpu();
  }

  size_t logged_steps() const { return history_.size(); }

 private:
  RunConfig cfg_;
  Mpnn model_;
  torch::optim::Adam opt_;
  std::vector<torch::Tensor> history_;
};

// Screens the whole library in chunks of 4096 molecules.
torch::Tensor screen_library(Trainer &trainer, const MolBatch &library) {
  torch::NoGradGuard no_grad;
  torch::Tensor scores;
  bool out_of_memory = false;
  try {
    scores = trainer.predict_chunks(library, 4096);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the flag sends the same library at
    // the same chunk size through again; the allocator had already emptied
    // its cache before raising.
    c10::cuda::CUDACachingAllocator::emptyCache();
    out_of_memory = true;
  }
  if (out_of_memory)
    scores = trainer.predict_chunks(library, 4096);
  return scores;
}

int main() {
  torch::manual_seed(17);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  const RunConfig cfg = RunBuilder().on(device).hidden(96).epochs(6).lr(5e-4).build();

  Trainer trainer(cfg);
  trainer.fit();

  std::map<std::string, MolBatch> splits{{"benzene", random_molecules(256, 24)},
                                         {"pyridine", random_molecules(256, 24)},
                                         {"steroid", random_molecules(128, 40)}};
  for (const auto &[scaffold, mae] : trainer.evaluate(splits))
    std::cout << scaffold << " mae " << mae << "\n";

  auto library = random_molecules(20000, 24);
  auto scores = screen_library(trainer, library);
  std::cout << "best candidate " << scores.argmax().item<int64_t>() << " of " << scores.size(0) << " ("
            << trainer.logged_steps() << " steps logged)\n";
  return 0;
}
