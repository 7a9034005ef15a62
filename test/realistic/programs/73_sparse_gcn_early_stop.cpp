// A two-layer graph convolutional network (Kipf & Welling) for
// semi-supervised node classification on a citation-style graph. The
// symmetric-normalised adjacency is a sparse COO tensor built once on the
// host; the graph lives behind a std::unique_ptr so the loader can swap
// datasets. Training is full-batch with early stopping (a do/while on the
// patience counter); afterwards the hidden node embeddings are exported in
// chunks for a downstream nearest-neighbour index.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

constexpr int64_t kNodes = 2708;
constexpr int64_t kFeatures = 1433;
constexpr int64_t kClasses = 7;

// One device for the whole process, chosen on first use.
const torch::Device &runtime_device() {
  static const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  return device;
}

struct Graph {
  torch::Tensor features;  // [N, F]
  torch::Tensor labels;    // [N]
  torch::Tensor adj;       // sparse [N, N], D^-1/2 (A + I) D^-1/2
  torch::Tensor train_mask, val_mask;
};

std::unique_ptr<Graph> synthetic_graph(int64_t edges) {
  auto g = std::make_unique<Graph>();
  g->features = torch::rand({kNodes, kFeatures}).gt(0.98).to(torch::kFloat);
  g->labels = torch::randint(0, kClasses, {kNodes}, torch::kLong);
  auto src = torch::randint(0, kNodes, {edges}, torch::kLong);
  auto dst = torch::randint(0, kNodes, {edges}, torch::kLong);
  auto loops = torch::arange(kNodes, torch::kLong);
  auto idx = torch::stack({torch::cat({src, dst, loops}), torch::cat({dst, src, loops})});
  auto ones = torch::ones({idx.size(1)});
  auto deg = torch::zeros({kNodes}).index_add_(0, idx[0], ones);
  auto w = deg.index_select(0, idx[0]).rsqrt() * deg.index_select(0, idx[1]).rsqrt();
  g->adj = torch::sparse_coo_tensor(idx, w, {kNodes, kNodes}).coalesce();
  auto split = torch::rand({kNodes});
  g->train_mask = split < 0.1;
  g->val_mask = split.ge(0.1).logical_and(split < 0.3);
  return g;
}

// Moves the dense parts of the graph to the device.
void to_device(Graph &g, const torch::Device &device) {
  g.features = g.features.to(device);
  g.labels = g.labels.to(device);
  g.train_mask = g.train_mask.to(device);
  g.val_mask = g.val_mask.to(device);
}

struct GcnImpl : torch::nn::Module {
  GcnImpl(int64_t hidden, double p)
      : fc1(register_module("fc1", torch::nn::Linear(kFeatures, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, kClasses))),
        drop(register_module("drop", torch::nn::Dropout(p))) {}
  torch::Tensor embed(const torch::Tensor &x, const torch::Tensor &adj) {
    return torch::relu(torch::mm(adj, fc1->forward(drop->forward(x))));
  }
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &adj) {
    return torch::mm(adj, fc2->forward(drop->forward(embed(x, adj))));
  }
  torch::nn::Linear fc1, fc2;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Gcn);

// Hidden embeddings of every node, chunked so the export fits in memory:
// the first layer's projection runs per chunk, the propagation once.
torch::Tensor export_embeddings(Gcn &model, const torch::Tensor &features, int64_t chunk) {
  model->eval();
  std::vector<torch::Tensor> parts;
  std::vector<torch::Tensor> chunks = features.split(chunk);
  for (auto it = chunks.begin(); it != chunks.end(); ++it) {
    // BUG(torch-inference-without-no-grad): an export loop, nothing calls
    // backward(), and autograd records every chunk's projection.
    parts.push_back(model->fc1->forward(*it));
  }
  // OK(torch-loss-accumulation-graph): the parts leave the function.
  return torch::cat(parts);
}

int main() {
  torch::manual_seed(3);
  const auto &device = runtime_device();
  auto graph = synthetic_graph(10556);
  to_device(*graph, device);

  Gcn model(64, 0.5);
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01).weight_decay(5e-4));

  auto logits_of = [&]() {
    // BUG(torch-device-mismatch): to_device() moved the dense fields but
    // not the sparse adjacency, which is still on the host.
    return model->forward(graph->features, graph->adj);
  };

  std::deque<torch::Tensor> recent;
  std::unordered_map<std::string, std::vector<torch::Tensor>> curves;
  double best = 0.0;
  int patience = 20;
  int64_t epoch = 0;
  do {
    model->train();
    opt.zero_grad();
    auto logits = logits_of();
    auto loss = torch::nn::functional::cross_entropy(logits.index({graph->train_mask}),
                                                     graph->labels.index({graph->train_mask}));
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the map's vector outlives the
    // loop and keeps every epoch's graph.
    curves["train"].push_back(loss);
    // OK(torch-loss-accumulation-graph): a detached, bounded window.
    recent.push_back(loss.detach());
    if (recent.size() > 10)
      recent.pop_front();

    double acc = 0.0;
    {
      torch::NoGradGuard no_grad;
      model->eval();
      auto pred = logits_of().argmax(1);
      auto hit = pred.index({graph->val_mask}).eq(graph->labels.index({graph->val_mask}));
      // BUG(torch-host-sync-in-loop): early stopping reads the validation
      // accuracy on the host after every step.
      acc = hit.to(torch::kFloat).mean().item<double>();
    }
    if (acc > best) {
      best = acc;
      patience = 20;
    } else {
      --patience;
    }
    if (epoch % 20 == 0) {
      auto smooth = torch::stack(std::vector<torch::Tensor>(recent.begin(), recent.end())).mean();
      // OK(torch-host-sync-in-loop): every 20 epochs.
      std::cout << "epoch " << epoch << " loss " << smooth.item<double>() << " val " << acc << "\n";
    }
    ++epoch;
  } while (epoch < 400 && patience > 0);

  auto emb = export_embeddings(model, graph->features, 512);
  torch::save(emb.cpu(), "gcn_hidden.pt");
  std::cout << "best val " << best << " after " << epoch << " epochs, " << curves["train"].size() << " points\n";
  return 0;
}
