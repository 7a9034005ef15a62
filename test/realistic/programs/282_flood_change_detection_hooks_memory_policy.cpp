// Flood change detection on pairs of 4-band (RGB + NIR) satellite tiles taken
// before and after an event. A siamese encoder with batch norm embeds both
// dates; a head with dropout turns |a - b| and a * b into a per-pixel change
// logit. The trainer runs a validation hook at the end of every epoch and a
// memory policy from the run configuration; whole scenes are predicted tile
// by tile, with a smaller tile when the larger one runs out of memory.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace cd {

constexpr int64_t kBands = 4, kTile = 64;

struct TilePair {
  torch::Tensor before, after;  // [B, 4, 64, 64]
  torch::Tensor change;         // [B, 64, 64] 0/1
};

TilePair synth_pair(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto before = torch::rand({n, kBands, kTile, kTile}, gen);
  auto flooded = (torch::rand({n, 1, kTile, kTile}, gen) > 0.85).to(torch::kFloat);
  auto after = before * (1 - flooded) + flooded * torch::tensor({0.05, 0.08, 0.2, 0.02}).view({1, kBands, 1, 1});
  return {before, after, flooded.squeeze(1)};
}

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): the selection is guarded by is_available().
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

void drain(const torch::Device &device) {
  if (device.is_cuda())
    c10::cuda::getCurrentCUDAStream().synchronize();
}

struct ChangeNetImpl : nn::Module {
  ChangeNetImpl()
      : enc(register_module("enc", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kBands, 32, 3).padding(1)),
                                                   nn::BatchNorm2d(32), nn::ReLU(),
                                                   nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1)), nn::ReLU()))),
        head(register_module("head", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(64, 32, 3).padding(1)), nn::ReLU(),
                                                     nn::Dropout(0.1), nn::Conv2d(nn::Conv2dOptions(32, 1, 1))))) {}
  torch::Tensor forward(const torch::Tensor &before, const torch::Tensor &after) {
    auto a = enc->forward(before), b = enc->forward(after);
    return head->forward(torch::cat({(a - b).abs(), a * b}, 1)).squeeze(1);
  }
  nn::Sequential enc, head;
};
TORCH_MODULE(ChangeNet);

}  // namespace cd

namespace metrics {

struct Counts {
  torch::Tensor tp_fp_fn = torch::zeros({3});
  double iou() const { return tp_fp_fn[0].item<double>() / std::max(1.0, tp_fp_fn.sum().item<double>()); }
};

void update(Counts &counts, const torch::Tensor &logits, const torch::Tensor &target) {
  auto pred = logits > 0;
  auto truth = target > 0.5;
  auto stats = torch::stack({(pred & truth).sum(), (pred & ~truth).sum(), (~pred & truth).sum()}).to(torch::kFloat);
  // BUG(torch-host-sync-in-loop): fit() calls update() on every step; the
  // .cpu() waits for the step's kernels each time.
  counts.tp_fp_fn += stats.cpu();
}

void log_every(int64_t step, int64_t every, const torch::Tensor &loss) {
  if (step % every == 0)
    // OK(torch-host-sync-in-loop): one read every `every` steps.
    std::cout << "step " << step << " bce " << loss.item<float>() << '\n';
}

}  // namespace metrics

using namespace cd;

struct MemoryPolicy {
  std::function<void()> after_epoch;
};

class ChangeTrainer {
 public:
  ChangeTrainer(ChangeNet net, torch::Device device, MemoryPolicy policy)
      : net_(std::move(net)), device_(device), policy_(std::move(policy)),
        opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  void set_validation_hook(std::function<void(int)> hook) { on_epoch_end_ = std::move(hook); }

  void fit(const std::vector<TilePair> &tiles, int epochs) {
    const auto pos_weight = torch::full({1}, 5.0, torch::TensorOptions().device(device_));
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (const auto &t : tiles) {
        // OK(torch-non-blocking-pageable): main() pins the tiles when it trains on a GPU.
        auto before = t.before.to(device_, /*non_blocking=*/true);
        auto after = t.after.to(device_, /*non_blocking=*/true);
        auto target = t.change.to(device_);
        opt_.zero_grad();
        // OK(torch-eval-mode-missing): the validation hook puts the model back in train() when it is done.
        auto logits = net_->forward(before, after);
        auto loss = F::binary_cross_entropy_with_logits(
            logits, target, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight));
        loss.backward();
        opt_.step();
        metrics::update(counts_, logits.detach(), target);
        // OK(torch-loss-accumulation-graph): the history keeps detached values only.
        history_.push_back(loss.detach());
        metrics::log_every(++step_, 25, loss);
      }
      if (on_epoch_end_)
        on_epoch_end_(epoch);
      if (policy_.after_epoch)
        policy_.after_epoch();
    }
    std::cout << "train IoU " << counts_.iou() << '\n';
  }

 private:
  ChangeNet net_;
  torch::Device device_;
  MemoryPolicy policy_;
  torch::optim::Adam opt_;
  std::function<void(int)> on_epoch_end_;
  metrics::Counts counts_;
  std::vector<torch::Tensor> history_;
  int64_t step_ = 0;
};

// Sliding tiles over a whole scene [4, H, W]; returns the change probability.
torch::Tensor predict_scene(ChangeNet &net, const torch::Tensor &before, const torch::Tensor &after, int64_t tile,
                            const torch::Device &device) {
  torch::NoGradGuard no_grad;
  auto prob = torch::zeros({before.size(1), before.size(2)}, torch::TensorOptions().device(device));
  for (int64_t y = 0; y + tile <= before.size(1); y += tile)
    for (int64_t x = 0; x + tile <= before.size(2); x += tile) {
      auto b = before.slice(1, y, y + tile).slice(2, x, x + tile).unsqueeze(0).to(device);
      auto a = after.slice(1, y, y + tile).slice(2, x, x + tile).unsqueeze(0).to(device);
      // OK(torch-inference-without-no-grad, torch-eval-mode-missing): guard above; main() calls eval() first.
      prob.slice(0, y, y + tile).slice(1, x, x + tile).copy_(torch::sigmoid(net->forward(b, a)).squeeze(0));
    }
  return prob;
}

torch::Tensor predict_scene_safe(ChangeNet &net, const torch::Tensor &before, const torch::Tensor &after,
                                 const torch::Device &device) {
  try {
    return predict_scene(net, before, after, 512, device);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry uses a quarter of the tile area.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return predict_scene(net, before, after, 256, device);
  }
}

struct ChangeMap {
  torch::Tensor prob;   // [B, 64, 64] on the host
  torch::Tensor truth;  // [B, 64, 64]
};

int main() {
  torch::manual_seed(282);
  const torch::Device device = pick_device();
  std::vector<TilePair> train, val;
  for (uint64_t i = 0; i < 40; ++i)
    train.push_back(synth_pair(16, i));
  for (uint64_t i = 0; i < 5; ++i)
    val.push_back(synth_pair(16, 700 + i));
  if (device.is_cuda())
    for (auto &t : train)
      t.before = t.before.pin_memory(), t.after = t.after.pin_memory();

  ChangeNet net;
  net->to(device);
  ChangeTrainer trainer(net, device, MemoryPolicy{[] {
                          if (torch::cuda::is_available())
                            // BUG(torch-empty-cache-in-loop): the policy runs after every
                            // epoch of fit(); the next epoch cudaMallocs it all again.
                            c10::cuda::CUDACachingAllocator::emptyCache();
                        }});
  trainer.set_validation_hook([&](int epoch) {
    net->eval();
    metrics::Counts counts;
    {
      torch::NoGradGuard no_grad;
      for (const auto &v : val) {
        // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
        auto logits = net->forward(v.before.to(device), v.after.to(device));
        // OK(torch-host-sync-in-loop): validation batches, run by the hook once per epoch.
        counts.tp_fp_fn += torch::stack({((logits > 0) & (v.change.to(device) > 0.5)).sum(),
                                         ((logits > 0) & (v.change.to(device) <= 0.5)).sum(),
                                         ((logits <= 0) & (v.change.to(device) > 0.5)).sum()}).to(torch::kFloat).cpu();
      }
    }
    // OK(torch-host-sync-in-loop): once per epoch, from the hook.
    std::cout << "epoch " << epoch << " val IoU " << counts.iou() << '\n';
    net->train();
  });
  trainer.fit(train, 6);

  net->eval();
  auto scene_before = torch::rand({kBands, 1024, 1024}), scene_after = torch::rand({kBands, 1024, 1024});
  auto scene_prob = predict_scene_safe(net, scene_before, scene_after, device);
  auto scene_host = scene_prob.to(torch::kCPU, /*non_blocking=*/true);
  drain(device);
  // OK(torch-non-blocking-d2h-race): drain() synchronised the stream before the host reads it.
  std::cout << "flooded share " << (scene_host > 0.5).to(torch::kFloat).mean().item<double>() << '\n';

  auto export_map = [&](const TilePair &t) {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): main() called eval() before the scene and the export.
    auto prob = torch::sigmoid(net->forward(t.before.to(device), t.after.to(device)));
    const auto threshold = torch::tensor(0.5);
    // OK(torch-device-mismatch): a 0-dim CPU threshold is allowed next to a CUDA tensor.
    auto mask = (prob > threshold).to(torch::kFloat);
    return ChangeMap{(prob * mask).to(torch::kCPU, /*non_blocking=*/true), t.change};
  };
  ChangeMap map = export_map(val.front());
  // BUG(torch-non-blocking-d2h-race): the map's probabilities were copied
  // back with non_blocking and nothing synchronised since.
  auto acc = map.prob.accessor<float, 3>();
  auto truth = map.truth.accessor<float, 3>();
  int64_t agree = 0;
  for (int64_t i = 0; i < kTile; ++i)
    for (int64_t j = 0; j < kTile; ++j)
      agree += (acc[0][i][j] > 0.5f) == (truth[0][i][j] > 0.5f);
  std::cout << "pixel agreement " << static_cast<double>(agree) / (kTile * kTile) << '\n';
}
