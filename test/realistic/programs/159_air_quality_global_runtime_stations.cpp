// Hourly PM2.5 forecasting for a network of monitoring stations. A GRU
// encoder reads the last 48 h of (PM2.5, PM10, NO2, temperature, humidity,
// wind u/v) and a linear head predicts the next 6 h. One model is pretrained
// on the pooled stations and then fine-tuned per station with early stopping
// on a rolling window of recent losses. Every tensor is created with the
// options of one namespace-scope runtime struct that main() fills in once.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <map>
#include <string>
#include <utility>

namespace aq {

struct Runtime {
  torch::Device device = torch::kCPU;
  torch::TensorOptions opts() const { return torch::TensorOptions().dtype(torch::kFloat32).device(device); }
};
Runtime runtime;

constexpr int64_t kFeatures = 7, kHistory = 48, kHorizon = 6;

struct ForecasterImpl : torch::nn::Module {
  ForecasterImpl()
      : gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(kFeatures, 96).num_layers(2).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(96, kHorizon))) {}
  // x [B, kHistory, kFeatures] -> next kHorizon hours of PM2.5 [B, kHorizon]
  torch::Tensor forward(const torch::Tensor &x) {
    auto out = std::get<0>(gru->forward(x));
    return head->forward(out.select(1, -1));
  }
  torch::nn::GRU gru;
  torch::nn::Linear head;
};
TORCH_MODULE(Forecaster);

struct Station {
  std::string name;
  double urban_load;  // scales traffic-driven pollution
};

// A day/night cycle plus a station-specific traffic load; returns (x, y).
std::pair<torch::Tensor, torch::Tensor> station_windows(const Station &s, int64_t n) {
  auto hours = torch::arange(kHistory + kHorizon, runtime.opts()).unsqueeze(0) +
               torch::randint(0, 24, {n, 1}, runtime.opts());
  auto cycle = torch::sin(hours * (2 * 3.14159265 / 24.0));
  auto pm25 = 20.0 + s.urban_load * 15.0 * (1 + cycle) + 3.0 * torch::randn({n, kHistory + kHorizon}, runtime.opts());
  auto x = torch::randn({n, kHistory, kFeatures}, runtime.opts());
  x.select(2, 0).copy_(pm25.slice(1, 0, kHistory) / 50.0);
  return {x, pm25.slice(1, kHistory) / 50.0};
}

void pretrain(Forecaster &net, const std::map<std::string, Station> &stations, int64_t steps) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  double mae_sum = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    auto it = std::next(stations.begin(), static_cast<long>(step % static_cast<int64_t>(stations.size())));
    auto [x, y] = station_windows(it->second, 128);
    auto pred = net->forward(x);
    auto loss = torch::smooth_l1_loss(pred, y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): the MAE is pulled to the host on every
    // pretraining step.
    mae_sum += (pred - y).abs().mean().item<double>();
    if (step % 500 == 0) {
      std::cout << "pretrain step " << step << " MAE " << 50.0 * mae_sum / 500.0 << " ug/m3\n";
      mae_sum = 0;
    }
  }
}

// Fine-tunes on one station until the mean of the last 20 losses stops
// improving; returns the number of steps taken.
int64_t finetune(Forecaster &net, const Station &station, int64_t max_steps) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  std::deque<torch::Tensor> recent;
  double best = 1e9;
  int64_t step = 0;
  for (; step < max_steps; ++step) {
    auto [x, y] = station_windows(station, 64);
    auto loss = torch::smooth_l1_loss(net->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the window keeps the last 20 loss
    // tensors with their graphs (and each pop frees one step's graph late).
    recent.push_back(loss);
    if (recent.size() > 20)
      recent.pop_front();
    if (step % 20 != 19)
      continue;
    // OK(torch-host-sync-in-loop): read once every 20 steps, after the continue.
    const double window = torch::stack(std::vector<torch::Tensor>(recent.begin(), recent.end())).mean().item<double>();
    if (window > best * 0.999)
      break;
    best = window;
  }
  return step;
}

// Rolls the forecaster forward day by day, feeding its own predictions back.
template <typename Net>
torch::Tensor rollout(Net &net, torch::Tensor window, int64_t days) {
  std::vector<torch::Tensor> out;
  for (int64_t d = 0; d < days; ++d) {
    for (int64_t block = 0; block < 24 / kHorizon; ++block) {
      // BUG(torch-inference-without-no-grad): the multi-day rollout is pure
      // inference, but autograd records every step through the fed-back window.
      auto next = net->forward(window);  // [1, kHorizon]
      auto feats = window.slice(1, -kHorizon).clone();
      feats.select(2, 0).copy_(next.squeeze(0));
      window = torch::cat({window.slice(1, kHorizon), feats}, 1);
      out.push_back(next.squeeze(0).detach());
    }
  }
  return torch::cat(out);
}

}  // namespace aq

int main() {
  using namespace aq;
  torch::manual_seed(159);
  if (torch::cuda::is_available())
    runtime.device = torch::Device(torch::kCUDA);

  std::map<std::string, Station> stations = {
      {"harbour", {"harbour", 1.4}}, {"ring-road", {"ring-road", 2.0}}, {"park", {"park", 0.4}}, {"suburb", {"suburb", 0.8}}};
  Forecaster base;
  base->to(runtime.device);
  pretrain(base, stations, 4000);
  torch::save(base, "aq_base.pt");

  for (const auto &[name, station] : stations) {
    Forecaster local;
    torch::load(local, "aq_base.pt");
    local->to(runtime.device);
    const int64_t steps = finetune(local, station, 2000);
    torch::save(local, "aq_" + name + ".pt");
    // BUG(torch-empty-cache-in-loop): emptied after every station; the next
    // station's fine-tuning needs the same blocks again.
    c10::cuda::CUDACachingAllocator::emptyCache();

    local->eval();
    auto [x, y] = station_windows(station, 1);
    auto forecast = rollout(local, x, 3);
    // OK(torch-host-sync-in-loop): once per station; the training loop is the
    // one inside finetune().
    std::cout << name << ": " << steps << " fine-tune steps, 72 h mean forecast " << 50.0 * forecast.mean().item<double>()
              << " ug/m3\n";
  }
  return 0;
}
