// Momentum-contrast (MoCo-style) pretraining of a small tabular encoder. A
// query encoder is trained against a momentum copy of itself; the keys of
// earlier batches are kept in a fixed-size memory bank (a ring buffer held as
// a class member) and serve as negatives. Each step's statistics come back
// from contrastive_step() in a StepStats struct.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kInput = 32;
constexpr int64_t kDim = 64;

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kInput, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, kDim))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto z = fc2(torch::relu(fc1(x)));
    return torch::nn::functional::normalize(z, torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Encoder);

class MemoryBank {
 public:
  MemoryBank(int64_t size, int64_t dim)
      : keys_(torch::nn::functional::normalize(torch::randn({size, dim}),
                                               torch::nn::functional::NormalizeFuncOptions().dim(1))) {}
  const torch::Tensor &keys() const { return keys_; }
  void enqueue(const torch::Tensor &batch_keys) {
    const int64_t n = batch_keys.size(0);
    keys_.slice(0, head_, head_ + n).copy_(batch_keys);
    head_ = (head_ + n) % keys_.size(0);
  }

 private:
  torch::Tensor keys_;
  int64_t head_ = 0;
};

struct StepStats {
  torch::Tensor loss;
  torch::Tensor alignment;  // mean cosine similarity of positive pairs
};

torch::Tensor augment(const torch::Tensor &x) {
  return x * (1 + 0.1 * torch::randn_like(x)) + 0.05 * torch::randn_like(x);
}

void momentum_update(Encoder &query, Encoder &key, double m) {
  torch::NoGradGuard no_grad;
  auto qp = query->parameters();
  auto kp = key->parameters();
  for (size_t i = 0; i < qp.size(); ++i)
    kp[i].mul_(m).add_(qp[i], 1.0 - m);
}

StepStats contrastive_step(Encoder &query, Encoder &key, MemoryBank &bank, torch::optim::Optimizer &opt,
                           const torch::Tensor &batch, double temperature) {
  auto q = query->forward(augment(batch));
  torch::Tensor k;
  {
    torch::NoGradGuard no_grad;
    k = key->forward(augment(batch));
  }
  auto l_pos = (q * k).sum(1, /*keepdim=*/true);
  auto l_neg = torch::mm(q, bank.keys().t());
  auto logits = torch::cat({l_pos, l_neg}, 1) / temperature;
  auto labels = torch::zeros({batch.size(0)}, torch::TensorOptions().dtype(torch::kLong).device(batch.device()));
  auto loss = torch::nn::functional::cross_entropy(logits, labels);
  opt.zero_grad();
  loss.backward();
  opt.step();
  // OK(torch-loss-accumulation-graph): the keys come from the no-grad block
  // and the bank copies them into its own buffer.
  bank.enqueue(k);
  return {loss, l_pos.mean()};
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Encoder query;
  Encoder key;
  {
    torch::NoGradGuard no_grad;
    auto qp = query->parameters();
    auto kp = key->parameters();
    for (size_t i = 0; i < qp.size(); ++i) {
      kp[i].copy_(qp[i]);
      kp[i].set_requires_grad(false);
    }
  }
  query->to(device);
  key->to(device);

  MemoryBank bank(4096, kDim);
  torch::optim::SGD opt(query->parameters(), torch::optim::SGDOptions(0.03).momentum(0.9).weight_decay(1e-4));
  auto data = torch::randn({20000, kInput});

  std::vector<double> alignment_curve;
  auto record_alignment = [&alignment_curve](const torch::Tensor &a) {
    // BUG(torch-host-sync-in-loop): called with the step's alignment on every
    // training step; each read stalls on the step's kernels.
    alignment_curve.push_back(a.item<double>());
  };

  struct {
    torch::Tensor alignment;
    int64_t steps = 0;
  } totals;
  totals.alignment = torch::zeros({}, device);

  for (int64_t step = 0; step < 2000; ++step) {
    auto idx = torch::randint(0, data.size(0), {256}, torch::kLong);
    auto batch = data.index_select(0, idx).to(device);
    // BUG(torch-device-mismatch): contrastive_step() multiplies the query
    // encoder's output (on 'device') with the bank's keys, which its
    // constructor drew on the CPU and nothing ever moved.
    StepStats s = contrastive_step(query, key, bank, opt, batch, 0.2);
    momentum_update(query, key, 0.99);
    // BUG(torch-loss-accumulation-graph): the alignment is computed from the
    // query encoder's output with autograd on; the running total keeps
    // every step's graph.
    totals.alignment += s.alignment;
    ++totals.steps;
    record_alignment(s.alignment);
    if (step % 100 == 0) {
      // OK(torch-host-sync-in-loop): every 100 steps.
      std::cout << "step " << step << " loss " << s.loss.item<double>() << '\n';
    }
  }
  std::cout << "mean alignment " << (totals.alignment / totals.steps).item<double>() << " over "
            << alignment_curve.size() << " steps\n";
  return 0;
}
