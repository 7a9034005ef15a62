// Semi-supervised node classification with a two-layer graph convolutional
// network. The epoch loop lives in a CRTP base that drives any trainer that
// provides train_step() and on_step_end(); the graph trainer keeps the
// normalised adjacency, the node features and the labels as members, plus a
// host copy of the labels for reporting and a label-propagation baseline.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

using Edge = std::pair<int64_t, int64_t>;

// D^-1/2 (A + I) D^-1/2 as a dense matrix; fine for a few thousand nodes.
torch::Tensor normalized_adjacency(const std::vector<Edge> &edges, int64_t nodes) {
  auto a = torch::eye(nodes);
  for (const auto &[u, v] : edges) {
    a[u][v] = 1.0;
    a[v][u] = 1.0;
  }
  auto d = a.sum(1).pow(-0.5);
  return d.unsqueeze(1) * a * d.unsqueeze(0);
}

std::vector<Edge> random_graph(int64_t nodes, int64_t edges_per_node, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, nodes - 1);
  std::vector<Edge> edges;
  for (int64_t u = 0; u < nodes; ++u)
    for (int64_t k = 0; k < edges_per_node; ++k)
      edges.emplace_back(u, pick(rng));
  return edges;
}

struct GraphConvImpl : torch::nn::Module {
  GraphConvImpl(int64_t in, int64_t out) : lin(register_module("lin", torch::nn::Linear(in, out))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) { return torch::mm(adj, lin(x)); }
  torch::nn::Linear lin;
};
TORCH_MODULE(GraphConv);

struct GcnImpl : torch::nn::Module {
  GcnImpl(int64_t in, int64_t hidden, int64_t classes)
      : conv1(register_module("conv1", GraphConv(in, hidden))),
        conv2(register_module("conv2", GraphConv(hidden, classes))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    return conv2(torch::relu(conv1(x, adj)), adj);
  }
  GraphConv conv1, conv2;
};
TORCH_MODULE(Gcn);

// The epoch loop, shared by every trainer of the project.
template <typename Derived>
class TrainerBase {
 public:
  void fit(int64_t epochs, int64_t log_every) {
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      torch::Tensor loss = self().train_step();
      self().on_step_end(epoch, loss);
      if (epoch % log_every == 0) {
        // OK(torch-host-sync-in-loop): printed once every log_every epochs.
        std::cout << "epoch " << epoch << " loss " << loss.item<double>() << '\n';
      }
    }
  }

 private:
  Derived &self() { return static_cast<Derived &>(*this); }
};

class GcnTrainer : public TrainerBase<GcnTrainer> {
 public:
  static constexpr int64_t kClasses = 4;

  GcnTrainer(const std::vector<Edge> &edges, int64_t nodes, torch::Device device)
      : nodes_(nodes),
        device_(device),
        model_(16, 32, kClasses),
        adj_(normalized_adjacency(edges, nodes).to(device)),
        features_(torch::randn({nodes, 16}, device)),
        labels_(torch::randint(0, kClasses, {nodes}, torch::TensorOptions().dtype(torch::kLong).device(device))),
        host_labels_(labels_.cpu()),
        train_mask_(torch::rand({nodes}, device) < 0.3),
        opt_(model_->parameters(), torch::optim::AdamOptions(1e-2)) {
    // OK(torch-tensor-to-discarded): Module::to moves the parameters in place.
    model_->to(device_);
  }

  torch::Tensor train_step() {
    auto logits = model_->forward(features_, adj_);
    auto loss = torch::nn::functional::cross_entropy(logits.index({train_mask_}), labels_.index({train_mask_}));
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    return loss.detach();
  }

  void on_step_end(int64_t epoch, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): fit() calls this hook after every
    // train_step(); .item() waits for the GPU once per epoch.
    history_.push_back(loss.item<double>());
    if (epoch > 0 && history_.back() > 4 * history_.front())
      std::cerr << "loss is diverging\n";
  }

  double train_accuracy() {
    torch::NoGradGuard no_grad;
    auto pred = model_->forward(features_, adj_).argmax(1);
    // OK(torch-device-mismatch): the prediction is brought to the host before
    // it meets the host copy of the labels.
    auto correct = (pred.cpu() == host_labels_).sum();
    return correct.item<double>() / static_cast<double>(nodes_);
  }

  // Label-propagation baseline: spread the one-hot labels of the training
  // nodes over the graph, two hops.
  torch::Tensor propagate_labels() {
    auto seeds = torch::zeros({nodes_, kClasses});
    seeds.scatter_(1, host_labels_.unsqueeze(1), 1.0);
    // BUG(torch-device-mismatch): adj_ was moved to device_ in the
    // constructor; the seeds were built on the host from host_labels_.
    auto spread = torch::mm(adj_, seeds);
    return spread;
  }

  void export_predictions(const std::string &path) {
    torch::NoGradGuard no_grad;
    auto probs = model_->forward(features_, adj_).softmax(1);
    // BUG(torch-tensor-to-discarded): the half-precision copy is dropped;
    // the file gets the float32 tensor.
    probs.to(torch::kHalf);
    torch::save(probs, path);
  }

  const std::vector<double> &history() const { return history_; }

 private:
  int64_t nodes_;
  torch::Device device_;
  Gcn model_;
  torch::Tensor adj_;
  torch::Tensor features_;
  torch::Tensor labels_;
  torch::Tensor host_labels_;
  torch::Tensor train_mask_;
  torch::optim::Adam opt_;
  std::vector<double> history_;
};

int main(int argc, char **argv) {
  const int64_t nodes = argc > 1 ? std::stoll(argv[1]) : 2000;
  torch::Device device = torch::kCPU;
  if (torch::cuda::is_available())
    device = torch::Device(torch::kCUDA);

  GcnTrainer trainer(random_graph(nodes, 5, 7), nodes, device);
  trainer.fit(200, 20);
  std::cout << "train accuracy " << trainer.train_accuracy() << '\n';

  auto baseline = trainer.propagate_labels();
  std::cout << "baseline spread " << baseline.sum(1).mean().item<double>() << '\n';
  trainer.export_predictions("gcn_probs.pt");
  std::cout << trainer.history().size() << " epochs logged\n";
  return 0;
}
