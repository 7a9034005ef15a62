// Protein secondary-structure prediction (3 states: helix, strand, coil) from
// one-hot residues plus a PSSM profile, 42 channels per residue. Two dilated
// residual conv networks co-train on labelled PDB chains and on pseudo-labels
// for unlabelled metagenomic chains: each epoch one network learns and the
// other labels, then they swap roles. Long chains are cut into windows and a
// few windows' gradients are accumulated before each step.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace ss {

constexpr int64_t kChannels = 42, kStates = 3, kWindow = 256;

struct Chain {
  torch::Tensor x;  // [1, 42, L]
  torch::Tensor y;  // [L], -1 where the state is unknown
};

std::vector<Chain> synth_chains(int64_t n, bool labelled, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<Chain> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = kWindow * (1 + i % 4);
    auto x = torch::randn({1, kChannels, len}, gen);
    auto y = labelled ? torch::randint(kStates, {len}, gen, torch::TensorOptions().dtype(torch::kLong))
                      : torch::full({len}, -1, torch::kLong);
    out.push_back({x, y});
  }
  return out;
}

struct DilatedBlockImpl : nn::Module {
  DilatedBlockImpl(int64_t ch, int64_t dilation)
      : body(register_module(
            "body", nn::Sequential(nn::Conv1d(nn::Conv1dOptions(ch, ch, 3).padding(dilation).dilation(dilation)),
                                   nn::BatchNorm1d(ch), nn::ReLU(),
                                   nn::Conv1d(nn::Conv1dOptions(ch, ch, 3).padding(dilation).dilation(dilation)),
                                   nn::BatchNorm1d(ch)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return torch::relu(x + body->forward(x)); }
  nn::Sequential body;
};
TORCH_MODULE(DilatedBlock);

struct SSNetImpl : nn::Module {
  SSNetImpl()
      : stem(register_module("stem", nn::Conv1d(kChannels, 64, 1))),
        block1(register_module("block1", DilatedBlock(64, 1))),
        block2(register_module("block2", DilatedBlock(64, 4))),
        head(register_module("head", nn::Conv1d(64, kStates, 1))) {}
  // [B, 42, L] -> [B, 3, L]
  torch::Tensor forward(const torch::Tensor &x) { return head->forward(block2->forward(block1->forward(stem->forward(x)))); }
  nn::Conv1d stem;
  DilatedBlock block1, block2;
  nn::Conv1d head;
};
TORCH_MODULE(SSNet);

struct RunConfig {
  int epochs = 6;
  int64_t accum_windows = 4;
  double lr = 3e-4;
  double pseudo_threshold = 0.9;
};

struct DeviceWindow {
  torch::Tensor x, y;
};

DeviceWindow upload(const Chain &c, int64_t start, const torch::Device &device) {
  auto x = c.x.narrow(2, start, kWindow);
  auto y = c.y.narrow(0, start, kWindow);
  // BUG(torch-non-blocking-pageable): the chains are plain host tensors from
  // torch::randn, never pinned: the copy is synchronous anyway.
  return {x.to(device, /*non_blocking=*/true), y.to(device)};
}

class CoTrainer {
 public:
  CoTrainer(const RunConfig &cfg, const torch::Device &device) : cfg_(cfg), device_(device) {
    for (size_t i = 0; i < nets_.size(); ++i) {
      nets_[i]->to(device_);
      opts_[i] = std::make_unique<torch::optim::AdamW>(nets_[i]->parameters(), torch::optim::AdamWOptions(cfg_.lr));
    }
  }

  std::array<SSNet, 2> &nets() { return nets_; }

  void fit(const std::vector<Chain> &labelled, const std::vector<Chain> &unlabelled, const std::vector<Chain> &probe) {
    for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
      SSNet &learner = nets_[0];
      SSNet &labeller = nets_[1];
      torch::optim::AdamW &opt = *opts_[0];
      learner->train();
      opt.zero_grad();
      int64_t micro = 0;
      for (const auto &chain : labelled) {
        for (int64_t s = 0; s + kWindow <= chain.x.size(2); s += kWindow) {
          auto w = upload(chain, s, device_);
          // OK(torch-eval-mode-missing): train() at the top of the epoch.
          auto logits = learner->forward(w.x);
          auto loss = F::cross_entropy(logits, w.y.unsqueeze(0), F::CrossEntropyFuncOptions().ignore_index(-1));
          // BUG(torch-grad-accumulation-unscaled): cfg_.accum_windows windows
          // are summed into one step and the mean loss is never divided by it.
          loss.backward();
          if (++micro % cfg_.accum_windows == 0) {
            opt.step();
            opt.zero_grad();
          }
        }
      }
      for (const auto &chain : unlabelled) {
        auto x = chain.x.to(device_);
        torch::Tensor pseudo;
        {
          torch::NoGradGuard no_grad;
          // BUG(torch-eval-mode-missing): nothing puts the labelling network in
          // eval mode: both come from the constructor in training mode and only
          // the learner is ever switched.
          auto prob = torch::softmax(labeller->forward(x), 1);
          auto top = prob.max(1);
          pseudo = std::get<1>(top).masked_fill(std::get<0>(top) < cfg_.pseudo_threshold, -1);
        }
        opt.zero_grad();
        auto loss = F::cross_entropy(learner->forward(x), pseudo, F::CrossEntropyFuncOptions().ignore_index(-1));
        loss.backward();
        opt.step();
      }
      std::swap(nets_[0], nets_[1]);
      std::swap(opts_[0], opts_[1]);
      std::cout << "epoch " << epoch << " agreement " << agreement(probe) << '\n';
    }
  }

 private:
  // Share of residues where the two networks predict the same state.
  double agreement(const std::vector<Chain> &probe) {
    torch::NoGradGuard no_grad;
    auto same = torch::zeros({}, torch::TensorOptions().device(device_).dtype(torch::kLong));
    int64_t total = 0;
    for (const auto &c : probe) {
      auto x = c.x.to(device_);
      std::array<torch::Tensor, 2> states;
      for (size_t i = 0; i < nets_.size(); ++i)
        // BUG(torch-eval-mode-missing): fit() calls this between epochs, with
        // both networks in training mode.
        states[i] = nets_[i]->forward(x).argmax(1);
      same += states[0].eq(states[1]).sum();
      total += states[0].numel();
    }
    // OK(torch-host-sync-in-loop): one read per epoch.
    return same.item<double>() / std::max<int64_t>(total, 1);
  }

  RunConfig cfg_;
  torch::Device device_;
  std::array<SSNet, 2> nets_;
  std::array<std::unique_ptr<torch::optim::AdamW>, 2> opts_;
};

double q3(SSNet &net, const std::vector<Chain> &chains, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  int64_t ok = 0, n = 0;
  for (const auto &c : chains) {
    auto y = c.y.to(device);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): main() calls eval() on both; guard above.
    auto pred = net->forward(c.x.to(device)).argmax(1).squeeze(0);
    auto known = y >= 0;
    ok += pred.eq(y).logical_and(known).sum().item<int64_t>();
    n += known.sum().item<int64_t>();
  }
  return static_cast<double>(ok) / std::max<int64_t>(n, 1);
}

// Short supervised polish of one network, kept close to a frozen reference.
void polish(SSNet &net, SSNet &reference, const std::vector<Chain> &chains, const torch::Device &device) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  for (const auto &c : chains) {
    auto x = c.x.to(device);
    torch::Tensor ref;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): main() puts the reference in eval mode.
      ref = torch::softmax(reference->forward(x), 1);
    }
    opt.zero_grad();
    // OK(torch-eval-mode-missing): main() calls train() on this network, eval() on the other one.
    auto logits = net->forward(x);
    auto loss = F::cross_entropy(logits, c.y.to(device).unsqueeze(0), F::CrossEntropyFuncOptions().ignore_index(-1)) +
                0.1 * F::kl_div(torch::log_softmax(logits, 1), ref, F::KLDivFuncOptions().reduction(torch::kBatchMean));
    loss.backward();
    opt.step();
  }
}

std::string decode(const torch::Tensor &states) {
  static const char kCode[] = {'H', 'E', 'C'};
  std::string out;
  auto acc = states.accessor<uint8_t, 1>();
  for (int64_t i = 0; i < acc.size(0); ++i)
    out.push_back(kCode[acc[i]]);
  return out;
}

std::string predict_states(SSNet &net, const Chain &c, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): main() switches both networks to eval before it predicts.
  auto states = net->forward(c.x.to(device)).argmax(1).squeeze(0).to(torch::kByte);
  auto host = states.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the string is built from the host copy
  // before anything waits for the copy to finish.
  return decode(host);
}

}  // namespace ss

using namespace ss;

int main() {
  torch::manual_seed(287);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto labelled = synth_chains(48, true, 1), unlabelled = synth_chains(96, false, 2);
  auto probe = synth_chains(8, true, 3), test = synth_chains(16, true, 4);

  RunConfig cfg;
  CoTrainer trainer(cfg, device);
  trainer.fit(labelled, unlabelled, probe);

  auto &nets = trainer.nets();
  nets[0]->train();
  nets[1]->eval();
  polish(nets[0], nets[1], labelled, device);
  for (auto &net : nets)
    net->eval();
  for (size_t i = 0; i < trainer.nets().size(); ++i)
    std::cout << "net " << i << " Q3 " << q3(trainer.nets()[i], test, device) << '\n';
  std::cout << predict_states(trainer.nets()[0], test.front(), device).substr(0, 80) << '\n';
  return 0;
}
