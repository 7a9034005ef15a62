// Protein-ligand binding affinity: ligand atoms and pocket residues are
// embedded, the atoms cross-attend to the pocket, and the pooled complex is
// regressed to pKd. A collate function pads complexes into a std::tuple of
// host tensors that callers unpack with std::tie; the trainer keeps its
// TensorOptions as a member and allocates its device buffers from them. After
// pre-training, the model is fine-tuned on a small assay with gradient
// accumulation and then screens a compound library.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <tuple>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace affinity {

constexpr int64_t kAtomFeat = 16, kResFeat = 24, kHidden = 64, kMaxAtoms = 32, kMaxRes = 48;

struct AffinityNetImpl : nn::Module {
  AffinityNetImpl()
      : atom_enc(register_module("atom_enc", nn::Linear(kAtomFeat, kHidden))),
        res_enc(register_module("res_enc", nn::Linear(kResFeat, kHidden))),
        head(register_module("head", nn::Sequential(nn::Linear(kHidden, kHidden), nn::ReLU(), nn::Dropout(0.2), nn::Linear(kHidden, 1)))) {}

  // atoms B x A x F, mask B x A (1 for real atoms), residues B x R x F -> B
  torch::Tensor forward(const torch::Tensor &atoms, const torch::Tensor &mask, const torch::Tensor &residues) {
    auto a = torch::relu(atom_enc->forward(atoms));
    auto r = torch::relu(res_enc->forward(residues));
    auto attn = torch::softmax(torch::bmm(a, r.transpose(1, 2)) / std::sqrt(static_cast<double>(kHidden)), 2);
    auto h = (a + torch::bmm(attn, r)) * mask.unsqueeze(2);
    auto pooled = h.sum(1) / mask.sum(1, /*keepdim=*/true).clamp_min(1.0);
    return head->forward(pooled).squeeze(1);
  }

  nn::Linear atom_enc, res_enc;
  nn::Sequential head;
};
TORCH_MODULE(AffinityNet);

struct Complex {
  torch::Tensor atoms;     // n_atoms x kAtomFeat
  torch::Tensor residues;  // n_res x kResFeat
  float pkd = 0.f;
};

Complex synth_complex() {
  const int64_t na = torch::randint(12, kMaxAtoms + 1, {1}).item<int64_t>();
  const int64_t nr = torch::randint(20, kMaxRes + 1, {1}).item<int64_t>();
  Complex c{torch::randn({na, kAtomFeat}), torch::randn({nr, kResFeat}), 0.f};
  c.pkd = 6.f + 0.5f * c.atoms.narrow(1, 0, 4).mean().item<float>() * static_cast<float>(nr) / 10.f;
  return c;
}

// Pads complexes to fixed sizes on the host: atoms, atom mask, residues, pKd.
using Collated = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>;
Collated collate(const std::vector<Complex> &items) {
  const auto b = static_cast<int64_t>(items.size());
  auto atoms = torch::zeros({b, kMaxAtoms, kAtomFeat});
  auto mask = torch::zeros({b, kMaxAtoms});
  auto residues = torch::zeros({b, kMaxRes, kResFeat});
  auto pkd = torch::empty({b});
  for (int64_t i = 0; i < b; ++i) {
    const auto &c = items[static_cast<size_t>(i)];
    const int64_t na = c.atoms.size(0), nr = c.residues.size(0);
    atoms[i].narrow(0, 0, na).copy_(c.atoms);
    mask[i].narrow(0, 0, na).fill_(1.0);
    residues[i].narrow(0, 0, nr).copy_(c.residues);
    pkd[i] = c.pkd;
  }
  return Collated{atoms, mask, residues, pkd};
}

std::vector<Complex> slice(const std::vector<Complex> &data, size_t begin, size_t count) {
  return std::vector<Complex>(data.begin() + static_cast<std::ptrdiff_t>(begin),
                              data.begin() + static_cast<std::ptrdiff_t>(std::min(begin + count, data.size())));
}

class AffinityTrainer {
 public:
  AffinityTrainer(AffinityNet net, torch::Device device, double lr)
      : net_(std::move(net)), opts_(torch::TensorOptions().dtype(torch::kFloat).device(device)),
        opt_(net_->parameters(), torch::optim::AdamOptions(lr)) {
    net_->to(device);
  }

  double fit_epoch(const std::vector<Complex> &train, size_t batch) {
    net_->train();
    // OK(torch-host-sync-in-loop, torch-loss-accumulation-graph): detached, summed on the device, read after the loop.
    auto loss_sum = torch::zeros({}, opts_);
    int64_t steps = 0;
    for (size_t i = 0; i < train.size(); i += batch) {
      torch::Tensor atoms, mask, residues, pkd;
      std::tie(atoms, mask, residues, pkd) = collate(slice(train, i, batch));
      atoms = atoms.to(opts_);
      mask = mask.to(opts_);
      residues = residues.to(opts_);
      opt_.zero_grad();
      auto pred = net_->forward(atoms, mask, residues);
      // BUG(torch-device-mismatch): the tie moved atoms, mask and residues to the device but the pKd targets stayed on the host.
      auto loss = F::smooth_l1_loss(pred, pkd);
      loss.backward();
      opt_.step();
      loss_sum += loss.detach();
      // OK(torch-host-sync-in-loop): logged every 20th step only.
      if (++steps % 20 == 0) std::cout << "  step " << steps << " loss " << loss.item<double>() << '\n';
    }
    return loss_sum.item<double>() / static_cast<double>(std::max<int64_t>(steps, 1));
  }

  double rmse(const std::vector<Complex> &test) {
    torch::NoGradGuard no_grad;
    net_->eval();
    const auto n = static_cast<int64_t>(test.size());
    auto preds = torch::empty({n}, opts_);
    std::vector<float> pkd(test.size());
    for (int64_t i = 0; i < n; i += 16) {
      const int64_t m = std::min<int64_t>(16, n - i);
      torch::Tensor atoms, mask, residues;
      std::tie(atoms, mask, residues, std::ignore) = collate(slice(test, static_cast<size_t>(i), static_cast<size_t>(m)));
      // OK(torch-device-mismatch): every input was moved with the trainer's options.
      preds.narrow(0, i, m).copy_(net_->forward(atoms.to(opts_), mask.to(opts_), residues.to(opts_)));
      for (int64_t j = i; j < i + m; ++j) pkd[static_cast<size_t>(j)] = test[static_cast<size_t>(j)].pkd;
    }
    auto targets = torch::from_blob(pkd.data(), {n}, torch::kFloat);
    // BUG(torch-device-mismatch): the predictions were allocated from opts_ on the device; the targets wrap host memory.
    return (preds - targets).pow(2).mean().sqrt().item<double>();
  }

  // Collates the validation set once and keeps the inputs on the device between epochs.
  void stage_validation(const std::vector<Complex> &val, size_t batch) {
    staged_.clear();
    for (size_t i = 0; i < val.size(); i += batch) staged_.push_back(collate(slice(val, i, batch)));
    for (auto &b : staged_) {
      std::get<0>(b) = std::get<0>(b).to(opts_);
      std::get<1>(b) = std::get<1>(b).to(opts_);
      std::get<2>(b) = std::get<2>(b).to(opts_);
    }
  }

  double staged_loss() {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto total = torch::zeros({}, opts_);
    int64_t count = 0;
    for (const auto &[atoms, mask, residues, pkd] : staged_) {
      auto pred = net_->forward(atoms, mask, residues);
      // BUG(torch-device-mismatch): staging moved the three inputs of every batch but left its pKd column on the host.
      total += F::smooth_l1_loss(pred, pkd, F::SmoothL1LossFuncOptions().reduction(torch::kSum));
      count += pred.size(0);
    }
    return total.item<double>() / static_cast<double>(std::max<int64_t>(count, 1));
  }

  // A few measured complexes from the project's own assay; too few for a real batch.
  void fine_tune(const std::vector<Complex> &assay, size_t accum) {
    net_->train();
    opt_.zero_grad();
    std::vector<float> trace;
    for (size_t i = 0; i < assay.size(); ++i) {
      torch::Tensor atoms, mask, residues, pkd;
      std::tie(atoms, mask, residues, pkd) = collate({assay[i]});
      auto pred = net_->forward(atoms.to(opts_), mask.to(opts_), residues.to(opts_));
      // OK(torch-device-mismatch): the target is moved with the same options as the inputs.
      auto loss = F::mse_loss(pred, pkd.to(opts_));
      // BUG(torch-grad-accumulation-unscaled): the mean loss of each complex is summed over accum backward passes before one step.
      loss.backward();
      if ((i + 1) % accum == 0) {
        opt_.step();
        opt_.zero_grad();
      }
      // BUG(torch-host-sync-in-loop): every fine-tune step reads its prediction back for the trace.
      trace.push_back(pred.detach().item<float>());
    }
    float drift = 0.f;
    for (size_t i = 0; i < trace.size(); ++i) drift += std::abs(trace[i] - assay[i].pkd);
    std::cout << "fine-tune mean abs drift " << drift / static_cast<float>(std::max<size_t>(trace.size(), 1)) << '\n';
  }

  std::vector<size_t> screen(const std::vector<Complex> &library, size_t top_k) {
    torch::NoGradGuard no_grad;
    const auto n = static_cast<int64_t>(library.size());
    auto scores = torch::empty({n}, opts_);
    for (int64_t i = 0; i < n; i += 32) {
      const int64_t m = std::min<int64_t>(32, n - i);
      torch::Tensor atoms, mask, residues;
      std::tie(atoms, mask, residues, std::ignore) = collate(slice(library, static_cast<size_t>(i), static_cast<size_t>(m)));
      // BUG(torch-eval-mode-missing): fine_tune() left the network in training mode; dropout perturbs every screening score.
      scores.narrow(0, i, m).copy_(net_->forward(atoms.to(opts_), mask.to(opts_), residues.to(opts_)));
    }
    // OK(torch-host-sync-in-loop): one read-back after screening.
    auto top = std::get<1>(scores.topk(static_cast<int64_t>(std::min<size_t>(top_k, library.size())))).cpu();
    std::vector<size_t> picked;
    for (int64_t j = 0; j < top.size(0); ++j) picked.push_back(static_cast<size_t>(top[j].item<int64_t>()));
    return picked;
  }

 private:
  AffinityNet net_;
  torch::TensorOptions opts_;
  torch::optim::Adam opt_;
  std::vector<Collated> staged_;
};

}  // namespace affinity

int main() {
  using namespace affinity;
  torch::manual_seed(369);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  std::vector<Complex> train, test, assay, library;
  for (int i = 0; i < 256; ++i) train.push_back(synth_complex());
  for (int i = 0; i < 64; ++i) test.push_back(synth_complex());
  for (int i = 0; i < 12; ++i) assay.push_back(synth_complex());
  for (int i = 0; i < 200; ++i) library.push_back(synth_complex());

  AffinityTrainer trainer(AffinityNet(), device, 1e-3);
  trainer.stage_validation(test, 32);
  for (int epoch = 0; epoch < 4; ++epoch) {
    const double loss = trainer.fit_epoch(train, 32);
    std::cout << "epoch " << epoch << " loss " << loss << " val loss " << trainer.staged_loss() << '\n';
  }
  std::cout << "test rmse " << trainer.rmse(test) << '\n';
  trainer.fine_tune(assay, 4);
  for (size_t idx : trainer.screen(library, 5)) std::cout << "hit " << idx << " pKd " << library[idx].pkd << '\n';
  return 0;
}
