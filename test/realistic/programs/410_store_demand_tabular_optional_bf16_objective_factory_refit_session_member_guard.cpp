// Weekly demand regression for a grocery chain: store/department embeddings
// and numeric features feed an MLP with two heads (units sold, markdown). The
// AmpGuard sits in a std::optional engaged only when cfg.amp is set; the
// objectives come from factories; a nightly RefitSession owns a guard.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define DEMAND_AMP_SET(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define DEMAND_AMP_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#define DEMAND_AMP_DTYPE() at::autocast::get_autocast_dtype(at::kCUDA)
#define DEMAND_AMP_SET_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define DEMAND_AMP_SET(on) at::autocast::set_enabled(on)
#define DEMAND_AMP_IS_ON() at::autocast::is_enabled()
#define DEMAND_AMP_DTYPE() at::autocast::get_autocast_gpu_dtype()
#define DEMAND_AMP_SET_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif

constexpr int64_t kStores = 120, kDepts = 40, kNumeric = 6;

class AmpGuard {
 public:
  explicit AmpGuard(at::ScalarType dtype) : was_on_(DEMAND_AMP_IS_ON()), old_(DEMAND_AMP_DTYPE()) {
    DEMAND_AMP_SET_DTYPE(dtype);
    DEMAND_AMP_SET(true);
  }
  ~AmpGuard() {
    DEMAND_AMP_SET(was_on_);
    DEMAND_AMP_SET_DTYPE(old_);
  }
  AmpGuard(const AmpGuard&) = delete;
 private:
  bool was_on_;
  at::ScalarType old_;
};

struct DemandConfig {
  bool amp = false;
  at::ScalarType amp_dtype = at::kBFloat16;
  int64_t accum = 4, epochs = 3;
  double lr = 2e-3, huber_delta = 5.0;
};
struct DemandNetImpl : nn::Module {
  DemandNetImpl()
      : store(register_module("store", nn::Embedding(kStores, 16))),
        dept(register_module("dept", nn::Embedding(kDepts, 8))),
        body(register_module("body", nn::Sequential(nn::Linear(16 + 8 + kNumeric, 128), nn::BatchNorm1d(128), nn::ReLU(),
                                                    nn::Dropout(0.2), nn::Linear(128, 64), nn::ReLU()))),
        units(register_module("units", nn::Linear(64, 1))),
        markdown(register_module("markdown", nn::Linear(64, 1))) {}
  torch::Tensor trunk(const torch::Tensor& cat, const torch::Tensor& num) {
    return body->forward(torch::cat({store(cat.select(1, 0)), dept(cat.select(1, 1)), num}, 1));
  }
  torch::Tensor forward(const torch::Tensor& cat, const torch::Tensor& num) { return units(trunk(cat, num)).squeeze(1); }
  nn::Embedding store, dept;
  nn::Sequential body;
  nn::Linear units, markdown;
};
TORCH_MODULE(DemandNet);
// has_missing: a NaN in the raw CSV, found by the loader on the host.
struct Rows { torch::Tensor cat, num, units, markdown; bool has_missing = false; };
using Objective = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
// Huber on units sold, pre-divided for gradient accumulation.
Objective make_objective(const DemandConfig& cfg) {
  return [delta = cfg.huber_delta, accum = static_cast<double>(cfg.accum)](const torch::Tensor& pred,
                                                                           const torch::Tensor& target) {
    return F::huber_loss(pred, target, F::HuberLossFuncOptions().delta(delta)) / accum;
  };
}
// Pinball loss for a quantile head (the P90 safety-stock model).
Objective make_pinball(double q) {
  return [q](const torch::Tensor& pred, const torch::Tensor& target) {
    auto diff = target - pred;
    return torch::max(q * diff, (q - 1.0) * diff).mean();
  };
}
void train_point(DemandNet& net, const std::vector<Rows>& data, const DemandConfig& cfg) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr));
  auto objective = make_objective(cfg);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    opt.zero_grad();
    for (size_t i = 0; i < data.size(); ++i) {
      torch::Tensor loss;
      {
        std::optional<AmpGuard> amp;
        // OK(torch-autocast-region): the guard also restores on the `continue`.
        if (cfg.amp)
          amp.emplace(cfg.amp_dtype);
        if (data[i].has_missing)
          continue;
        loss = objective(net->forward(data[i].cat, data[i].num), data[i].units);
      }
      // OK(torch-autocast-region, torch-grad-accumulation-unscaled): bf16, closed; lambda divides.
      loss.backward();
      if ((i + 1) % cfg.accum == 0) {
        opt.step();
        opt.zero_grad();
      }
    }
  }
}
void train_p90(DemandNet& net, const std::vector<Rows>& data, const DemandConfig& cfg) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr));
  auto pinball = make_pinball(0.9);
  int64_t seen = 0;
  opt.zero_grad();
  for (const auto& rows : data) {
    auto loss = pinball(net->forward(rows.cat, rows.num), rows.units);
    // BUG(torch-grad-accumulation-unscaled): the factory's pinball .mean(), undivided.
    loss.backward();
    if (++seen % cfg.accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
struct HeadLosses { torch::Tensor units, markdown; };
HeadLosses two_head_losses(DemandNet& net, const Rows& rows) {
  auto h = net->trunk(rows.cat, rows.num);
  return {F::mse_loss(net->units(h).squeeze(1), rows.units), F::l1_loss(net->markdown(h).squeeze(1), rows.markdown)};
}
void train_two_heads(DemandNet& net, const std::vector<Rows>& data, int64_t accum) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  opt.zero_grad();
  for (size_t i = 0; i < data.size(); ++i) {
    auto losses = two_head_losses(net, data[i]);
    auto total = losses.units + losses.markdown;
    // BUG(torch-grad-accumulation-unscaled): a sum of two mean losses, undivided.
    total.backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
void train_markdown_sum(DemandNet& net, const std::vector<Rows>& data, int64_t accum) {
  net->eval();  // frozen trunk: BatchNorm keeps its running statistics
  torch::optim::Adam opt(net->markdown->parameters(), torch::optim::AdamOptions(1e-3));
  opt.zero_grad();
  for (size_t i = 0; i < data.size(); ++i) {
    torch::Tensor h;
    {
      torch::NoGradGuard no_grad;
      h = net->trunk(data[i].cat, data[i].num);
    }
    auto loss = F::mse_loss(net->markdown(h).squeeze(1), data[i].markdown, F::MSELossFuncOptions(torch::kSum));
    // OK(torch-grad-accumulation-unscaled): a sum-reduced loss.
    loss.backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
// Nightly refit on the last weeks; the session keeps bfloat16 autocast on while it lives.
class RefitSession {
 public:
  explicit RefitSession(DemandNet net) : net_(std::move(net)), opt_(net_->parameters(), torch::optim::SGDOptions(1e-3)) {}
  void run(const std::vector<Rows>& recent) {
    net_->train();
    for (const auto& rows : recent) {
      opt_.zero_grad();
      auto loss = F::mse_loss(net_->forward(rows.cat, rows.num), rows.units);
      // BUG(torch-autocast-region): amp_ lives as long as the session: backward() inside.
      loss.backward();
      opt_.step();
    }
  }
 private:
  AmpGuard amp_{at::kBFloat16};
  DemandNet net_;
  torch::optim::SGD opt_;
};
void finetune_grad_rescaled(DemandNet& net, const std::vector<Rows>& data, int64_t accum) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(5e-3));
  opt.zero_grad();
  for (size_t i = 0; i < data.size(); ++i) {
    auto loss = F::smooth_l1_loss(net->forward(data[i].cat, data[i].num), data[i].units);
    // OK(torch-grad-accumulation-unscaled): gradients divided by accum before step().
    loss.backward();
    if ((i + 1) % accum == 0) {
      for (auto& p : net->parameters())
        if (p.grad().defined())
          p.mutable_grad().div_(static_cast<double>(accum));
      opt.step();
      opt.zero_grad();
    }
  }
}
torch::Tensor predict_store(DemandNet& net, const Rows& rows) {
  torch::NoGradGuard no_grad;
  const bool was_on = DEMAND_AMP_IS_ON();
  // OK(torch-autocast-region): both exits put back the saved state.
  DEMAND_AMP_SET(true);
  if (rows.cat.size(0) == 0) {
    DEMAND_AMP_SET(was_on);
    return torch::empty({0});
  }
  auto pred = net->forward(rows.cat, rows.num).to(torch::kFloat);
  DEMAND_AMP_SET(was_on);
  return pred;
}
// The serving thread runs reduced precision from here on by design.
void enable_serving_amp() {
  // OK(torch-autocast-region): a helper that only switches autocast on.
  DEMAND_AMP_SET(true);
}
std::vector<Rows> make_rows(int64_t n, torch::Device device) {
  std::vector<Rows> out;
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t i = 0; i < n; ++i) {
    auto cat = torch::stack({torch::randint(kStores, {64}, ids), torch::randint(kDepts, {64}, ids)}, 1);
    out.push_back({cat, torch::randn({64, kNumeric}, device), 50 + 10 * torch::randn({64}, device),
                   torch::rand({64}, device), i % 23 == 5});
  }
  return out;
}
int main() {
  torch::manual_seed(410);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  DemandConfig cfg;
  cfg.amp = device.is_cuda();
  DemandNet net;
  net->to(device);
  auto history = make_rows(300, device);
  train_point(net, history, cfg);
  train_two_heads(net, history, cfg.accum);
  train_markdown_sum(net, history, cfg.accum);
  finetune_grad_rescaled(net, history, cfg.accum);
  DemandNet p90;
  p90->to(device);
  train_p90(p90, history, cfg);
  {
    RefitSession nightly(net);
    nightly.run(make_rows(20, device));
  }
  net->eval();
  p90->eval();
  const auto store_rows = make_rows(1, device).front();
  std::cout << "forecast " << predict_store(net, store_rows).mean().item<double>() << '\n';
  enable_serving_amp();
  torch::NoGradGuard no_grad;
  std::cout << "P90 " << p90->forward(store_rows.cat, store_rows.num).to(torch::kFloat).mean().item<double>() << '\n';
}
