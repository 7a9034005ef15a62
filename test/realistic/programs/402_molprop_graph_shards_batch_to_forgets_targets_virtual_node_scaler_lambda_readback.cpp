// Multi-task molecular property prediction (solubility, logP, HOMO-LUMO gap)
// with a small graph convolutional network over padded molecular graphs. The
// data set serves pre-packed shards of molecules through Dataset::get(); each
// shard is a GraphBatch that knows how to move itself to a device. Targets are
// standardised per task; a gated readout adds a virtual node that every
// molecule shares. After training, a virtual library is screened for soluble
// candidates.
#include <torch/torch.h>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace molprop {
constexpr int64_t kMaxAtoms = 24, kAtomFeatures = 16, kHidden = 64, kTasks = 3;

struct GraphBatch {
  torch::Tensor atoms;  // B x N x F
  torch::Tensor adj;    // B x N x N
  torch::Tensor mask;   // B x N, 1 for real atoms
  torch::Tensor y;      // B x kTasks (added with the multi-task head)

  GraphBatch &to(torch::Device device, bool non_blocking = false) {
    atoms = atoms.to(device, non_blocking);
    adj = adj.to(device, non_blocking);
    mask = mask.to(device, non_blocking);
    return *this;
  }
};

GraphBatch random_shard(int64_t molecules) {
  auto n_atoms = torch::randint(6, kMaxAtoms + 1, {molecules, 1});
  auto mask = (torch::arange(kMaxAtoms).unsqueeze(0) < n_atoms).to(torch::kFloat);
  auto atoms = torch::randn({molecules, kMaxAtoms, kAtomFeatures}) * mask.unsqueeze(-1);
  auto bonds = (torch::rand({molecules, kMaxAtoms, kMaxAtoms}) < 0.15).to(torch::kFloat);
  auto adj = (bonds + bonds.transpose(1, 2)).clamp_max(1.0) * mask.unsqueeze(1) * mask.unsqueeze(2);
  auto y = torch::stack({atoms.sum({1, 2}) * 0.1, adj.sum({1, 2}) * 0.05, mask.sum(1) * 0.2}, 1);
  return {atoms, adj, mask, y};
}

// Shards are generated once; get() hands out one shard per index.
class MoleculeShards : public torch::data::datasets::Dataset<MoleculeShards, GraphBatch> {
 public:
  MoleculeShards(int64_t shards, int64_t molecules_per_shard) {
    for (int64_t s = 0; s < shards; ++s) shards_.push_back(random_shard(molecules_per_shard));
  }
  GraphBatch get(size_t index) override { return shards_.at(index); }
  torch::optional<size_t> size() const override { return shards_.size(); }

 private:
  std::vector<GraphBatch> shards_;
};

struct GraphConvImpl : nn::Module {
  GraphConvImpl(int64_t in, int64_t out) : lin(register_module("lin", nn::Linear(in, out))) {}
  torch::Tensor forward(const torch::Tensor &h, const torch::Tensor &adj) {
    // OK(torch-device-mismatch): the self loops follow the adjacency's options.
    auto a = adj + torch::eye(adj.size(1), adj.options());
    return torch::relu(lin->forward(torch::bmm(a, h) / a.sum(-1, true).clamp_min(1.0)));
  }
  nn::Linear lin;
};
TORCH_MODULE(GraphConv);

// Attention-gated sum over the atoms and a learned virtual node.
struct GatedReadoutImpl : nn::Module {
  explicit GatedReadoutImpl(int64_t dim)
      : gate(register_module("gate", nn::Linear(dim, 1))), virtual_node(register_parameter("virtual_node", torch::zeros({dim}))) {}
  torch::Tensor forward(const torch::Tensor &h) {  // padded atoms have all-zero rows
    auto all_h = torch::cat({h, virtual_node.expand({h.size(0), 1, h.size(2)})}, 1);
    auto present = (h.abs().sum(-1) > 0).to(torch::kFloat);
    auto all_present = torch::cat({present, torch::ones({h.size(0), 1})}, 1);
    auto score = gate->forward(all_h).squeeze(-1).masked_fill(all_present == 0, -1e9);
    return (torch::softmax(score, 1).unsqueeze(-1) * all_h).sum(1);
  }
  nn::Linear gate;
  torch::Tensor virtual_node;
};
TORCH_MODULE(GatedReadout);

struct PropertyNetImpl : nn::Module {
  PropertyNetImpl()
      : embed(register_module("embed", nn::Linear(kAtomFeatures, kHidden))),
        conv1(register_module("conv1", GraphConv(kHidden, kHidden))),
        conv2(register_module("conv2", GraphConv(kHidden, kHidden))),
        readout(register_module("readout", GatedReadout(kHidden))),
        drop(register_module("drop", nn::Dropout(0.1))),
        head(register_module("head", nn::Linear(kHidden, kTasks))) {}
  torch::Tensor forward(const torch::Tensor &atoms, const torch::Tensor &adj, const torch::Tensor &mask) {
    auto h = embed->forward(atoms) * mask.unsqueeze(-1);
    h = conv2->forward(conv1->forward(h, adj), adj) * mask.unsqueeze(-1);
    // BUG(torch-device-mismatch): the readout extends the atom mask with torch::ones made on the host; h is on the model's device.
    auto pooled = readout->forward(h);
    return head->forward(drop->forward(pooled));
  }
  nn::Linear embed;
  GraphConv conv1, conv2;
  GatedReadout readout;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(PropertyNet);

// Per-task standardisation, fitted on the training targets.
class TargetScaler {
 public:
  explicit TargetScaler(const torch::Tensor &y)
      : mean_(y.mean(0).view({1, kTasks})), std_(y.std(0).clamp_min(1e-6).view({1, kTasks})) {}
  torch::Tensor transform(const torch::Tensor &y) const { return (y - mean_) / std_; }
  torch::Tensor inverse(const torch::Tensor &z) const { return z * std_ + mean_; }

 private:
  torch::Tensor mean_, std_;
};

torch::Tensor all_targets(MoleculeShards &shards) {
  std::vector<torch::Tensor> ys;
  for (size_t s = 0; s < *shards.size(); ++s) ys.push_back(shards.get(s).y);
  return torch::cat(ys);
}

// Synchronises the device when it leaves scope.
struct DeviceFence {
  explicit DeviceFence(torch::Device device) : cuda(device.is_cuda()) {}
  ~DeviceFence() {
    if (cuda) torch::cuda::synchronize();
  }
  bool cuda;
};

class PropertyTrainer {
 public:
  PropertyTrainer(MoleculeShards &train, torch::Device device)
      : device_(device), scaler_(all_targets(train)), opt_(model_->parameters(), torch::optim::AdamWOptions(1e-3)) {
    model_->to(device_);
  }

  double train_epoch(MoleculeShards &train) {
    model_->train();
    auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device_));
    const size_t shards = *train.size();
    for (size_t s = 0; s < shards; ++s) {
      auto g = train.get(s);
      g.to(device_);
      auto pred = model_->forward(g.atoms, g.adj, g.mask);
      // BUG(torch-device-mismatch): GraphBatch::to() never moves y; the standardised targets stay on the host.
      auto loss = F::mse_loss(pred, scaler_.transform(g.y));
      opt_.zero_grad();
      loss.backward();
      opt_.step();
      epoch_loss += loss.detach();
    }
    // OK(torch-host-sync-in-loop): read once per epoch, after the step loop.
    return epoch_loss.item<double>() / static_cast<double>(shards);
  }

  // Mean absolute error per task, in physical units.
  torch::Tensor evaluate(MoleculeShards &val) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto abs_err = torch::zeros({kTasks}, torch::TensorOptions().device(device_));
    int64_t molecules = 0;
    for (size_t s = 0; s < *val.size(); ++s) {
      auto g = val.get(s);
      g.to(device_);
      // BUG(torch-device-mismatch): inverse() scales the predictions on device_ with the scaler's host statistics.
      auto pred = scaler_.inverse(model_->forward(g.atoms, g.adj, g.mask));
      // OK(torch-device-mismatch): the targets are moved explicitly here.
      abs_err += (pred - g.y.to(device_)).abs().sum(0);
      molecules += g.y.size(0);
    }
    // OK(torch-host-sync-in-loop): read once per evaluation, after its loop.
    return abs_err.cpu() / static_cast<double>(molecules);
  }

  // Writes shard:molecule for every candidate above the standardised solubility threshold.
  void screen(MoleculeShards &library, const std::string &path, double threshold) {
    torch::NoGradGuard no_grad;
    model_->eval();
    std::ofstream out(path);
    for (size_t s = 0; s < *library.size(); ++s) {
      auto g = library.get(s);
      // BUG(torch-non-blocking-pageable): the shard's tensors were made by torch::randn/rand in pageable memory; to() copies them with non_blocking.
      g.to(device_, /*non_blocking=*/true);
      auto host = model_->forward(g.atoms, g.adj, g.mask).select(1, 0).to(torch::kCPU, /*non_blocking=*/true);
      auto emit = [&](int64_t m) {
        // BUG(torch-non-blocking-d2h-race): the lambda reads the prediction that is still being copied back.
        if (host[m].item<double>() > threshold) out << s << ':' << m << '\n';
      };
      for (int64_t m = 0; m < host.size(0); ++m) emit(m);
    }
  }

  void print_reference(const GraphBatch &reference) {
    torch::NoGradGuard no_grad;
    model_->eval();
    torch::Tensor host;
    {
      DeviceFence fence(device_);
      host = model_->forward(reference.atoms.to(device_), reference.adj.to(device_), reference.mask.to(device_))
                 .to(torch::kCPU, /*non_blocking=*/true);
    }
    // OK(torch-non-blocking-d2h-race): the fence synchronised when its scope ended.
    std::cout << "reference molecules (standardised): " << host << '\n';
  }

 private:
  torch::Device device_;
  PropertyNet model_;
  TargetScaler scaler_;
  torch::optim::AdamW opt_;
};
}  // namespace molprop

int main() {
  using namespace molprop;
  torch::manual_seed(402);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  MoleculeShards train(40, 64), val(8, 64), library(20, 128);
  PropertyTrainer trainer(train, device);
  for (int epoch = 0; epoch < 10; ++epoch) {
    const double loss = trainer.train_epoch(train);
    std::cout << "epoch " << epoch << " loss " << loss << " val MAE " << trainer.evaluate(val) << '\n';
  }
  trainer.print_reference(random_shard(2));
  trainer.screen(library, "soluble_candidates.txt", 1.5);
  return 0;
}
