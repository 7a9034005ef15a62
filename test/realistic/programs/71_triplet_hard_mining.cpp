// Metric learning for product images with a batch-hard triplet loss: a
// P x K sampler draws P identities with K images each, the embedding network
// maps them to the unit sphere, and for every anchor the hardest positive
// and the hardest negative in the batch form the triplet. At the end the
// gallery is embedded and exported to a flat nearest-neighbour index.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <vector>

constexpr int64_t kEmbed = 64;

struct EmbedNetImpl : torch::nn::Module {
  EmbedNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 5).stride(2)))),
        fc(register_module("fc", torch::nn::Linear(32 * 14 * 14, kEmbed))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv->forward(x)).flatten(1);
    return torch::nn::functional::normalize(fc->forward(x), torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(EmbedNet);

// P identities x K images per batch, from an index of images per identity.
class PKSampler {
 public:
  PKSampler(std::map<int64_t, std::vector<int64_t>> by_id, int64_t p, int64_t k)
      : by_id_(std::move(by_id)), p_(p), k_(k), rng_(17) {
    for (const auto &kv : by_id_)
      ids_.push_back(kv.first);
  }
  // Image indices and their identity labels, on the host.
  std::pair<torch::Tensor, torch::Tensor> next() {
    std::shuffle(ids_.begin(), ids_.end(), rng_);
    std::vector<int64_t> images, labels;
    for (int64_t i = 0; i < p_; ++i) {
      const auto &pool = by_id_[ids_[i]];
      std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
      for (int64_t j = 0; j < k_; ++j) {
        images.push_back(pool[pick(rng_)]);
        labels.push_back(ids_[i]);
      }
    }
    return {torch::tensor(images, torch::kLong), torch::tensor(labels, torch::kLong)};
  }

 private:
  std::map<int64_t, std::vector<int64_t>> by_id_;
  std::vector<int64_t> ids_;
  int64_t p_, k_;
  std::mt19937 rng_;
};

struct TripletStats {
  torch::Tensor total;
  int64_t steps = 0;
};

// Batch-hard triplet loss; 'same' is the [B, B] same-identity mask.
torch::Tensor batch_hard(const torch::Tensor &emb, const torch::Tensor &same, double margin) {
  auto dist = torch::cdist(emb, emb);
  auto hardest_pos = (dist * same).max(1);
  auto masked = dist + same * 1e6;
  auto hardest_neg = std::get<0>(masked.min(1));
  return torch::relu(std::get<0>(hardest_pos) - hardest_neg + margin);
}

class FlatIndex {
 public:
  void add(const torch::Tensor &vectors) {
    const float *p = vectors.data_ptr<float>();
    data_.insert(data_.end(), p, p + vectors.numel());
  }
  size_t size() const { return data_.size() / kEmbed; }

 private:
  std::vector<float> data_;
};

int main() {
  torch::manual_seed(2);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const int64_t n_images = 12000;
  auto images = torch::rand({n_images, 3, 32, 32});
  std::map<int64_t, std::vector<int64_t>> by_id;
  for (int64_t i = 0; i < n_images; ++i)
    by_id[i % 600].push_back(i);

  EmbedNet net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
  PKSampler sampler(by_id, 16, 4);
  TripletStats stats{torch::zeros({}, torch::TensorOptions().device(device))};

  for (int64_t step = 0; step < 5000; ++step) {
    auto [idx, labels] = sampler.next();
    auto x = images.index_select(0, idx).to(device);
    auto same = (labels.unsqueeze(0) == labels.unsqueeze(1)).to(torch::kFloat);
    opt.zero_grad();
    // BUG(torch-device-mismatch): batch_hard() combines the embeddings (on
    // 'device') with the identity mask, which was built on the host from the
    // sampler's labels.
    auto per_anchor = batch_hard(net->forward(x), same, 0.2);
    // BUG(torch-host-sync-in-loop): the number of active triplets is read
    // on the host every step to normalise the loss.
    const int64_t active = (per_anchor > 0).sum().item<int64_t>();
    auto loss = per_anchor.sum() / static_cast<double>(std::max<int64_t>(1, active));
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the running total keeps the graph
    // of every step.
    stats.total = stats.total + loss;
    ++stats.steps;
    if (step % 500 == 0) {
      // OK(torch-host-sync-in-loop): every 500 steps.
      std::cout << "step " << step << " loss " << loss.item<float>() << "\n";
    }
  }

  // Gallery export.
  net->eval();
  torch::NoGradGuard no_grad;
  FlatIndex index;
  for (int64_t i = 0; i < n_images; i += 1000) {
    // OK(torch-inference-without-no-grad): under the guard above.
    auto emb = net->forward(images.slice(0, i, i + 1000).to(device));
    auto host = emb.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the index reads the embeddings before
    // the asynchronous copy has finished.
    index.add(host);
  }
  torch::cuda::synchronize();
  auto probe = net->forward(images.slice(0, 0, 8).to(device)).to(torch::kCPU, /*non_blocking=*/true);
  torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised before the read.
  index.add(probe);
  std::cout << "indexed " << index.size() << " vectors, mean loss "
            << (stats.total / static_cast<double>(stats.steps)).item<float>() << "\n";
  return 0;
}
