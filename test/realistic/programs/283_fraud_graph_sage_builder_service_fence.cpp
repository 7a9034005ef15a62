// Fraud detection on a payment graph: accounts are nodes (16 behavioural
// features), transfers are edges of a row-normalised adjacency. A two-layer
// GraphSAGE-style network with batch norm and dropout labels accounts as
// fraudulent or not, trained full-batch on the labelled accounts (a template
// shared with an MLP baseline), then fine-tuned on investigator case
// subgraphs. The scoring service takes request graphs from the payment
// switch and flags accounts above a risk threshold.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kFeat = 16, kHidden = 64;

struct TxGraph {
  torch::Tensor x;           // [N, 16]
  torch::Tensor adj;         // [N, N], rows sum to 1
  torch::Tensor labels;      // [N] 0 legit, 1 fraud
  torch::Tensor train_mask;  // [N] bool
  torch::Tensor val_mask;    // [N] bool

  void to(const torch::Device &d) {
    // OK(torch-tensor-to-discarded): assigned back.
    x = x.to(d);
    adj = adj.to(d);
    labels = labels.to(d);
    // BUG(torch-tensor-to-discarded): the mask's copy is thrown away; it
    // stays on the host while the rest of the graph moves.
    train_mask.to(d);
    val_mask = val_mask.to(d);
  }
};

class GraphBuilder {
 public:
  GraphBuilder &accounts(int64_t n) { n_ = n; return *this; }
  GraphBuilder &transfers(int64_t m) { m_ = m; return *this; }
  GraphBuilder &seed(uint64_t s) { seed_ = s; return *this; }
  TxGraph build() const {
    auto gen = at::detail::createCPUGenerator(seed_);
    auto src = torch::randint(n_, {m_}, gen, torch::kLong), dst = torch::randint(n_, {m_}, gen, torch::kLong);
    auto adj = torch::eye(n_);
    adj.index_put_({src, dst}, torch::ones({m_}), /*accumulate=*/true);
    adj = adj / adj.sum(1, /*keepdim=*/true);
    auto x = torch::randn({n_, kFeat}, gen);
    auto labels = (x.select(1, 0) + torch::mm(adj, x).select(1, 1) > 1.8).to(torch::kLong);
    auto split = torch::rand({n_}, gen);
    return {x, adj, labels, split < 0.6, (split >= 0.6) & (split < 0.8)};
  }
 private:
  int64_t n_ = 100, m_ = 400;
  uint64_t seed_ = 0;
};

struct SageLayerImpl : nn::Module {
  SageLayerImpl(int64_t in, int64_t out)
      : self_lin(register_module("self_lin", nn::Linear(in, out))), neigh_lin(register_module("neigh_lin", nn::Linear(in, out))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    return self_lin->forward(x) + neigh_lin->forward(torch::mm(adj, x));
  }
  nn::Linear self_lin, neigh_lin;
};
TORCH_MODULE(SageLayer);

struct FraudGNNImpl : nn::Module {
  FraudGNNImpl()
      : l1(register_module("l1", SageLayer(kFeat, kHidden))), bn(register_module("bn", nn::BatchNorm1d(kHidden))),
        drop(register_module("drop", nn::Dropout(0.3))), l2(register_module("l2", SageLayer(kHidden, 2))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    return l2->forward(drop->forward(torch::relu(bn->forward(l1->forward(x, adj)))), adj);
  }
  SageLayer l1;
  nn::BatchNorm1d bn;
  nn::Dropout drop;
  SageLayer l2;
};
TORCH_MODULE(FraudGNN);

struct MlpBaselineImpl : nn::Module {
  MlpBaselineImpl() : mlp(register_module("mlp", nn::Sequential(nn::Linear(kFeat, kHidden), nn::ReLU(), nn::Linear(kHidden, 2)))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor & /*adj*/) { return mlp->forward(x); }
  nn::Sequential mlp;
};
TORCH_MODULE(MlpBaseline);

template <typename Net>
void place(Net &net, const torch::Device &device) {
  // OK(torch-tensor-to-discarded): Module::to moves the module in place.
  net->to(device);
}

template <typename Net>
void fit_full_batch(Net &net, const TxGraph &g, int epochs) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(5e-3).weight_decay(5e-4));
  net->train();
  opt.zero_grad();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    torch::Tensor logits = net->forward(g.x, g.adj);
    torch::Tensor loss = F::cross_entropy(logits.index({g.train_mask}), g.labels.index({g.train_mask}));
    loss.backward();
    // BUG(torch-missing-zero-grad): the gradients are cleared once, before
    // the loop; every epoch steps on the sum of all earlier ones.
    opt.step();
    if (epoch % 20 == 0)
      // OK(torch-host-sync-in-loop): every 20th epoch only.
      std::cout << "epoch " << epoch << " loss " << loss.item<float>() << '\n';
  }
}

// Restores the module's previous mode when the scope ends.
class EvalScope {
 public:
  explicit EvalScope(nn::Module &m) : m_(m), was_training_(m.is_training()) { m_.eval(); }
  ~EvalScope() { m_.train(was_training_); }
 private:
  nn::Module &m_;
  bool was_training_;
};

double val_accuracy(FraudGNN &net, const TxGraph &g) {
  EvalScope scope(*net);
  torch::AutoGradMode grad_mode(false);
  // OK(torch-eval-mode-missing): the EvalScope above holds eval() to the end of the function.
  auto pred = net->forward(g.x, g.adj).argmax(1);
  return (pred.index({g.val_mask}) == g.labels.index({g.val_mask})).to(torch::kFloat).mean().item<double>();
}

torch::Tensor per_micro(const torch::Tensor &loss, int accum) { return loss / accum; }

void fine_tune_cases(FraudGNN &net, const std::vector<TxGraph> &cases, int accum, const torch::Device &device) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  net->train();
  int micro = 0;
  for (const auto &c : cases) {
    // OK(torch-host-sync-in-loop): the case labels are still on the host here.
    if (c.labels.sum().item<int64_t>() == 0)
      continue;
    auto logits = net->forward(c.x.to(device), c.adj.to(device));
    auto loss = per_micro(F::cross_entropy(logits, c.labels.to(device)), accum);
    // OK(torch-grad-accumulation-unscaled): per_micro() divides by the number of accumulated cases.
    loss.backward();
    if (++micro % accum == 0) {
      // OK(torch-missing-zero-grad): step and reset under the same condition.
      opt.step();
      opt.zero_grad();
    }
  }
}

double case_val_loss(FraudGNN &net, const std::vector<TxGraph> &cases, const torch::Device &device) {
  EvalScope scope(*net);
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, torch::TensorOptions().device(device));
  for (const auto &c : cases)
    // OK(torch-loss-accumulation-graph, torch-eval-mode-missing): computed under the guard, with the scope's eval().
    total += F::cross_entropy(net->forward(c.x.to(device), c.adj.to(device)), c.labels.to(device));
  return total.item<double>() / static_cast<double>(cases.size());
}

std::vector<torch::Device> scoring_devices() {
  std::vector<torch::Device> out;
  for (int64_t r = 0; r < static_cast<int64_t>(torch::cuda::device_count()); ++r)
    // OK(torch-cuda-unguarded, torch-device-index-unchecked): the ordinal is bounded by device_count().
    out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(r));
  if (out.empty())
    out.emplace_back(torch::kCPU);
  return out;
}

torch::Tensor upload(const torch::Tensor &host, const torch::Device &device) {
  if (!device.is_cuda())
    return host.to(device);
  auto staged = torch::empty(host.sizes(), host.options().pinned_memory(true));
  staged.copy_(host);
  // OK(torch-non-blocking-pageable): the staging buffer is page-locked.
  return staged.to(device, /*non_blocking=*/true);
}

class DeviceFence {
 public:
  explicit DeviceFence(torch::Device d) : d_(d) {}
  ~DeviceFence() {
    if (d_.is_cuda())
      torch::cuda::synchronize();
  }
 private:
  torch::Device d_;
};

class FraudService {
 public:
  FraudService(FraudGNN model, torch::Device device) : model_(std::move(model)), device_(device) {}
  torch::Tensor score(const std::vector<float> &feats, const torch::Tensor &adj) {
    const int64_t n = static_cast<int64_t>(feats.size()) / kFeat;
    auto x = torch::from_blob(const_cast<float *>(feats.data()), {n, kFeat}).clone();
    // OK(torch-inference-without-no-grad): main() holds InferenceMode around the request loop.
    // BUG(torch-eval-mode-missing): the model comes straight from fine-tuning, in train().
    // BUG(torch-device-mismatch): x was built on the host; the model is on the device main() chose.
    auto logits = model_->forward(x, upload(adj, device_));
    return torch::softmax(logits, 1).select(1, 1);
  }
 private:
  FraudGNN model_;
  torch::Device device_;
};

int main() {
  torch::manual_seed(283);
  const torch::Device device = scoring_devices().front();
  TxGraph graph = GraphBuilder().accounts(2000).transfers(12000).seed(1).build();
  graph.to(device);

  MlpBaseline baseline;
  place(baseline, device);
  fit_full_batch(baseline, graph, 100);
  FraudGNN net;
  place(net, device);
  fit_full_batch(net, graph, 200);
  std::cout << "val accuracy " << val_accuracy(net, graph) << '\n';

  std::vector<TxGraph> cases;
  for (uint64_t i = 0; i < 24; ++i)
    cases.push_back(GraphBuilder().accounts(60).transfers(300).seed(100 + i).build());
  fine_tune_cases(net, cases, 4, device);
  std::cout << "case val loss " << case_val_loss(net, cases, device) << '\n';

  FraudService service(net, device);
  torch::Tensor risk;
  {
    c10::InferenceMode inference;
    for (uint64_t i = 0; i < 8; ++i) {
      TxGraph req = GraphBuilder().accounts(50).transfers(200).seed(900 + i).build();
      std::vector<float> feats(req.x.data_ptr<float>(), req.x.data_ptr<float>() + req.x.numel());
      auto s = service.score(feats, req.adj);
      risk = risk.defined() ? torch::cat({risk, s}) : s;
    }
  }
  torch::Tensor host;
  {
    DeviceFence fence(device);
    host = risk.to(torch::kCPU, /*non_blocking=*/true);
  }
  // OK(torch-non-blocking-d2h-race): the fence synchronised when its scope closed.
  std::cout << "flagged " << (host > 0.9).sum().item<int64_t>() << " of " << host.numel() << " accounts\n";
}
