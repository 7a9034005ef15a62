// Link prediction on a citation graph: a two-layer GraphSAGE-style encoder
// (mean aggregation through a row-normalised dense adjacency, dropout
// between the layers) embeds 2000 papers, a bilinear decoder scores
// candidate citations against sampled negatives. Two trainers share the
// accumulation loop of their base class (the whole graph does not fit twice
// on the lab's 16 GB cards): one on the full graph, one with DropEdge. A new
// venue's papers are fine-tuned with separate encoder and decoder learning
// rates, and Hits@10 is reported after each phase. LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kNodes = 2000, kFeat = 128, kHidden = 64;

struct SageEncoderImpl : nn::Module {
  SageEncoderImpl()
      : self1(register_module("self1", nn::Linear(kFeat, kHidden))), neigh1(register_module("neigh1", nn::Linear(kFeat, kHidden))),
        self2(register_module("self2", nn::Linear(kHidden, kHidden))), neigh2(register_module("neigh2", nn::Linear(kHidden, kHidden))),
        drop(register_module("drop", nn::Dropout(0.3))) {}
  // x [N, 128], adj [N, N] row-normalised -> z [N, 64]
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& adj) {
    auto h = drop->forward(torch::relu(self1->forward(x) + neigh1->forward(torch::mm(adj, x))));
    return self2->forward(h) + neigh2->forward(torch::mm(adj, h));
  }
  nn::Linear self1, neigh1, self2, neigh2;
  nn::Dropout drop;
};
TORCH_MODULE(SageEncoder);

struct BilinearDecoderImpl : nn::Module {
  BilinearDecoderImpl() : w(register_parameter("w", torch::eye(kHidden))) {}
  torch::Tensor forward(const torch::Tensor& z, const torch::Tensor& src, const torch::Tensor& dst) {
    return (z.index_select(0, src).mm(w) * z.index_select(0, dst)).sum(1);
  }
  torch::Tensor w;
};
TORCH_MODULE(BilinearDecoder);

struct Graph {
  torch::Tensor features, adj;
};

struct EdgeBatch {
  torch::Tensor src, dst, neg_dst;  // [E] int64 each
  int relation = 0;                 // 0: cites, 1: same first author
};

EdgeBatch sample_edges(int64_t n, torch::Device device, int relation = 0) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  return {torch::randint(0, kNodes, {n}, opts), torch::randint(0, kNodes, {n}, opts), torch::randint(0, kNodes, {n}, opts),
          relation};
}

std::pair<torch::Tensor, torch::Tensor> score_edges(SageEncoder& enc, BilinearDecoder& dec, const torch::Tensor& x,
                                                    const torch::Tensor& adj, const EdgeBatch& b) {
  auto z = enc->forward(x, adj);
  return {dec->forward(z, b.src, b.dst), dec->forward(z, b.src, b.neg_dst)};
}

torch::Tensor link_loss(const torch::Tensor& pos, const torch::Tensor& neg) {
  return F::binary_cross_entropy_with_logits(torch::cat({pos, neg}), torch::cat({torch::ones_like(pos), torch::zeros_like(neg)}));
}

// Running sum and count, for tensors and plain numbers alike.
template <typename T>
class Meter {
 public:
  explicit Meter(T zero) : sum_(std::move(zero)) {}
  void add(const T& v) {
    // BUG(torch-loss-accumulation-graph): DropEdgeTrainer adds its loss
    // undetached on every batch; sum_ chains all of their graphs.
    sum_ = sum_ + v;
    ++n_;
  }
  T sum() const { return sum_; }
  int64_t count() const { return n_; }

 private:
  T sum_;
  int64_t n_ = 0;
};

class LinkTrainer {
 public:
  LinkTrainer(SageEncoder enc, BilinearDecoder dec, int64_t accum, torch::Device device)
      : enc_(std::move(enc)), dec_(std::move(dec)), accum_(accum), loss_meter_(torch::zeros({}, device)) {
    auto params = enc_->parameters();
    for (auto& p : dec_->parameters()) params.push_back(p);
    opt_ = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(5e-3));
  }
  virtual ~LinkTrainer() = default;

  void fit(const Graph& g, const std::vector<EdgeBatch>& batches) {
    enc_->train();
    opt_->zero_grad();
    for (const auto& b : batches) {
      backward_batch(g, b);
      if (++micro_ == accum_) {
        opt_->step();
        opt_->zero_grad();
        micro_ = 0;
      }
    }
    std::cout << "mean loss " << (loss_meter_.sum() / static_cast<double>(loss_meter_.count())).item<double>() << '\n';
  }

 protected:
  virtual void backward_batch(const Graph& g, const EdgeBatch& b) = 0;

  SageEncoder enc_;
  BilinearDecoder dec_;
  int64_t accum_;
  int64_t micro_ = 0;
  Meter<torch::Tensor> loss_meter_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

class FullGraphTrainer : public LinkTrainer {
 public:
  using LinkTrainer::LinkTrainer;
  void report() const {
    for (const auto& [relation, curve] : per_relation_)
      std::cout << "relation " << relation << " mean loss " << torch::stack(curve).mean().item<double>() << '\n';
  }

 protected:
  void backward_batch(const Graph& g, const EdgeBatch& b) override {
    auto share = [this](const torch::Tensor& loss) { return loss / static_cast<double>(accum_); };
    auto [pos, neg] = score_edges(enc_, dec_, g.features, g.adj, b);
    auto loss = link_loss(pos, neg);
    // OK(torch-grad-accumulation-unscaled): the lambda divides by accum_.
    share(loss).backward();
    // OK(torch-loss-accumulation-graph): detached.
    loss_meter_.add(loss.detach());
    auto& curve = per_relation_[b.relation];
    // BUG(torch-loss-accumulation-graph): the reference is to a member
    // map's element; every batch's loss keeps its graph there.
    curve.push_back(loss);
  }

 private:
  std::map<int, std::vector<torch::Tensor>> per_relation_;
};

// DropEdge: a fresh random subset of the citations in every batch.
class DropEdgeTrainer : public LinkTrainer {
 public:
  DropEdgeTrainer(SageEncoder enc, BilinearDecoder dec, int64_t accum, torch::Device device, double keep)
      : LinkTrainer(std::move(enc), std::move(dec), accum, device), keep_(keep) {}

 protected:
  void backward_batch(const Graph& g, const EdgeBatch& b) override {
    auto mask = (torch::rand_like(g.adj) < keep_).to(g.adj.scalar_type());
    auto adj = g.adj * mask;
    adj = adj / adj.sum(1, true).clamp_min(1e-6);
    auto [pos, neg] = score_edges(enc_, dec_, g.features, adj, b);
    auto loss = link_loss(pos, neg);
    // BUG(torch-grad-accumulation-unscaled): fit() steps once every accum_
    // batches; unlike FullGraphTrainer, the mean loss is not divided.
    loss.backward();
    loss_meter_.add(loss);
  }

 private:
  double keep_;
};

// Hits@10 against the batch's negatives.
double hits_at_10(SageEncoder& enc, BilinearDecoder& dec, const Graph& g, const std::vector<EdgeBatch>& test) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): main() calls this after
  // finetune_new_venue() left the encoder in training mode; dropout is on.
  auto z = enc->forward(g.features, g.adj);
  double hits = 0.0, total = 0.0;
  for (const auto& b : test) {
    auto pos = dec->forward(z, b.src, b.dst);
    auto neg = dec->forward(z, b.src, b.neg_dst).view({-1, 1}).expand({-1, 10});
    auto rank = (neg >= pos.unsqueeze(1)).sum(1);
    hits += (rank < 10).sum().item<double>();
    total += static_cast<double>(pos.size(0));
  }
  return hits / total;
}

// A new venue's papers: encoder and decoder at their own learning rates.
void finetune_new_venue(SageEncoder& enc, BilinearDecoder& dec, const Graph& g, const std::vector<EdgeBatch>& venue) {
  std::map<std::string, std::unique_ptr<torch::optim::Optimizer>> opts;
  opts["encoder"] = std::make_unique<torch::optim::Adam>(enc->parameters(), torch::optim::AdamOptions(1e-4));
  opts["decoder"] = std::make_unique<torch::optim::Adam>(dec->parameters(), torch::optim::AdamOptions(1e-3));
  enc->train();
  auto gap = torch::zeros({}, g.features.options());
  for (auto& entry : opts) entry.second->zero_grad();
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const auto& b : venue) {
      auto [pos, neg] = score_edges(enc, dec, g.features, g.adj, b);
      // OK(torch-grad-accumulation-unscaled): both optimizers step on every
      // batch; the map is never empty.
      link_loss(pos, neg).backward();
      // BUG(torch-missing-zero-grad): both optimizers were reset once,
      // before the epochs; every step applies all earlier batches' gradients.
      for (auto& entry : opts) entry.second->step();
      // BUG(torch-loss-accumulation-graph): the score gap is computed from
      // the decoder outputs of the structured binding, never detached.
      gap += pos.mean() - neg.mean();
    }
  }
  std::cout << "venue score gap " << (gap / static_cast<double>(3 * venue.size())).item<double>() << '\n';
}

int main() {
  torch::manual_seed(374);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Graph g{torch::randn({kNodes, kFeat}, device), torch::rand({kNodes, kNodes}, device)};
  g.adj = g.adj * (g.adj > 0.995).to(torch::kFloat);
  g.adj = g.adj / g.adj.sum(1, true).clamp_min(1e-6);

  SageEncoder enc;
  BilinearDecoder dec;
  enc->to(device);
  dec->to(device);
  std::vector<EdgeBatch> train, test, venue;
  for (int i = 0; i < 40; ++i) train.push_back(sample_edges(512, device, i % 2));
  for (int i = 0; i < 4; ++i) test.push_back(sample_edges(256, device));
  for (int i = 0; i < 6; ++i) venue.push_back(sample_edges(128, device));

  FullGraphTrainer full(enc, dec, 4, device);
  full.fit(g, train);
  full.report();
  enc->eval();
  std::cout << "full-graph Hits@10 " << hits_at_10(enc, dec, g, test) << '\n';

  DropEdgeTrainer dropedge(enc, dec, 4, device, 0.8);
  dropedge.fit(g, train);
  enc->eval();
  std::cout << "DropEdge Hits@10 " << hits_at_10(enc, dec, g, test) << '\n';

  finetune_new_venue(enc, dec, g, venue);
  std::cout << "after venue fine-tune Hits@10 " << hits_at_10(enc, dec, g, test) << '\n';
}
