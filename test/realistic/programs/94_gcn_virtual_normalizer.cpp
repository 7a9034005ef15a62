// Full-batch node classification on a citation-style graph with a two-layer
// GCN. The adjacency normalisation is pluggable through a small virtual
// class hierarchy (symmetric or random-walk), chosen by name. The graph is
// built on the host in a struct and moved to the device field by field.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

class AdjacencyNormalizer {
 public:
  virtual ~AdjacencyNormalizer() = default;
  virtual torch::Tensor normalize(const torch::Tensor &adj) const = 0;
  virtual std::string name() const = 0;
};

class SymmetricNormalizer : public AdjacencyNormalizer {
 public:
  torch::Tensor normalize(const torch::Tensor &adj) const override {
    auto a = adj + torch::eye(adj.size(0), adj.options());
    auto d = a.sum(1).pow(-0.5);
    return d.unsqueeze(1) * a * d.unsqueeze(0);
  }
  std::string name() const override { return "sym"; }
};

class RandomWalkNormalizer : public AdjacencyNormalizer {
 public:
  torch::Tensor normalize(const torch::Tensor &adj) const override {
    auto a = adj + torch::eye(adj.size(0), adj.options());
    return a / a.sum(1, /*keepdim=*/true);
  }
  std::string name() const override { return "rw"; }
};

std::unique_ptr<AdjacencyNormalizer> make_normalizer(const std::string &kind) {
  if (kind == "rw")
    return std::make_unique<RandomWalkNormalizer>();
  return std::make_unique<SymmetricNormalizer>();
}

struct Graph {
  torch::Tensor features;    // [N, F]
  torch::Tensor adj;         // [N, N] dense, normalised
  torch::Tensor labels;      // [N] for the training nodes
  torch::Tensor val_labels;  // [N_val] for the validation nodes
};

constexpr int64_t kNodes = 2708, kFeat = 1433, kClasses = 7, kTrain = 140, kVal = 500;

Graph make_graph(const AdjacencyNormalizer &norm) {
  auto raw = (torch::rand({kNodes, kNodes}) > 0.998).to(torch::kFloat);
  raw = ((raw + raw.t()) > 0).to(torch::kFloat);
  auto labels = torch::randint(0, kClasses, {kNodes}, torch::kLong);
  return {torch::rand({kNodes, kFeat}), norm.normalize(raw), labels.narrow(0, 0, kTrain),
          labels.narrow(0, kTrain, kVal).clone()};
}

Graph to_device(const Graph &g, torch::Device d) {
  Graph out = g;
  // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy;
  // the features stay in pageable memory.
  g.features.pin_memory();
  // BUG(torch-non-blocking-pageable): the features are a plain host
  // factory result, never pinned; the copy runs synchronously.
  out.features = g.features.to(d, /*non_blocking=*/true);
  // OK(torch-non-blocking-pageable): pinned right before the copy.
  out.adj = g.adj.pin_memory().to(d, /*non_blocking=*/true);
  out.labels = g.labels.to(d);
  return out;
}

struct GcnImpl : torch::nn::Module {
  GcnImpl() : w1(register_module("w1", torch::nn::Linear(kFeat, 64))), w2(register_module("w2", torch::nn::Linear(64, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    auto h = torch::relu(torch::mm(adj, w1->forward(x)));
    return torch::mm(adj, w2->forward(h));
  }
  torch::nn::Linear w1, w2;
};
TORCH_MODULE(Gcn);

double accuracy(const torch::Tensor &logits, const torch::Tensor &labels) {
  // BUG(torch-host-sync-in-loop): called on every training epoch; the
  // item() waits for the whole forward and backward.
  return (logits.argmax(1) == labels).to(torch::kFloat).mean().item<double>();
}

int main(int argc, char **argv) {
  torch::manual_seed(7);
  const std::string kind = argc > 1 ? argv[1] : "sym";
  auto norm = make_normalizer(kind);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Graph g = to_device(make_graph(*norm), device);

  Gcn model;
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01).weight_decay(5e-4));

  std::vector<double> train_acc;
  for (int epoch = 0; epoch < 200; ++epoch) {
    opt.zero_grad();
    // OK(torch-device-mismatch): features and adjacency were both moved.
    auto logits = model->forward(g.features, g.adj);
    auto train_logits = logits.narrow(0, 0, kTrain);
    auto loss = torch::nn::functional::cross_entropy(train_logits, g.labels);
    loss.backward();
    opt.step();
    train_acc.push_back(accuracy(train_logits, g.labels));
    if (epoch % 20 != 0)
      continue;
    // OK(torch-host-sync-in-loop): only every 20th epoch reaches here.
    std::cout << norm->name() << " epoch " << epoch << " loss " << loss.item<float>() << "\n";
  }

  torch::NoGradGuard no_grad;
  auto logits = model->forward(g.features, g.adj);
  // BUG(torch-device-mismatch): the validation labels were left out of
  // to_device(); the logits are on the device.
  const double val = accuracy(logits.narrow(0, kTrain, kVal), g.val_labels);
  std::cout << "final train acc " << train_acc.back() << " val acc " << val << "\n";

  for (auto &p : model->named_parameters())
    std::cout << p.key() << " norm " << p.value().norm().item<float>() << "\n";
  return 0;
}
