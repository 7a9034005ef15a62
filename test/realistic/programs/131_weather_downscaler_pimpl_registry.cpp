// Statistical downscaling of 2 m temperature: a small convnet turns a coarse
// 16x16 reanalysis tile (plus orography) into a 64x64 field. Preprocessing
// steps are looked up by name in a registry of std::function transforms, the
// device comes from the DOWNSCALE_DEVICE environment variable, and the
// serving side is a pimpl class whose implementation keeps a host staging
// tile for the station feed.
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

constexpr int64_t kCoarse = 16, kFine = 64;

struct DownscaleNetImpl : torch::nn::Module {
  DownscaleNetImpl()
      : body(register_module(
            "body", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 32, 3).padding(1)),
                                          torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1)),
                                          torch::nn::ReLU(),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 3).padding(1))))) {}
  // coarse [B, 2, 16, 16] -> fine [B, 1, 64, 64]
  torch::Tensor forward(torch::Tensor coarse) {
    auto up = torch::nn::functional::interpolate(
        coarse, torch::nn::functional::InterpolateFuncOptions()
                    .size(std::vector<int64_t>{kFine, kFine})
                    .mode(torch::kBilinear)
                    .align_corners(false));
    return up.narrow(1, 0, 1) + body->forward(up);
  }
  torch::nn::Sequential body;
};
TORCH_MODULE(DownscaleNet);

using Transform = std::function<torch::Tensor(torch::Tensor)>;

std::unordered_map<std::string, Transform> make_registry() {
  std::unordered_map<std::string, Transform> registry;
  registry["kelvin_to_celsius"] = [](torch::Tensor t) { return t - 273.15; };
  registry["standardise"] = [](torch::Tensor t) { return (t - t.mean()) / (t.std() + 1e-6); };
  registry["half_precision"] = [](torch::Tensor t) {
    // BUG(torch-tensor-to-discarded): to(kHalf) returns a converted copy;
    // the transform hands back the float tensor it was given.
    t.to(torch::kHalf);
    return t;
  };
  return registry;
}

// "cpu", "cuda", "cuda:N" from the environment; the cluster's default is the
// second card of the visualisation node.
torch::Device device_from_env() {
  if (!torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  const char *env = std::getenv("DOWNSCALE_DEVICE");
  // BUG(torch-device-index-unchecked): with the variable unset the ordinal 1
  // is used, and nothing compares it with torch::cuda::device_count().
  const std::string spec = env != nullptr ? std::string(env) : std::string("cuda:1");
  return torch::Device(spec);
}

std::pair<DownscaleNet, torch::Device> make_model() {
  torch::Device device = device_from_env();
  DownscaleNet net;
  net->to(device);
  return {net, device};
}

// Serving: the station feed writes into a host staging tile that is uploaded
// for every request.
class TileServer {
 public:
  TileServer(DownscaleNet net, torch::Device device);
  ~TileServer();
  torch::Tensor serve(const torch::Tensor &coarse_celsius);
  std::vector<torch::Tensor> serve_batch(const std::vector<torch::Tensor> &tiles);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TileServer::Impl {
  Impl(DownscaleNet n, torch::Device d)
      : net(std::move(n)), device(d), staging(torch::empty({1, 2, kCoarse, kCoarse})),
        orography(torch::rand({1, 1, kCoarse, kCoarse}) * 3.0) {}

  torch::Tensor upload(const torch::Tensor &coarse) {
    staging.narrow(1, 0, 1).copy_(coarse);
    staging.narrow(1, 1, 1).copy_(orography);
    // BUG(torch-non-blocking-pageable): the staging tile comes from
    // torch::empty without pinned_memory(true); the copy runs synchronously.
    return staging.to(device, /*non_blocking=*/true);
  }

  DownscaleNet net;
  torch::Device device;
  torch::Tensor staging;
  torch::Tensor orography;
};

TileServer::TileServer(DownscaleNet net, torch::Device device)
    : impl_(std::make_unique<Impl>(std::move(net), device)) {}
TileServer::~TileServer() = default;

torch::Tensor TileServer::serve(const torch::Tensor &coarse_celsius) {
  torch::NoGradGuard no_grad;
  impl_->net->eval();
  // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and
  // a no-grad guard right before the forward.
  return impl_->net->forward(impl_->upload(coarse_celsius)).cpu();
}

std::vector<torch::Tensor> TileServer::serve_batch(const std::vector<torch::Tensor> &tiles) {
  impl_->net->eval();
  std::vector<torch::Tensor> out;
  for (const auto &tile : tiles) {
    auto x = torch::cat({tile, impl_->orography}, 1).to(impl_->device);
    // BUG(torch-inference-without-no-grad): the batch path forgot the guard
    // that serve() has; autograd records every tile's activations.
    out.push_back(impl_->net->forward(x).cpu());
  }
  return out;
}

int main() {
  torch::manual_seed(131);
  auto registry = make_registry();
  auto [net, device] = make_model();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto orography = torch::rand({8, 1, kCoarse, kCoarse}) * 3.0;

  net->train();
  for (int64_t step = 0; step < 800; ++step) {
    auto fine_k = 280.0 + 5.0 * torch::randn({8, 1, kFine, kFine});
    auto coarse_k = torch::nn::functional::avg_pool2d(fine_k, torch::nn::functional::AvgPool2dFuncOptions(4));
    auto coarse = registry.at("kelvin_to_celsius")(coarse_k);
    auto x = torch::cat({coarse, orography}, 1).to(device);
    // OK(torch-device-mismatch): the target moves to `device` with the input.
    auto target = registry.at("kelvin_to_celsius")(fine_k).to(device);
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(x), target);
    loss.backward();
    opt.step();
    if (step % 200 == 0)
      // OK(torch-host-sync-in-loop): logging steps only.
      std::cout << "step " << step << " mse " << loss.item<double>() << "\n";
  }

  // A quick check against a climatology field before serving.
  {
    torch::NoGradGuard no_grad;
    net->eval();
    auto coarse = torch::full({1, 1, kCoarse, kCoarse}, 12.0);
    auto pred = net->forward(torch::cat({coarse, orography.narrow(0, 0, 1)}, 1).to(device));
    auto climatology = torch::full({1, 1, kFine, kFine}, 12.0);
    // BUG(torch-device-mismatch): the prediction is on the device that
    // make_model() chose; the climatology field is on the CPU.
    auto bias = torch::mse_loss(pred, climatology);
    std::cout << "climatology mse " << bias.item<double>() << "\n";
  }

  TileServer server(net, device);
  auto one = server.serve(torch::randn({1, 1, kCoarse, kCoarse}) * 4 + 10);
  std::vector<torch::Tensor> tiles;
  for (int i = 0; i < 16; ++i)
    tiles.push_back(registry.at("standardise")(torch::randn({1, 1, kCoarse, kCoarse})));
  auto many = server.serve_batch(tiles);
  std::cout << "served " << one.sizes() << " and " << many.size() << " tiles\n";
  return 0;
}
