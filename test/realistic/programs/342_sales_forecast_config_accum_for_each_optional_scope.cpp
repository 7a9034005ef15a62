// Demand forecasting for a grocery chain: a GRU reads eight weeks of daily
// sales per store (units, price index, promo flag, weekday, holiday) and
// predicts the next 14 days. The global model is pretrained with gradient
// accumulation over store groups, fine-tuned per region, adapted to newly
// opened stores, and refreshed every week in mixed precision through an
// optional autocast scope. LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kFeatures = 5, kWindow = 56, kHorizon = 14;

struct AccumConfig {
  int64_t micro_batches = 4;  // store groups per optimizer step
};

struct ForecastConfig {
  double lr = 1e-3;
  AccumConfig accum;
  bool mixed_precision = true;
  double loss_scale = 256.0;
};

// Switches CUDA autocast on and restores the state it found.
class AutocastScope {
 public:
#if TORCH_VERSION_MAJOR >= 2
  AutocastScope() : prev_(at::autocast::is_autocast_enabled(at::kCUDA)) { at::autocast::set_autocast_enabled(at::kCUDA, true); }
  ~AutocastScope() { at::autocast::set_autocast_enabled(at::kCUDA, prev_); }
#else
  AutocastScope() : prev_(at::autocast::is_enabled()) { at::autocast::set_enabled(true); }
  ~AutocastScope() { at::autocast::set_enabled(prev_); }
#endif
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool prev_;
};

struct DemandNetImpl : nn::Module {
  DemandNetImpl()
      : gru(register_module("gru", nn::GRU(nn::GRUOptions(kFeatures, 64).batch_first(true).num_layers(2)))),
        drop(register_module("drop", nn::Dropout(0.1))),
        head(register_module("head", nn::Linear(64, kHorizon))) {}
  // history [B, 56, 5] -> next 14 days [B, 14]
  torch::Tensor forward(const torch::Tensor& history) {
    auto last = std::get<0>(gru->forward(history)).select(1, -1);
    return head->forward(drop->forward(last));
  }
  nn::GRU gru;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(DemandNet);

struct StoreSeries {
  torch::Tensor history, future;  // [B, 56, 5], [B, 14]
  std::string region;
  bool complete = true;  // false when a store's sales arrived late
};

// Turns a per-group mean loss into its share of the accumulated step.
void average_over_micro_batches(torch::Tensor& loss, int64_t micro_batches) {
  loss = loss / static_cast<double>(micro_batches);
}

void pretrain_global(DemandNet& model, const std::vector<StoreSeries>& groups, const ForecastConfig& cfg) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr));
  opt.zero_grad();
  int64_t micro = 0;
  for (const auto& g : groups) {
    auto loss = F::smooth_l1_loss(model->forward(g.history), g.future);
    // BUG(torch-grad-accumulation-unscaled): cfg.accum.micro_batches groups
    // add up before each step; the mean loss is not divided by it.
    loss.backward();
    if (++micro % cfg.accum.micro_batches == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void finetune_regions(DemandNet& model, const std::map<std::string, std::vector<StoreSeries>>& by_region, const ForecastConfig& cfg) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr * 0.3));
  for (const auto& [region, groups] : by_region) {
    opt.zero_grad();
    int64_t micro = 0;
    for (const auto& g : groups) {
      auto loss = F::smooth_l1_loss(model->forward(g.history), g.future);
      average_over_micro_batches(loss, cfg.accum.micro_batches);
      // OK(torch-grad-accumulation-unscaled): the helper divided the loss
      // through its reference parameter.
      loss.backward();
      if (++micro % cfg.accum.micro_batches == 0) {
        opt.step();
        opt.zero_grad();
      }
    }
    std::cout << "fine-tuned region " << region << '\n';
  }
}

torch::Tensor adapt_new_stores(DemandNet& model, const std::vector<StoreSeries>& openings, const ForecastConfig& cfg) {
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  torch::Tensor epoch_loss = torch::zeros({}, openings.front().future.device());
  std::for_each(openings.begin(), openings.end(), [&](const StoreSeries& s) {
    opt.zero_grad();
    auto loss = F::mse_loss(model->forward(s.history), s.future);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): epoch_loss is captured by
    // reference from the enclosing function; every store's graph stays alive.
    epoch_loss += loss;
  });
  return epoch_loss / static_cast<double>(openings.size());
}

double holdout_mae(DemandNet& model, const std::vector<StoreSeries>& holdout) {
  torch::NoGradGuard no_grad;
  model->eval();
  double total = 0.0;
  std::for_each(holdout.begin(), holdout.end(), [&](const StoreSeries& s) {
    // OK(torch-loss-accumulation-graph): a host double under the no-grad guard.
    total += (model->forward(s.history) - s.future).abs().mean().item<double>();
  });
  return total / static_cast<double>(holdout.size());
}

void weekly_refresh(DemandNet& model, const std::vector<StoreSeries>& weeks, const ForecastConfig& cfg) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr * 0.1));
  int64_t logged = 0;
  for (const auto& week : weeks) {
    std::optional<AutocastScope> amp;
    if (cfg.mixed_precision)
      amp.emplace();
    auto loss = F::mse_loss(model->forward(week.history), week.future);
    // BUG(torch-autocast-region): the optional scope lives to the end of the
    // iteration; with mixed_precision on, backward() runs inside the region.
    (loss * cfg.loss_scale).backward();
    for (auto& p : model->parameters())
      if (p.grad().defined())
        p.grad().div_(cfg.loss_scale);
    // BUG(torch-missing-zero-grad): a late week skips the reset at the end
    // of the iteration; the next week's backward adds to these gradients.
    opt.step();
    if (!week.complete)
      continue;
    if (++logged % 10 == 0) {
      // OK(torch-host-sync-in-loop): every tenth complete week only.
      std::cout << "refresh MSE " << loss.item<double>() << '\n';
    }
    opt.zero_grad();
  }
}

std::vector<StoreSeries> synth(int64_t n, torch::Device device, const std::string& region = "north") {
  std::vector<StoreSeries> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back({torch::randn({16, kWindow, kFeatures}, device), torch::rand({16, kHorizon}, device), region, i % 7 != 3});
  return out;
}

int main() {
  torch::manual_seed(342);
  // OK(torch-cuda-unguarded): guarded selection.
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  ForecastConfig cfg;
  DemandNet model;
  model->to(device);

  pretrain_global(model, synth(32, device), cfg);
  std::map<std::string, std::vector<StoreSeries>> by_region{{"north", synth(8, device, "north")}, {"coast", synth(8, device, "coast")}};
  finetune_regions(model, by_region, cfg);
  auto adapt = adapt_new_stores(model, synth(6, device), cfg);
  std::cout << "new-store loss " << adapt.item<double>() << ", holdout MAE " << holdout_mae(model, synth(4, device)) << '\n';
  weekly_refresh(model, synth(12, device), cfg);
}
