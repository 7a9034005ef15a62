// Classifies semiconductor wafer maps (32x32 pass/fail die grids) into
// defect signatures: none, centre, edge ring, scratch, local cluster. A small
// trainer exposes hook lists in the style of the Python frameworks the team
// came from: `on_step_end` callbacks run after every optimizer step and
// `on_epoch_end` callbacks after every epoch. The main run registers the
// gradient reset and the validation as callbacks; the fab-specific fine-tune
// reuses the loop shape with only a logging hook.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

constexpr int64_t kGrid = 32;
constexpr int64_t kSignatures = 5;

struct WaferNetImpl : torch::nn::Module {
  WaferNetImpl()
      : conv(register_module(
            "conv", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)),
                                          torch::nn::BatchNorm2d(16), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)),
                                          torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                          torch::nn::AdaptiveAvgPool2d(4), torch::nn::Flatten()))),
        head(register_module("head", torch::nn::Sequential(torch::nn::Dropout(0.3),
                                                           torch::nn::Linear(32 * 16, kSignatures)))) {}
  torch::Tensor forward(torch::Tensor maps) { return head->forward(conv->forward(maps)); }
  torch::nn::Sequential conv, head;
};
TORCH_MODULE(WaferNet);

struct WaferBatch {
  torch::Tensor maps, labels;
};

struct Hooks {
  std::vector<std::function<void()>> on_step_end;
  std::vector<std::function<void(int)>> on_epoch_end;
};

// Each signature is a fail-probability template over the die grid.
std::vector<WaferBatch> synth_wafers(int64_t batches, int64_t n, double noise, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  auto ys = torch::linspace(-1, 1, kGrid, opts).view({kGrid, 1}).expand({kGrid, kGrid});
  auto xs = torch::linspace(-1, 1, kGrid, opts).view({1, kGrid}).expand({kGrid, kGrid});
  auto r = (xs * xs + ys * ys).sqrt();
  auto templates = torch::stack({torch::zeros_like(r), (r < 0.3).to(torch::kFloat), (r > 0.8).to(torch::kFloat),
                                 ((xs - ys).abs() < 0.08).to(torch::kFloat),
                                 (((xs - 0.4).pow(2) + (ys + 0.3).pow(2)) < 0.05).to(torch::kFloat)});
  std::vector<WaferBatch> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto labels = torch::randint(kSignatures, {n}, opts.dtype(torch::kLong));
    auto prob = 0.05 + 0.8 * templates.index_select(0, labels) + noise * torch::rand({n, kGrid, kGrid}, opts);
    out.push_back({torch::bernoulli(prob.clamp(0, 1)).unsqueeze(1), labels});
  }
  return out;
}

double accuracy(WaferNet &net, const std::vector<WaferBatch> &split) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  for (const auto &batch : split) {
    // OK(torch-eval-mode-missing): the epoch-end hook calls net->eval()
    // before it calls this, and net->train() after.
    correct += net->forward(batch.maps).argmax(1).eq(batch.labels).sum().item<int64_t>();
    seen += batch.labels.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

// Per-signature counts of the predictions, for the fab's weekly report.
torch::Tensor signature_histogram(WaferNet &net, const std::vector<WaferBatch> &lot) {
  torch::NoGradGuard no_grad;
  auto counts = torch::zeros({kSignatures}, lot.front().labels.options());
  for (const auto &batch : lot) {
    // BUG(torch-eval-mode-missing): main() reports the fab's lot right after
    // finetune_fab(), which switched the net to train(): Dropout and the
    // BatchNorm batch statistics skew the histogram.
    auto pred = net->forward(batch.maps).argmax(1);
    counts += torch::bincount(pred, {}, kSignatures);
  }
  return counts;
}

void train_with_hooks(WaferNet &net, torch::optim::Optimizer &opt, const std::vector<WaferBatch> &train,
                      const Hooks &hooks, int epochs) {
  for (int epoch = 0; epoch < epochs; ++epoch) {
    net->train();
    for (const auto &batch : train) {
      // OK(torch-eval-mode-missing): net->train() at the top of every epoch.
      auto logits = net->forward(batch.maps);
      auto loss = torch::nn::functional::cross_entropy(logits, batch.labels);
      loss.backward();
      // OK(torch-missing-zero-grad): main() registers opt.zero_grad() as an
      // on_step_end hook, which runs right after every step.
      opt.step();
      for (const auto &hook : hooks.on_step_end)
        hook();
    }
    for (const auto &hook : hooks.on_epoch_end)
      hook(epoch);
  }
}

// A new fab's wafers: the backbone is kept, the whole net is tuned briefly.
// Sum-reduced loss over `accum` micro-batches, normalised by the wafer count.
void finetune_fab(WaferNet &net, const std::vector<WaferBatch> &fab, const Hooks &hooks, int64_t accum) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(5e-4).momentum(0.9));
  torch::nn::CrossEntropyLoss criterion(torch::nn::CrossEntropyLossOptions().reduction(torch::kSum));
  opt.zero_grad();
  const auto n = static_cast<int64_t>(fab.size());
  for (int64_t i = 0; i < n; ++i) {
    auto loss = criterion(net->forward(fab[i].maps), fab[i].labels) / 256.0;
    // OK(torch-grad-accumulation-unscaled): a sum-reduced loss divided by a
    // fixed wafer count; accumulating it is the intended large batch.
    loss.backward();
    if ((i + 1) % accum == 0) {
      // BUG(torch-missing-zero-grad): the fine-tune's hook list only logs;
      // nothing resets opt, so each update re-applies every earlier group.
      opt.step();
      for (const auto &hook : hooks.on_step_end)
        hook();
    }
  }
}

int main() {
  torch::manual_seed(125);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  WaferNet net;
  net->to(device);
  auto train = synth_wafers(48, 64, 0.1, device);
  auto val = synth_wafers(6, 256, 0.1, device);

  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  Hooks hooks;
  hooks.on_step_end.push_back([&opt] { opt.zero_grad(); });
  hooks.on_epoch_end.push_back([&](int epoch) {
    net->eval();
    std::cout << "epoch " << epoch << " val acc " << accuracy(net, val) << '\n';
    net->train();
  });
  opt.zero_grad();
  train_with_hooks(net, opt, train, hooks, 5);

  int64_t updates = 0;
  Hooks fab_hooks;
  fab_hooks.on_step_end.push_back([&updates] {
    if (++updates % 10 == 0)
      std::cout << "fab update " << updates << '\n';
  });
  auto fab_lot = synth_wafers(16, 64, 0.2, device);
  finetune_fab(net, fab_lot, fab_hooks, 4);
  auto counts = signature_histogram(net, fab_lot);
  std::cout << "fab lot signatures " << counts << '\n';

  net->eval();
  std::cout << "val acc after fab tune " << accuracy(net, val) << '\n';
}
