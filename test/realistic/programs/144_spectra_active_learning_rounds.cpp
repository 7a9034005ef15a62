// Active learning for a weld-defect classifier on vibration spectra. Each
// round retrains an MLP (BatchNorm + Dropout) from scratch on the labelled
// set, scores the unlabelled pool by predictive entropy, and sends the most
// uncertain spectra to the annotator (here: reveals their labels). An RAII
// helper reclaims cached GPU memory when a round's scope ends.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kBins = 128, kDefects = 4, kBatch = 64, kAcquire = 96;

struct SpectraNetImpl : torch::nn::Module {
  SpectraNetImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kBins, 128), torch::nn::BatchNorm1d(128),
                                                         torch::nn::ReLU(), torch::nn::Dropout(0.3),
                                                         torch::nn::Linear(128, kDefects)))) {}
  torch::Tensor forward(const torch::Tensor &spectra) { return net->forward(spectra.log1p()); }
  torch::nn::Sequential net;
};
TORCH_MODULE(SpectraNet);

struct Split {
  torch::Tensor x, y;
};

// Defect d puts a resonance peak near bin 20 + 25 d on top of broadband noise.
Split synth_spectra(int64_t n, torch::Device device) {
  auto y = torch::randint(kDefects, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto bins = torch::arange(kBins, torch::TensorOptions().device(device)).unsqueeze(0);
  auto centre = (20 + 25 * y).to(torch::kFloat).unsqueeze(1) + 3 * torch::randn({n, 1}, device);
  auto peak = torch::exp(-(bins - centre).pow(2) / 18.0);
  return {peak * (1 + torch::rand({n, 1}, device)) + 0.3 * torch::rand({n, kBins}, device), y};
}

class CachedMemoryReclaimer {
public:
  explicit CachedMemoryReclaimer(bool on_gpu) : on_gpu_(on_gpu) {}
  ~CachedMemoryReclaimer() {
    if (on_gpu_)
      // BUG(torch-empty-cache-in-loop): main() declares one at the top of
      // every active-learning round, so this runs once per round.
      c10::cuda::CUDACachingAllocator::emptyCache();
  }

private:
  bool on_gpu_;
};

std::vector<torch::Tensor> train_round(SpectraNet &net, const Split &labelled, int epochs) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3).weight_decay(1e-4));
  std::vector<torch::Tensor> epoch_loss(static_cast<size_t>(epochs), torch::zeros({}, labelled.x.options()));
  const int64_t n = labelled.x.size(0);
  auto run_epoch = [&](int epoch) {
    auto perm = torch::randperm(n, labelled.y.options());
    for (int64_t start = 0; start + kBatch <= n; start += kBatch) {
      if (start == 0)
        opt.zero_grad();
      auto idx = perm.narrow(0, start, kBatch);
      // OK(torch-eval-mode-missing): train() at the top of the round.
      auto logits = net->forward(labelled.x.index_select(0, idx));
      auto loss = F::cross_entropy(logits, labelled.y.index_select(0, idx));
      loss.backward();
      // BUG(torch-missing-zero-grad): the gradients are reset only before
      // an epoch's first batch; every later step adds the earlier batches'.
      opt.step();
      // BUG(torch-loss-accumulation-graph): the element outlives the batch
      // loop and keeps each batch's graph.
      epoch_loss[static_cast<size_t>(epoch)] += loss;
    }
  };
  for (int epoch = 0; epoch < epochs; ++epoch)
    run_epoch(epoch);
  return epoch_loss;
}

// Predictive entropy of every pool spectrum, in chunks.
torch::Tensor entropy_scores(SpectraNet net, const torch::Tensor &pool_x, int64_t chunk) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < pool_x.size(0); start += chunk) {
    const int64_t len = std::min(chunk, pool_x.size(0) - start);
    // BUG(torch-eval-mode-missing): main() runs this strategy right after
    // train_round(), which left the net in training mode; Dropout makes the
    // entropies random and BatchNorm uses the chunk's statistics.
    auto probs = net->forward(pool_x.narrow(0, start, len)).softmax(1);
    // OK(torch-loss-accumulation-graph): computed under the guard.
    parts.push_back(-(probs * probs.clamp_min(1e-8).log()).sum(1));
  }
  return torch::cat(parts);
}

// A pluggable acquisition strategy: pool spectra -> one score per spectrum.
using Acquisition = std::function<torch::Tensor(SpectraNet, const torch::Tensor &, int64_t)>;

void freeze_for_eval(torch::nn::Module &module) { module.eval(); }

double test_accuracy(SpectraNet &net, const Split &test) {
  freeze_for_eval(*net);
  int64_t correct = 0;
  for (int64_t start = 0; start < test.x.size(0); start += 1024) {
    const int64_t len = std::min<int64_t>(1024, test.x.size(0) - start);
    // BUG(torch-inference-without-no-grad): eval() through the helper, but
    // no guard: autograd records every test chunk.
    // OK(torch-eval-mode-missing): freeze_for_eval() switched the net to eval().
    auto pred = net->forward(test.x.narrow(0, start, len)).argmax(1);
    correct += pred.eq(test.y.narrow(0, start, len)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(test.x.size(0));
}

// Moves the pool rows at `picked` into the labelled set.
void acquire(Split &labelled, Split &pool, const torch::Tensor &picked) {
  auto keep = torch::ones({pool.x.size(0)}, pool.y.options().dtype(torch::kBool));
  keep.index_fill_(0, picked, false);
  labelled.x = torch::cat({labelled.x, pool.x.index_select(0, picked)});
  labelled.y = torch::cat({labelled.y, pool.y.index_select(0, picked)});
  pool.x = pool.x.index({keep});
  pool.y = pool.y.index({keep});
}

int main() {
  torch::manual_seed(144);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Split labelled = synth_spectra(128, device), pool = synth_spectra(20000, device), test = synth_spectra(4000, device);
  std::map<int, double> accuracy_by_round;
  const Acquisition acquisition = entropy_scores;

  for (int round = 0; round < 8; ++round) {
    CachedMemoryReclaimer reclaim(device.is_cuda());
    SpectraNet net;
    net->to(device);
    auto losses = train_round(net, labelled, 10);
    auto scores = acquisition(net, pool.x, 2048);
    accuracy_by_round[round] = test_accuracy(net, test);
    std::cout << "round " << round << " labelled " << labelled.x.size(0) << " last-epoch loss "
              << losses.back().item<double>() << " test acc " << std::setprecision(3) << accuracy_by_round[round]
              << '\n';
    acquire(labelled, pool, std::get<1>(scores.topk(kAcquire)));
  }
  return 0;
}
