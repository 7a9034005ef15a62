// Anomaly detection with an auto-encoder: train on normal traffic, calibrate
// a threshold, then score streams of feature vectors from several sources.
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kFeatures = 32;

struct AutoEncoderImpl : torch::nn::Module {
  AutoEncoderImpl()
      : enc(register_module("enc", torch::nn::Linear(kFeatures, 8))),
        dec(register_module("dec", torch::nn::Linear(8, kFeatures))) {}
  torch::Tensor forward(torch::Tensor x) { return dec(torch::relu(enc(x))); }
  torch::nn::Linear enc, dec;
};
TORCH_MODULE(AutoEncoder);

class ReplaySource {
 public:
  explicit ReplaySource(int64_t chunks) : left_(chunks) {}
  bool has_next() const { return left_ > 0; }
  torch::Tensor next() { --left_; return torch::randn({256, kFeatures}); }
 private:
  int64_t left_;
};

class LiveSource {
 public:
  bool has_next() const { return polled_ < 10; }
  torch::Tensor next() { ++polled_; return torch::rand({64, kFeatures}) * 3; }
 private:
  int64_t polled_ = 0;
};

void train(AutoEncoder &ae, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(ae->parameters(), torch::optim::AdamOptions(1e-3));
  for (int64_t step = 0; step < steps; ++step) {
    auto x = torch::randn({256, kFeatures}, device);
    auto loss = torch::mse_loss(ae->forward(x), x);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

float calibrate(AutoEncoder &ae, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({4096, kFeatures}, device);
  auto err = (ae->forward(x) - x).pow(2).mean(1);
  auto host = std::get<0>(err.sort()).to(torch::kCPU, /*non_blocking=*/true);
  c10::cuda::getCurrentCUDAStream().synchronize();
  // OK(torch-non-blocking-d2h-race): the stream was synchronised first.
  auto sorted = host.accessor<float, 1>();
  return sorted[static_cast<int64_t>(0.99 * (sorted.size(0) - 1))];
}

template <typename Source>
std::vector<float> score_stream(AutoEncoder &ae, Source &source, torch::Device device) {
  std::vector<float> scores;
  while (source.has_next()) {
    torch::Tensor x = source.next().to(device);
    // BUG(torch-inference-without-no-grad): scoring never calls backward()
    // and nothing holds a NoGradGuard around it.
    auto recon = ae->forward(x);
    auto err = (recon - x).pow(2).mean(1);
    auto host = err.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the accessor reads 'host' while the
    // copy may still be in flight.
    auto view = host.accessor<float, 1>();
    for (int64_t i = 0; i < view.size(0); ++i)
      scores.push_back(view[i]);
  }
  return scores;
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  AutoEncoder ae;
  ae->to(device);
  train(ae, device, 500);
  float threshold = calibrate(ae, device);
  ReplaySource replay(20);
  LiveSource live;
  auto a = score_stream(ae, replay, device);
  auto b = score_stream(ae, live, device);
  auto flagged = std::count_if(a.begin(), a.end(), [&](float s) { return s > threshold; }) +
                 std::count_if(b.begin(), b.end(), [&](float s) { return s > threshold; });
  std::cout << flagged << " anomalies above " << threshold << '\n';
  return 0;
}
