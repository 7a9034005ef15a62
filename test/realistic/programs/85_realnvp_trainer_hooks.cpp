// Density estimation on a 2-D two-moons set with a RealNVP flow (affine
// coupling layers with alternating masks). The training loop lives in a
// generic base class with virtual hooks; the flow trainer overrides the
// step, the per-step hook and the validation pass.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <vector>

struct CouplingImpl : torch::nn::Module {
  explicit CouplingImpl(torch::Tensor mask_) : mask(register_buffer("mask", mask_)) {
    s = register_module("s", torch::nn::Sequential(torch::nn::Linear(2, 64), torch::nn::Tanh(),
                                                   torch::nn::Linear(64, 2), torch::nn::Tanh()));
    t = register_module("t", torch::nn::Sequential(torch::nn::Linear(2, 64), torch::nn::ReLU(),
                                                   torch::nn::Linear(64, 2)));
  }
  // Returns z and log|det J|.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &x) {
    auto xm = x * mask;
    auto sc = s->forward(xm) * (1 - mask);
    auto sh = t->forward(xm) * (1 - mask);
    auto z = xm + (1 - mask) * (x * torch::exp(sc) + sh);
    return {z, sc.sum(1)};
  }
  torch::Tensor mask;
  torch::nn::Sequential s{nullptr}, t{nullptr};
};
TORCH_MODULE(Coupling);

struct FlowImpl : torch::nn::Module {
  FlowImpl() {
    for (int i = 0; i < 6; ++i) {
      auto m = i % 2 == 0 ? torch::tensor({1.0f, 0.0f}) : torch::tensor({0.0f, 1.0f});
      layers.push_back(register_module("c" + std::to_string(i), Coupling(m)));
    }
  }
  torch::Tensor forward(const torch::Tensor &x) {  // log-density
    auto z = x;
    auto logdet = torch::zeros({x.size(0)}, x.options());
    for (auto &c : layers) {
      auto out = c->forward(z);
      z = out.first;
      // OK(torch-loss-accumulation-graph): the log-determinant is part of
      // the returned density, not a running statistic.
      logdet = logdet + out.second;
    }
    auto base = -0.5 * (z.pow(2).sum(1) + 2 * std::log(2 * M_PI));
    return base + logdet;
  }
  std::vector<Coupling> layers;
};
TORCH_MODULE(Flow);

torch::Tensor two_moons(int64_t n) {
  auto theta = torch::rand({n}) * M_PI;
  auto upper = torch::rand({n}) > 0.5;
  auto x = torch::where(upper, torch::cos(theta), 1 - torch::cos(theta));
  auto y = torch::where(upper, torch::sin(theta), 0.5 - torch::sin(theta));
  return torch::stack({x, y}, 1) + 0.05 * torch::randn({n, 2});
}

class TrainerBase {
 public:
  explicit TrainerBase(torch::Device d) : device_(d) {}
  virtual ~TrainerBase() = default;
  void fit(int64_t steps) {
    for (int64_t i = 0; i < steps; ++i) {
      auto loss = train_step(i);
      on_step_end(i, loss);
      if ((i + 1) % 500 == 0)
        validate();
    }
  }

 protected:
  virtual torch::Tensor train_step(int64_t step) = 0;
  virtual void on_step_end(int64_t, const torch::Tensor &) {}
  virtual void validate() {}
  torch::Device device_;
};

class FlowTrainer : public TrainerBase {
 public:
  explicit FlowTrainer(torch::Device d) : TrainerBase(d), opt_(flow_->parameters(), torch::optim::AdamOptions(1e-3)) {
    flow_->to(device_);
    val_ = two_moons(2048).to(device_);
  }

 protected:
  torch::Tensor train_step(int64_t) override {
    auto batch = two_moons(512);
    // BUG(torch-non-blocking-pageable): the fresh batch is pageable; the
    // non-blocking upload is synchronous.
    auto x = batch.to(device_, /*non_blocking=*/true);
    opt_.zero_grad();
    auto nll = -flow_->forward(x).mean();
    nll.backward();
    opt_.step();
    return nll;
  }

  void on_step_end(int64_t step, const torch::Tensor &loss) override {
    // BUG(torch-host-sync-in-loop): the hook runs after every step and
    // reads the loss back unconditionally.
    const double v = loss.item<double>();
    if (!std::isfinite(v))
      std::cerr << "diverged at step " << step << "\n";
    // BUG(torch-empty-cache-in-loop): the hook runs once per step.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  void validate() override {
    double total = 0.0;
    for (int64_t k = 0; k < 4; ++k) {
      auto chunk = val_.narrow(0, k * 512, 512);
      // BUG(torch-inference-without-no-grad): the validation pass keeps
      // the flow's activations for a backward that never comes.
      auto lp = flow_->forward(chunk);
      total += lp.mean().item<double>();
    }
    std::cout << "val nll " << -total / 4 << "\n";
  }

 public:
  void sample_grid() {
    torch::NoGradGuard guard;
    auto grid = torch::stack(torch::meshgrid({torch::linspace(-1.5, 2.5, 64), torch::linspace(-1, 1.5, 64)}, "ij"), -1)
                    .reshape({-1, 2});
    // OK(torch-device-mismatch): the grid is moved to the flow's device.
    auto density = flow_->forward(grid.to(device_)).exp();
    std::cout << "max density " << density.max().item<double>() << "\n";
  }

 private:
  Flow flow_;
  torch::optim::Adam opt_;
  torch::Tensor val_;
};

int main() {
  torch::Device device = torch::kCPU;
  if (torch::cuda::is_available())
    device = torch::Device(torch::kCUDA);
  FlowTrainer trainer(device);
  trainer.fit(5000);
  trainer.sample_grid();
  return 0;
}
