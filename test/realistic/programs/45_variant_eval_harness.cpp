// Evaluation harness for a model bake-off: three candidate architectures for
// the same 16-feature regression task are held as a std::variant and driven
// through std::visit. The device comes from a string in the run config
// ("cuda" or "cpu"), as it would from a command line flag.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

struct MlpImpl : torch::nn::Module {
  MlpImpl() : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::ReLU(),
                                                                  torch::nn::Linear(64, 1)))) {}
  torch::Tensor forward(torch::Tensor x) { return body->forward(x); }
  torch::nn::Sequential body;
};
TORCH_MODULE(Mlp);

struct WideImpl : torch::nn::Module {
  WideImpl() : fc(register_module("fc", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(torch::cat({x, x.pow(2)}, 1).narrow(1, 0, 16)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Wide);

struct GatedImpl : torch::nn::Module {
  GatedImpl()
      : value(register_module("value", torch::nn::Linear(16, 32))),
        gate(register_module("gate", torch::nn::Linear(16, 32))),
        out(register_module("out", torch::nn::Linear(32, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return out(value(x) * torch::sigmoid(gate(x))); }
  torch::nn::Linear value, gate, out;
};
TORCH_MODULE(Gated);

using Candidate = std::variant<Mlp, Wide, Gated>;

struct RunConfig {
  std::string device = "cpu";
  int64_t eval_batches = 50;
  int64_t batch = 512;
};

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
};

Batch held_out_batch(int64_t n) {
  auto x = torch::randn({n, 16});
  auto y = x.narrow(1, 0, 4).sum(1, /*keepdim=*/true) - x.narrow(1, 4, 4).prod(1, /*keepdim=*/true);
  return {x, y};
}

void prepare(Batch &b, torch::Device device) {
  b.x = b.x.to(device);
  // BUG(torch-tensor-to-discarded): the moved targets are thrown away; b.y
  // stays where held_out_batch() made it.
  b.y.to(device);
}

// Mean squared error of one candidate over the held-out stream.
double score(Candidate &cand, const RunConfig &cfg, torch::Device device) {
  std::visit([&](auto &m) { m->eval(); }, cand);
  double sse = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < cfg.eval_batches; ++i) {
    auto x = torch::randn({cfg.batch, 16}).to(device);
    auto y = x.narrow(1, 0, 4).sum(1, true) - x.narrow(1, 4, 4).prod(1, true);
    auto pred = std::visit(
        // BUG(torch-inference-without-no-grad): the scoring loop never runs
        // a backward, and nothing around it turns autograd off.
        [&](auto &m) { return m->forward(x); }, cand);
    sse += (pred - y).pow(2).sum().item<double>();
    n += cfg.batch;
  }
  return sse / static_cast<double>(n);
}

// Writes the first predictions of the winner to stdout for a sanity check.
void dump_predictions(Mlp &winner, torch::Device device) {
  torch::NoGradGuard no_grad;
  winner->eval();
  auto probe = torch::randn({8, 16}, device);
  auto pred = winner->forward(probe);
  auto host = pred.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the copy back is only queued; the
  // accessor reads the pinned buffer before the GPU has written it.
  auto acc = host.accessor<float, 2>();
  for (int64_t i = 0; i < 8; ++i)
    std::cout << "pred[" << i << "] = " << acc[i][0] << '\n';
}

void calibrate_offset(Mlp &winner, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto b = held_out_batch(256);
  b.x = b.x.to(device);
  // BUG(torch-device-mismatch): 'winner' was moved to the configured device,
  // the residual's targets were left on the CPU.
  auto residual = winner->forward(b.x) - b.y;
  std::cout << "mean offset " << residual.mean().item<double>() << '\n';
}

int main(int argc, char **argv) {
  RunConfig cfg;
  if (argc > 1 && torch::cuda::is_available())
    cfg.device = argv[1];
  torch::Device device(cfg.device);

  std::vector<Candidate> candidates{Mlp(), Wide(), Gated()};
  for (auto &c : candidates)
    std::visit([&](auto &m) { m->to(device); }, c);

  std::vector<double> mse;
  for (auto &c : candidates)
    mse.push_back(score(c, cfg, device));

  for (size_t i = 0; i < mse.size(); ++i)
    std::cout << "candidate " << i << " mse " << mse[i] << '\n';

  // The export path keeps its own handle on the first candidate and places
  // it explicitly rather than trusting the variant's visit.
  Mlp winner = std::get<Mlp>(candidates[0]);
  winner->to(device);
  {
    // OK(torch-inference-without-no-grad): a single forward under a guard.
    torch::NoGradGuard no_grad;
    auto b = held_out_batch(1024);
    prepare(b, device);
    auto err = (winner->forward(b.x) - b.y.to(device)).abs().mean();
    std::cout << "winner mae " << err.item<double>() << '\n';
  }
  dump_predictions(winner, device);
  calibrate_offset(winner, device);
  return 0;
}
