// Sensor-window classifier fed by a torch::data loader. Preprocessing
// (per-feature standardisation with statistics measured on the training
// set) deliberately stays on the CPU, next to the loader, and only the
// standardised batch is uploaded. A generic for_each_batch(loader, fn)
// template drives both training and evaluation with lambdas. Before
// training, a calibration pass measures the activation range once.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>

constexpr int64_t kIn = 32;
constexpr int64_t kClasses = 4;

class WindowDataset : public torch::data::datasets::Dataset<WindowDataset> {
 public:
  explicit WindowDataset(int64_t n) : x_(torch::randn({n, kIn}) * 4.0 + 2.0), y_(torch::randint(0, kClasses, {n})) {}
  torch::data::Example<> get(size_t i) override { return {x_[i], y_[i]}; }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }
  const torch::Tensor &features() const { return x_; }

 private:
  torch::Tensor x_, y_;
};

struct Standardizer {
  torch::Tensor mean;
  torch::Tensor inv_std;
  explicit Standardizer(const torch::Tensor &x) : mean(x.mean(0)), inv_std(1.0 / (x.std(0) + 1e-6)) {}
  torch::Tensor operator()(const torch::Tensor &x) const { return (x - mean) * inv_std; }
};

template <typename Loader, typename F>
int64_t for_each_batch(Loader &loader, F &&fn) {
  int64_t n = 0;
  for (auto &batch : loader) {
    // BUG(torch-non-blocking-pageable): the training lambda uploads the
    // loader's targets with non_blocking; a torch::data loader cannot pin.
    fn(batch.data, batch.target);
    ++n;
  }
  return n;
}

torch::nn::Sequential make_net() {
  return torch::nn::Sequential(torch::nn::Linear(kIn, 128), torch::nn::ReLU(), torch::nn::Dropout(0.3),
                               torch::nn::Linear(128, kClasses));
}

// Largest activation per output, measured once on a synthetic batch.
torch::Tensor calibrate(torch::nn::Sequential &net, int64_t batch, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({batch, kIn}, torch::TensorOptions().device(device));
  try {
    return net->forward(x).abs().amax(0);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the same batch runs again right
    // after; the allocator had already emptied its cache before raising.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return net->forward(x).abs().amax(0);
  }
}

// The fallback of a fixed-size probe: halves the batch on out-of-memory.
torch::Tensor calibrate_halving(torch::nn::Sequential &net, int64_t batch, torch::Device device) {
  torch::NoGradGuard no_grad;
  try {
    return net->forward(torch::randn({batch, kIn}, torch::TensorOptions().device(device))).abs().amax(0);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry runs at half the size.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return net->forward(torch::randn({batch / 2, kIn}, torch::TensorOptions().device(device))).abs().amax(0);
  }
}

int main() {
  torch::manual_seed(11);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  WindowDataset train_set(20000);
  // OK(torch-device-mismatch): statistics and batches both stay on the CPU.
  Standardizer standardize(train_set.features());
  auto train_loader = torch::data::make_data_loader(train_set.map(torch::data::transforms::Stack<>()),
                                                    torch::data::DataLoaderOptions().batch_size(128));
  auto val_loader = torch::data::make_data_loader(WindowDataset(4000).map(torch::data::transforms::Stack<>()),
                                                  torch::data::DataLoaderOptions().batch_size(512));

  auto net = make_net();
  net->to(device);
  net->eval();
  std::cout << "act range " << calibrate(net, 4096, device).max().item<double>() << '\n';
  std::cout << "act range (halving) " << calibrate_halving(net, 4096, device).max().item<double>() << '\n';

  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t step = 0;
  net->train();
  for_each_batch(*train_loader, [&](const torch::Tensor &x, const torch::Tensor &y) {
    // OK(torch-non-blocking-pageable, torch-device-mismatch): the
    // standardised batch is pinned before its asynchronous upload.
    auto xd = standardize(x).pin_memory().to(device, /*non_blocking=*/true);
    // OK(torch-non-blocking-pageable): reported where for_each_batch()
    // passes the loader's pageable targets to this lambda.
    auto yd = y.to(device, /*non_blocking=*/true);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(xd), yd);
    loss.backward();
    opt.step();
    if (++step % 50 == 0) {
      // OK(torch-host-sync-in-loop): logged every 50 steps.
      std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
    }
  });

  net->eval();
  int64_t correct = 0;
  for_each_batch(*val_loader, [&](const torch::Tensor &x, const torch::Tensor &y) {
    // BUG(torch-inference-without-no-grad): the validation pass runs with
    // autograd on; nothing here or in the loader loop calls backward().
    auto logits = net->forward(standardize(x).to(device));
    // OK(torch-host-sync-in-loop): an evaluation loop, not a training loop.
    correct += logits.argmax(1).cpu().eq(y).sum().item<int64_t>();
  });
  std::cout << "val acc " << correct / 4000.0 << '\n';

  // Final report on a fresh held-out set, the right way.
  torch::NoGradGuard no_grad;
  net->eval();
  auto test_loader = torch::data::make_data_loader(WindowDataset(4000).map(torch::data::transforms::Stack<>()),
                                                   torch::data::DataLoaderOptions().batch_size(512));
  double nll = 0.0;
  for_each_batch(*test_loader, [&](const torch::Tensor &x, const torch::Tensor &y) {
    // OK(torch-inference-without-no-grad): the NoGradGuard above is in scope.
    auto logits = net->forward(standardize(x).to(device));
    // OK(torch-device-mismatch): the targets are moved next to the logits.
    nll += torch::nn::functional::cross_entropy(logits, y.to(device)).item<double>();
  });
  std::cout << "test nll " << nll << '\n';
  return 0;
}
