// A top-1 mixture-of-experts layer (Switch-Transformer style) in a small
// token classifier. A noisy router picks one expert per token, each expert is
// a feed-forward block held in a ModuleList, and a load-balancing auxiliary
// loss keeps the router from collapsing. The trainer logs the balance loss
// for a plot and reports expert utilisation on held-out tokens.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kModel = 64;
constexpr int64_t kExperts = 4;
constexpr int64_t kClasses = 10;

struct MoeLayerImpl : torch::nn::Module {
  MoeLayerImpl(double noise_std) : noise_std_(noise_std) {
    router = register_module("router", torch::nn::Linear(kModel, kExperts));
    experts = register_module("experts", torch::nn::ModuleList());
    for (int64_t e = 0; e < kExperts; ++e)
      experts->push_back(torch::nn::Sequential(torch::nn::Linear(kModel, 4 * kModel), torch::nn::GELU(),
                                               torch::nn::Linear(4 * kModel, kModel)));
  }

  torch::Tensor forward(const torch::Tensor &x) {
    auto logits = router->forward(x);
    if (is_training()) {
      // BUG(torch-device-mismatch): the router noise is drawn on the host
      // while the router logits are on the layer's device.
      logits = logits + torch::randn({x.size(0), kExperts}) * noise_std_;
    }
    auto probs = torch::softmax(logits, -1);
    auto [gate, assign] = probs.max(-1);
    auto out = torch::zeros_like(x);
    for (int64_t e = 0; e < kExperts; ++e) {
      auto mask = assign == e;
      // BUG(torch-host-sync-in-loop): counting the expert's tokens on the
      // host stalls every training step, once per expert.
      if (mask.sum().item<int64_t>() == 0)
        continue;
      auto idx = mask.nonzero().squeeze(1);
      auto y = experts[e]->as<torch::nn::Sequential>()->forward(x.index_select(0, idx));
      out.index_add_(0, idx, y * gate.index_select(0, idx).unsqueeze(1));
    }
    // Switch load-balancing loss: fraction routed times mean probability.
    auto frac = torch::one_hot(assign, kExperts).to(torch::kFloat).mean(0);
    balance_ = kExperts * (frac * probs.mean(0)).sum();
    return out;
  }

  const torch::Tensor &balance_loss() const { return balance_; }

  torch::nn::Linear router{nullptr};
  torch::nn::ModuleList experts{nullptr};

 private:
  double noise_std_;
  torch::Tensor balance_;
};
TORCH_MODULE(MoeLayer);

struct TokenClassifierImpl : torch::nn::Module {
  TokenClassifierImpl()
      : embed(register_module("embed", torch::nn::Linear(32, kModel))),
        moe(register_module("moe", MoeLayer(0.1))),
        head(register_module("head", torch::nn::Linear(kModel, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x) { return head->forward(moe->forward(torch::relu(embed->forward(x)))); }
  torch::nn::Linear embed;
  MoeLayer moe;
  torch::nn::Linear head;
};
TORCH_MODULE(TokenClassifier);

std::pair<torch::Tensor, torch::Tensor> make_tokens(int64_t n) {
  auto x = torch::randn({n, 32});
  auto y = (x.slice(1, 0, kClasses).argmax(1) + (x.sum(1) > 0).to(torch::kLong)) % kClasses;
  return {x, y};
}

// Fraction of held-out tokens each expert receives.
std::vector<double> utilisation(TokenClassifier &model, const torch::Tensor &x, torch::Device device) {
  model->eval();
  std::vector<int64_t> counts(kExperts, 0);
  for (int64_t i = 0; i < x.size(0); i += 512) {
    auto chunk = x.slice(0, i, i + 512).to(device);
    // BUG(torch-inference-without-no-grad): the embedding and the router run
    // over the whole held-out set to count assignments; nothing calls
    // backward().
    auto assign = model->moe->router->forward(torch::relu(model->embed->forward(chunk))).argmax(-1);
    auto c = torch::bincount(assign, {}, kExperts).to(torch::kCPU);
    for (int64_t e = 0; e < kExperts; ++e)
      counts[e] += c[e].item<int64_t>();
  }
  std::vector<double> frac;
  for (auto c : counts)
    frac.push_back(static_cast<double>(c) / static_cast<double>(x.size(0)));
  return frac;
}

int main() {
  torch::manual_seed(11);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TokenClassifier model;
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-4));
  auto [train_x, train_y] = make_tokens(65536);
  auto [val_x, val_y] = make_tokens(4096);
  std::vector<torch::Tensor> balance_curve;
  std::vector<float> loss_curve;

  const int64_t bs = 256;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    model->train();
    auto perm = torch::randperm(train_x.size(0));
    for (int64_t b = 0; b + bs <= train_x.size(0); b += bs) {
      auto idx = perm.slice(0, b, b + bs);
      auto x = train_x.index_select(0, idx).to(device);
      auto y = train_y.index_select(0, idx).to(device);
      opt.zero_grad();
      auto logits = model->forward(x);
      auto aux = model->moe->balance_loss();
      auto loss = torch::nn::functional::cross_entropy(logits, y) + 0.01 * aux;
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the balance loss is kept for the
      // plot with its graph, one router graph per step.
      balance_curve.push_back(aux);
      if ((b / bs) % 100 == 0) {
        // OK(torch-host-sync-in-loop, torch-loss-accumulation-graph): a float,
        // every 100 steps.
        loss_curve.push_back(loss.item<float>());
      }
    }
  }

  {
    torch::NoGradGuard no_grad;
    model->eval();
    // OK(torch-inference-without-no-grad): one forward, under a guard.
    auto acc = (model->forward(val_x.to(device)).argmax(1) == val_y.to(device)).to(torch::kFloat).mean();
    std::cout << "val acc " << acc.item<float>() << "\n";
  }
  for (auto f : utilisation(model, val_x, device))
    std::cout << f << " ";
  std::cout << "\nbalance points " << balance_curve.size() << "\n";
  return 0;
}
