// Traffic speed forecasting on a road-sensor graph: a graph-diffusion +
// GRU network predicts the next `horizon` readings of every loop detector as
// a residual over a historical-average baseline. The device is chosen once in
// a process-wide DeviceManager singleton; networks are assembled by a fluent
// builder that returns them by value, already placed on a device.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace traffic {

constexpr int64_t kNodes = 24, kWindow = 12, kHorizon = 3;

class DeviceManager {
 public:
  static DeviceManager &instance() {
    static DeviceManager manager;
    return manager;
  }
  torch::Device device() const { return device_; }

 private:
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  DeviceManager() : device_(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU) {}
  torch::Device device_;
};

struct Road {
  int64_t from, to;
  float length_km;
};

// Row-normalised adjacency with self loops, weighted by inverse road length.
torch::Tensor build_adjacency(const std::vector<Road> &roads, int64_t nodes) {
  auto adj = torch::eye(nodes);
  for (const auto &r : roads) {
    adj[r.from][r.to] = 1.0f / r.length_km;
    adj[r.to][r.from] = 1.0f / r.length_km;
  }
  return adj / adj.sum(1, /*keepdim=*/true);
}

struct FlowNetImpl : nn::Module {
  FlowNetImpl(int64_t hidden, int64_t horizon)
      : spatial(register_module("spatial", nn::Linear(1, hidden))),
        temporal(register_module("temporal", nn::GRU(nn::GRUOptions(hidden, hidden).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        head(register_module("head", nn::Linear(hidden, horizon))) {}
  // x: [B, T, N] speeds, adj: [N, N]  ->  [B, horizon, N]
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    const auto b = x.size(0), t = x.size(1), n = x.size(2);
    auto mixed = torch::matmul(x, adj.t());
    auto h = torch::relu(spatial->forward(mixed.unsqueeze(-1)));
    h = h.permute({0, 2, 1, 3}).reshape({b * n, t, -1});
    auto seq = std::get<0>(temporal->forward(h));
    auto last = drop->forward(seq.select(1, t - 1));
    return head->forward(last).view({b, n, -1}).permute({0, 2, 1});
  }
  nn::Linear spatial;
  nn::GRU temporal;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(FlowNet);

class FlowNetBuilder {
 public:
  FlowNetBuilder &hidden(int64_t h) { hidden_ = h; return *this; }
  FlowNetBuilder &horizon(int64_t h) { horizon_ = h; return *this; }
  FlowNetBuilder &on(torch::Device d) { device_ = d; return *this; }
  FlowNet build() const {
    FlowNet net(hidden_, horizon_);
    net->to(device_);
    return net;
  }

 private:
  int64_t hidden_ = 32, horizon_ = kHorizon;
  torch::Device device_ = torch::kCPU;
};

struct Window {
  torch::Tensor x;  // [B, kWindow, N]
  torch::Tensor y;  // [B, kHorizon, N]
};

class SensorWindows {
 public:
  SensorWindows(std::vector<float> speeds, int64_t nodes)
      : speeds_(std::move(speeds)), nodes_(nodes), steps_(static_cast<int64_t>(speeds_.size()) / nodes) {}
  int64_t size() const { return steps_ - kWindow - kHorizon; }
  Window batch(int64_t first, int64_t count) const {
    auto all = torch::from_blob(const_cast<float *>(speeds_.data()), {steps_, nodes_}, torch::kFloat);
    std::vector<torch::Tensor> xs, ys;
    for (int64_t i = first; i < first + count; ++i) {
      xs.push_back(all.slice(0, i, i + kWindow));
      ys.push_back(all.slice(0, i + kWindow, i + kWindow + kHorizon));
    }
    return {torch::stack(xs), torch::stack(ys)};
  }
  // Mean speed per sensor over the whole series, [1, 1, N].
  torch::Tensor historical_average() const {
    auto all = torch::from_blob(const_cast<float *>(speeds_.data()), {steps_, nodes_}, torch::kFloat);
    return all.mean(0).clone().view({1, 1, nodes_});
  }

 private:
  std::vector<float> speeds_;
  int64_t nodes_, steps_;
};

class FlowTrainer {
 public:
  FlowTrainer(FlowNet net, const SensorWindows &data, const torch::Tensor &adj)
      : net_(std::move(net)), data_(data),
        // OK(torch-device-mismatch): the adjacency is moved once, here.
        adj_(adj.to(DeviceManager::instance().device())),
        opt_(net_->parameters(), torch::optim::AdamOptions(2e-3)) {}

  double train_epoch(int64_t batch_size) {
    const auto device = DeviceManager::instance().device();
    net_->train();
    auto total = torch::zeros({}, device);
    int64_t steps = 0;
    for (int64_t i = 0; i + batch_size <= data_.size(); i += batch_size, ++steps) {
      auto w = data_.batch(i, batch_size);
      auto x = w.x.to(device);
      opt_.zero_grad();
      auto pred = net_->forward(x, adj_);
      // BUG(torch-device-mismatch): only the inputs of the window were moved;
      // the targets from SensorWindows::batch() are still on the CPU.
      auto loss = F::mse_loss(pred, w.y);
      loss.backward();
      opt_.step();
      // OK(torch-device-mismatch): the accumulator lives on the same device.
      total += loss.detach();
    }
    return total.item<double>() / static_cast<double>(std::max<int64_t>(steps, 1));
  }

 private:
  FlowNet net_;
  const SensorWindows &data_;
  torch::Tensor adj_;
  torch::optim::Adam opt_;
};

class HorizonEvaluator {
 public:
  HorizonEvaluator(FlowNet net, const std::vector<Road> &roads, torch::Tensor baseline)
      : net_(std::move(net)), adj_(build_adjacency(roads, kNodes)), baseline_(std::move(baseline)) {}

  // Mean absolute error of the baseline-corrected forecast, per horizon step.
  torch::Tensor mae(const SensorWindows &val) {
    const auto device = DeviceManager::instance().device();
    torch::NoGradGuard no_grad;
    net_->eval();
    auto err = torch::zeros({kHorizon}, device);
    for (int64_t i = 0; i + 64 <= val.size(); i += 64) {
      auto w = val.batch(i, 64);
      auto x = w.x.to(device);
      // BUG(torch-device-mismatch): adj_ comes straight from build_adjacency()
      // on the CPU; the network mixes it with x on the managed device.
      auto residual = net_->forward(x, adj_);
      // BUG(torch-device-mismatch): the historical-average baseline was
      // computed from the host series and never moved.
      auto forecast = residual + baseline_;
      // OK(torch-device-mismatch): the targets follow the forecast's device.
      err += (forecast - w.y.to(forecast.device())).abs().mean(torch::IntArrayRef{0, 2});
    }
    net_->train();
    return err.cpu() / static_cast<double>(val.size() / 64);
  }

 private:
  FlowNet net_;
  torch::Tensor adj_, baseline_;
};

void shadow_latency_probe(FlowNet &net, const torch::Tensor &adj) {
  if (!torch::cuda::is_available())
    return;
  // BUG(torch-device-index-unchecked): the second card is assumed to exist;
  // the availability check says nothing about how many devices are visible.
  torch::Device shadow(torch::kCUDA, 1);
  auto replica = FlowNetBuilder().hidden(48).on(shadow).build();
  torch::NoGradGuard no_grad;
  auto source = net->named_parameters();
  for (auto &p : replica->named_parameters())
    p.value().copy_(source[p.key()]);
  replica->eval();
  // OK(torch-device-mismatch): the probe input and the adjacency go to the shadow card too.
  auto out = replica->forward(torch::randn({1, kWindow, kNodes}, shadow), adj.to(shadow));
  std::cout << "shadow replica output norm " << out.norm().item<float>() << '\n';
}

std::vector<float> synth_speeds(std::mt19937 &rng, int64_t steps) {
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<float> out;
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t n = 0; n < kNodes; ++n)
      out.push_back(60.0f - 25.0f * std::sin(0.26f * static_cast<float>(t) + 0.3f * static_cast<float>(n)) +
                    noise(rng));
  return out;
}

}  // namespace traffic

int main() {
  using namespace traffic;
  torch::manual_seed(352);
  std::mt19937 rng(352);
  std::vector<Road> roads;
  for (int64_t n = 0; n + 1 < kNodes; ++n)
    roads.push_back({n, n + 1, 0.5f + 0.1f * static_cast<float>(n % 5)});
  SensorWindows train(synth_speeds(rng, 2000), kNodes), val(synth_speeds(rng, 400), kNodes);
  const auto adj = build_adjacency(roads, kNodes);

  auto net = FlowNetBuilder().hidden(48).horizon(kHorizon).on(DeviceManager::instance().device()).build();
  {
    torch::NoGradGuard no_grad;
    net->eval();
    auto warmup = torch::zeros({2, kWindow, kNodes});
    // BUG(torch-device-mismatch): the builder placed the network on the
    // managed device; the warm-up batch is a plain CPU factory.
    auto out = net->forward(warmup, adj.to(DeviceManager::instance().device()));
    std::cout << "forecast shape " << out.sizes() << '\n';
    net->train();
  }

  FlowTrainer trainer(net, train, adj);
  HorizonEvaluator evaluator(net, roads, train.historical_average());
  for (int epoch = 0; epoch < 4; ++epoch) {
    const double loss = trainer.train_epoch(32);
    std::cout << "epoch " << epoch << " loss " << loss << " val MAE " << evaluator.mae(val) << '\n';
  }
  shadow_latency_probe(net, adj);
}
