// Image retrieval with a small embedding net: a gallery of host embeddings
// is scored against query batches on the GPU. Gallery shards are gathered
// with iterators (a batch is the range [it, it + n)), a recall helper moves
// the queries but forgets the labels, and a bookkeeping object that only
// counts the model's parameters is built from the model after it was moved.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kDim = 64;

struct EmbedderImpl : torch::nn::Module {
  EmbedderImpl()
      : fc1(register_module("fc1", torch::nn::Linear(128, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, kDim))) {}
  torch::Tensor forward(torch::Tensor x) {
    return torch::nn::functional::normalize(fc2(torch::relu(fc1(x))),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Embedder);

struct Query {
  torch::Tensor features, label;
};

std::vector<torch::Tensor> host_gallery(int64_t shards) {
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < shards; ++i) out.push_back(torch::randn({512, 128}));
  return out;
}

std::vector<torch::Tensor> pinned_gallery(int64_t shards) {
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < shards; ++i) out.push_back(torch::randn({512, 128}).pin_memory());
  return out;
}

// Counts parameters for the run log; keeps nothing of the model.
class ParameterReport {
 public:
  explicit ParameterReport(const Embedder &model) {
    for (const auto &p : model->parameters()) count_ += p.numel();
  }
  int64_t count() const { return count_; }

 private:
  int64_t count_ = 0;
};

// The gallery holds one item per class, in class order.
int64_t recall_at_1(Embedder &model, const Query &q, const torch::Tensor &gallery_emb,
                    torch::Device device) {
  torch::NoGradGuard no_grad;
  auto emb = model->forward(q.features.to(device));
  auto nearest = emb.matmul(gallery_emb.t()).argmax(1);
  // BUG(torch-device-mismatch): the queries were moved to 'device', their
  // labels were not; the comparison needs both on one device.
  return (nearest == q.label).sum().item<int64_t>();
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Embedder model;
  model->to(device);
  model->eval();
  ParameterReport report(model);
  std::cout << "parameters: " << report.count() << "\n";

  // The report only read the model: it is still on 'device'.
  // BUG(torch-device-mismatch): a host probe into a model on 'device'.
  auto probe = model->forward(torch::randn({1, 128}));

  torch::NoGradGuard no_grad;
  auto shards = host_gallery(16);
  std::vector<torch::Tensor> gallery;
  for (auto it = shards.cbegin(); it != shards.cend(); it += 4) {
    std::vector<torch::Tensor> group;
    for (auto j = it; j != it + 4; ++j) {
      // BUG(torch-non-blocking-pageable): the shards are ordinary host
      // tensors; the copy runs synchronously.
      group.push_back(j->to(device, /*non_blocking=*/true));
    }
    gallery.push_back(model->forward(torch::cat(group)));
  }
  auto pinned = pinned_gallery(16);
  for (auto it = pinned.cbegin(); it != pinned.cend(); it += 4) {
    auto last = std::next(it, 3);
    // OK(torch-non-blocking-pageable): the pinned gallery is page-locked.
    auto x = last->to(device, /*non_blocking=*/true);
    gallery.push_back(model->forward(x));
  }
  auto gallery_emb = torch::cat(gallery);

  int64_t hits = 0;
  for (int i = 0; i < 10; ++i) {
    Query q{torch::randn({32, 128}), torch::randint(0, 100, {32})};
    hits += recall_at_1(model, q, gallery_emb, device);
  }
  std::cout << "recall@1 " << static_cast<double>(hits) / 320.0 << " " << probe.sum().item<float>() << "\n";
  return 0;
}
