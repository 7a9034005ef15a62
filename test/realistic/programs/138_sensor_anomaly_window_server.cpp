// Anomaly detection on pump telemetry (pressure, flow, vibration, motor
// current, temperature): an LSTM autoencoder reconstructs 64-step windows and
// the reconstruction error is the anomaly score. The service adapts the
// model on the latest normal windows every night, then scores incoming
// request batches through a window pool; a replica on a second GPU shadows
// the primary for A/B latency tests.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

constexpr int64_t kChannels = 5, kWindow = 64, kHidden = 48;

struct AutoencoderImpl : torch::nn::Cloneable<AutoencoderImpl> {
  AutoencoderImpl() { reset(); }
  void reset() override {
    enc = register_module("enc", torch::nn::LSTM(torch::nn::LSTMOptions(kChannels, kHidden).batch_first(true)));
    dec = register_module("dec", torch::nn::LSTM(torch::nn::LSTMOptions(kHidden, kHidden).batch_first(true)));
    out = register_module("out", torch::nn::Linear(kHidden, kChannels));
  }
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = std::get<0>(enc->forward(x));
    auto last = h.select(1, kWindow - 1).unsqueeze(1).expand({-1, kWindow, -1});
    return out->forward(std::get<0>(dec->forward(last.contiguous())));
  }
  torch::nn::LSTM enc{nullptr}, dec{nullptr};
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(Autoencoder);

struct ServeConfig {
  torch::Device device = torch::kCPU;
  float threshold = 0.8f;
  int64_t adapt_steps = 500;
};

ServeConfig config_from_env() {
  ServeConfig cfg;
  if (torch::cuda::is_available())
    cfg.device = torch::Device(torch::kCUDA);
  return cfg;
}

// BUG(torch-device-index-unchecked): the default ordinal 1 is never compared
// with torch::cuda::device_count().
torch::Device replica_device(int ordinal = 1) {
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ordinal));
}

// Fixed-size host buffers for request windows. Pinning was switched off on
// the edge boxes (locked-memory limit), so the pool is built unpinned there.
class WindowPool {
 public:
  WindowPool(int64_t slots, int64_t rows, bool pinned) : pinned_(pinned) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(pinned_);
    for (int64_t i = 0; i < slots; ++i)
      free_.push_back(torch::empty({rows, kWindow, kChannels}, opts));
  }
  torch::Tensor acquire() {
    auto t = free_.back();
    free_.pop_back();
    return t;
  }
  void release(torch::Tensor t) { free_.push_back(std::move(t)); }
  bool pinned() const { return pinned_; }

 private:
  bool pinned_;
  std::vector<torch::Tensor> free_;
};

torch::Tensor normal_windows(int64_t n) {
  auto t = torch::linspace(0, 6.283, kWindow).view({1, kWindow, 1});
  auto phase = torch::rand({n, 1, kChannels}) * 6.283;
  return torch::sin(t + phase) + 0.05 * torch::randn({n, kWindow, kChannels});
}

void adapt(Autoencoder &ae, const ServeConfig &cfg, std::vector<float> &loss_history) {
  torch::optim::Adam opt(ae->parameters(), torch::optim::AdamOptions(5e-4));
  auto record = [&](const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the lambda runs after every adaptation
    // step and reads the device loss back to the host.
    loss_history.push_back(loss.item<float>());
  };
  ae->train();
  for (int64_t step = 0; step < cfg.adapt_steps; ++step) {
    auto x = normal_windows(32).to(cfg.device);
    auto loss = torch::mse_loss(ae->forward(x), x);
    opt.zero_grad();
    loss.backward();
    opt.step();
    record(loss.detach());
  }
}

struct ScoredBatch {
  torch::Tensor scores;  // [B] on the host
  int64_t request_id;
};

ScoredBatch score_batch(Autoencoder &ae, WindowPool &pool, const std::vector<torch::Tensor> &windows,
                        const ServeConfig &cfg, int64_t request_id) {
  torch::NoGradGuard no_grad;
  auto host = pool.acquire();
  for (size_t i = 0; i < windows.size(); ++i)
    host[static_cast<int64_t>(i)].copy_(windows[i]);
  // BUG(torch-non-blocking-pageable): the pool in main() is built with
  // pinned=false, so acquire() hands back pageable memory.
  auto x = host.to(cfg.device, /*non_blocking=*/true);
  auto err = (ae->forward(x) - x).pow(2).mean({1, 2});
  pool.release(host);
  return ScoredBatch{err.to(torch::kCPU, /*non_blocking=*/true), request_id};
}

int main() {
  torch::manual_seed(138);
  const ServeConfig cfg = config_from_env();
  Autoencoder ae;
  ae->to(cfg.device);
  std::vector<float> history;
  adapt(ae, cfg, history);
  std::cout << "adapted, final loss " << history.back() << "\n";

  ae->eval();
  WindowPool pool(4, 16, /*pinned=*/false);
  std::vector<torch::Tensor> windows;
  for (int i = 0; i < 16; ++i)
    windows.push_back(normal_windows(1)[0] * (i == 7 ? 4.0 : 1.0));
  auto densify = [](auto &w) {
    // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor; the
    // window in the vector is left as it was.
    w.contiguous();
  };
  for (auto &w : windows)
    densify(w);

  auto batch = score_batch(ae, pool, windows, cfg, 1001);
  auto is_alert = [&](int64_t i) {
    // BUG(torch-non-blocking-d2h-race): score_batch() returned a pending
    // non-blocking copy and the lambda reads it before any synchronisation.
    return batch.scores.data_ptr<float>()[i] > cfg.threshold;
  };
  int alerts = 0;
  for (int64_t i = 0; i < 16; ++i)
    alerts += is_alert(i) ? 1 : 0;
  std::cout << "request " << batch.request_id << ": " << alerts << " anomalous windows\n";

  auto second = score_batch(ae, pool, windows, cfg, 1002);
  if (cfg.device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised when the copy came off a GPU.
  std::cout << "request " << second.request_id << " max score " << second.scores.max().item<float>() << "\n";

  if (torch::cuda::is_available()) {
    const torch::Device shadow = replica_device();
    Autoencoder replica = std::dynamic_pointer_cast<AutoencoderImpl>(ae->clone(shadow));
    torch::NoGradGuard no_grad;
    replica->eval();
    auto x = normal_windows(8).to(shadow);
    // OK(torch-device-mismatch): the windows follow the replica to its card.
    auto err = (replica->forward(x) - x).pow(2).mean();
    std::cout << "shadow replica error " << err.item<float>() << "\n";
  }
  return 0;
}
