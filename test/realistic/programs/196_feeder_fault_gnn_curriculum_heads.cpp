// Fault localisation on a medium-voltage distribution feeder from PMU
// snapshots: each bus is a node (voltage magnitude / angle deviations,
// current phasors), each line an edge. A stack of graph-convolution layers
// (a torch::nn::ModuleList) feeds three task heads kept in a plain vector:
// the faulted bus (node level), the fault type and the fault resistance
// (graph level). Training follows a curriculum from bolted faults to
// high-impedance ones; a stage ends when a probe set is localised well.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kFeat = 10, kHidden = 64, kTypes = 4, kBuses = 33;

struct GraphConvImpl : torch::nn::Module {
  GraphConvImpl(int64_t in, int64_t out)
      : lin(register_module("lin", torch::nn::Linear(in, out))), bn(register_module("bn", torch::nn::BatchNorm1d(out))) {}
  torch::Tensor forward(const torch::Tensor &h, const torch::Tensor &adj) { return torch::relu(bn(adj.mm(lin(h)))); }
  torch::nn::Linear lin;
  torch::nn::BatchNorm1d bn;
};
TORCH_MODULE(GraphConv);

struct FeederEncoderImpl : torch::nn::Module {
  explicit FeederEncoderImpl(int depth) {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < depth; ++i)
      layers->push_back(GraphConv(i == 0 ? kFeat : kHidden, kHidden));
    drop = register_module("drop", torch::nn::Dropout(0.1));
  }
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    auto h = x;
    for (const auto &layer : *layers)
      h = layer->as<GraphConvImpl>()->forward(h, adj);
    return drop(h);
  }
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(FeederEncoder);

struct TaskHeadImpl : torch::nn::Module {
  explicit TaskHeadImpl(int64_t out)
      : mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                                                         torch::nn::Dropout(0.2), torch::nn::Linear(kHidden, out)))) {}
  torch::Tensor forward(const torch::Tensor &h) { return mlp->forward(h); }
  torch::nn::Sequential mlp;
};

enum Task { kBus = 0, kType = 1, kResistance = 2 };

struct FaultModel {
  FeederEncoder encoder{3};
  std::vector<std::shared_ptr<TaskHeadImpl>> heads{std::make_shared<TaskHeadImpl>(1),
                                                   std::make_shared<TaskHeadImpl>(kTypes),
                                                   std::make_shared<TaskHeadImpl>(1)};
  void to(torch::Device device) {
    encoder->to(device);
    for (auto &h : heads)
      h->to(device);
  }
  void eval_all() {
    encoder->eval();
    for (auto &h : heads)
      h->eval();
  }
  void train_all() {
    encoder->train();
    for (auto &h : heads)
      h->train();
  }
  std::vector<torch::Tensor> parameters() {
    auto params = encoder->parameters();
    for (auto &h : heads)
      for (auto &p : h->parameters())
        params.push_back(p);
    return params;
  }
};

struct FeederSnapshot {
  torch::Tensor x, adj, fault_bus, fault_type, log_ohms;
  int stage;  // 0 bolted, 1 low impedance, 2 high impedance
};

// A radial 33-bus feeder with a random fault; the fault's footprint fades with its resistance.
std::vector<FeederSnapshot> synth_events(int64_t n, torch::Device device) {
  auto a = torch::zeros({kBuses, kBuses});
  for (int64_t i = 1; i < kBuses; ++i) {
    a[i][(i - 1) / 2] = 1;
    a[(i - 1) / 2][i] = 1;
  }
  a += torch::eye(kBuses);
  auto dinv = a.sum(1).rsqrt();
  auto adj = (dinv.unsqueeze(1) * a * dinv.unsqueeze(0)).to(device);
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<FeederSnapshot> out;
  for (int64_t e = 0; e < n; ++e) {
    int stage = static_cast<int>(e % 3);
    auto bus = torch::randint(kBuses, {1}, long_opts);
    auto type = torch::randint(kTypes, {1}, long_opts);
    auto log_ohms = torch::full({1}, 0.5 + 2.0 * stage, device);
    auto x = 0.05 * torch::randn({kBuses, kFeat}, device);
    x.index_put_({bus}, x.index({bus}) + 1.0 / (1.0 + stage));
    out.push_back({x, adj, bus, type, log_ohms, stage});
  }
  return out;
}

torch::Tensor multitask_loss(FaultModel &m, const FeederSnapshot &s) {
  auto h = m.encoder->forward(s.x, s.adj);
  auto pooled = h.mean(0, /*keepdim=*/true);
  auto bus_logits = m.heads[kBus]->forward(h).view({1, kBuses});
  return F::cross_entropy(bus_logits, s.fault_bus) + F::cross_entropy(m.heads[kType]->forward(pooled), s.fault_type) +
         torch::mse_loss(m.heads[kResistance]->forward(pooled).view({1}), s.log_ohms);
}

// One event per call; the optimizer steps once every `accum` events.
void train_step(FaultModel &m, torch::optim::AdamW &opt, const FeederSnapshot &s, int accum) {
  static int64_t seen = 0;
  auto loss = multitask_loss(m, s);
  // BUG(torch-grad-accumulation-unscaled): three mean losses summed and
  // accumulated over `accum` events, never divided by `accum`.
  loss.backward();
  if (++seen % accum == 0) {
    // OK(torch-missing-zero-grad): reset under the same condition as the step.
    opt.step();
    opt.zero_grad();
  }
}

// Fraction of the probe events whose faulted bus is the arg-max node.
double probe_accuracy(FaultModel &m, const std::vector<FeederSnapshot> &probe) {
  torch::NoGradGuard no_grad;
  int64_t hits = 0;
  for (const auto &s : probe) {
    // BUG(torch-eval-mode-missing): the curriculum calls this between epochs
    // with the encoder in training mode: dropout and per-graph BatchNorm stats.
    auto h = m.encoder->forward(s.x, s.adj);
    // BUG(torch-eval-mode-missing): the bus head is in training mode as well.
    auto bus = m.heads[kBus]->forward(h).view({-1}).argmax();
    hits += (bus == s.fault_bus.squeeze()).item<bool>() ? 1 : 0;
  }
  return static_cast<double>(hits) / static_cast<double>(probe.size());
}

void report(FaultModel &m, const std::vector<FeederSnapshot> &test) {
  m.eval_all();
  torch::NoGradGuard no_grad;
  int64_t type_hits = 0;
  double ohm_err = 0.0;
  for (const auto &s : test) {
    // OK(torch-eval-mode-missing): eval_all() switched the encoder and every head.
    auto pooled = m.encoder->forward(s.x, s.adj).mean(0, true);
    // OK(torch-eval-mode-missing): same.
    auto type = m.heads[kType]->forward(pooled).argmax(1);
    type_hits += (type == s.fault_type).sum().item<int64_t>();
    ohm_err += (m.heads[kResistance]->forward(pooled).view({1}) - s.log_ohms).abs().item<double>();
  }
  m.train_all();
  std::cout << "type accuracy " << static_cast<double>(type_hits) / test.size() << "  |log R| error "
            << ohm_err / test.size() << '\n';
}

int main() {
  torch::manual_seed(196);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto events = synth_events(900, device);
  auto probe = synth_events(60, device);

  FaultModel model;
  model.to(device);
  model.train_all();
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4));
  opt.zero_grad();

  const int accum = 8;
  for (int stage = 0; stage < 3; ++stage) {
    for (int epoch = 0; epoch < 10; ++epoch) {
      for (const auto &s : events)
        if (s.stage <= stage)
          train_step(model, opt, s, accum);
      double acc = probe_accuracy(model, probe);
      std::cout << "stage " << stage << " epoch " << epoch << " probe bus accuracy " << acc << '\n';
      if (acc > 0.9)
        break;
    }
  }
  report(model, probe);
  return 0;
}
