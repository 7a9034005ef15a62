// Evaluates an ensemble of small regressors: members are built on the host,
// restored from checkpoints and moved in a loop; a feature cache refills a
// member map in one method and serves it from another; predictions are
// downloaded by a helper that starts the copy for whatever tensor it is
// given; each member's forward returns a mean and a log-variance pair.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

struct RegressorImpl : torch::nn::Module {
  explicit RegressorImpl(int64_t features)
      : body(register_module("body", torch::nn::Linear(features, 32))),
        mean(register_module("mean", torch::nn::Linear(32, 1))),
        log_var(register_module("log_var", torch::nn::Linear(32, 1))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto h = torch::relu(body(x));
    return std::make_tuple(mean(h), log_var(h));
  }
  torch::nn::Linear body, mean, log_var;
};
TORCH_MODULE(Regressor);

// Starts the copy of whatever it is given; the caller must synchronise.
torch::Tensor to_host_async(const torch::Tensor &t) {
  return t.to(torch::kCPU, /*non_blocking=*/true);
}

class FeatureCache {
 public:
  FeatureCache(int64_t features, torch::Device device) : features_(features), device_(device) {}

  void refill(int64_t rows) {
    for (const char *split : {"calibration", "test"})
      host_[split] = torch::randn({rows, features_});
  }

  torch::Tensor upload(const std::string &split) {
    refill(64);
    // BUG(torch-non-blocking-pageable): refill() filled the map with
    // torch::randn results, which are pageable.
    return host_.at(split).to(device_, /*non_blocking=*/true);
  }

  torch::Tensor upload_pinned(const std::string &split) {
    // OK(torch-non-blocking-pageable): pinned first, so the copy can overlap.
    auto pinned = host_.at(split).pin_memory();
    return pinned.to(device_, /*non_blocking=*/true);
  }

 private:
  int64_t features_;
  torch::Device device_;
  std::map<std::string, torch::Tensor> host_;
};

std::vector<Regressor> build_ensemble(int64_t members, int64_t features) {
  std::vector<Regressor> ensemble;
  for (int64_t m = 0; m < members; ++m)
    ensemble.push_back(Regressor(features));
  return ensemble;
}

int main() {
  const int64_t features = 16;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto ensemble = build_ensemble(5, features);
  for (auto &member : ensemble)
    member->to(device);

  FeatureCache cache(features, device);
  auto test_x = cache.upload("test");
  auto calib_x = torch::randn({64, features});

  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> means;
  for (auto &member : ensemble) {
    auto [mu, log_var] = member->forward(test_x);
    means.push_back(mu);
    // BUG(torch-device-mismatch): every member was moved to 'device'; the
    // calibration batch was made on the host.
    auto [calib_mu, calib_lv] = member->forward(calib_x);
    std::cout << "calibration spread " << calib_lv.exp().mean() << '\n';
  }
  auto spread = torch::stack(means).std(0);
  auto host_spread = to_host_async(spread);
  // BUG(torch-non-blocking-d2h-race): to_host_async() only started the copy
  // of a tensor on 'device'; nothing waited for it.
  std::cout << "max spread " << host_spread.max().item<float>() << '\n';

  auto cpu_only = torch::randn({4});
  auto host_copy = to_host_async(cpu_only);
  // OK(torch-non-blocking-d2h-race): the source is on the host; the copy is
  // synchronous.
  std::cout << "first " << host_copy[0].item<float>() << '\n';

  auto pinned = cache.upload_pinned("calibration");
  std::cout << "pinned rows " << pinned.size(0) << '\n';
  return 0;
}
