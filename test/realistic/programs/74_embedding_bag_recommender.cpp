// A click-through-rate model in the DLRM style: every request has a few dense
// numeric features and several multi-hot categorical features (the ids of
// recently viewed items, the user's tags). Categorical features are pooled
// with EmbeddingBag from flat id lists plus offsets; a feature is either
// dense or a bag, held in a std::variant and converted with std::visit. The
// model is put together by a small builder; a second GPU, when present,
// hosts a frozen popularity table used to re-rank the candidates.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <variant>
#include <vector>

constexpr int64_t kDense = 13;
constexpr int64_t kItems = 50000;
constexpr int64_t kDim = 32;

struct DenseFeature {
  std::vector<float> values;  // [B * kDense]
};
struct BagFeature {
  std::vector<int64_t> ids;      // flat ids of the whole batch
  std::vector<int64_t> offsets;  // start of each request's bag
};
using Feature = std::variant<DenseFeature, BagFeature>;

struct CtrNetImpl : torch::nn::Module {
  CtrNetImpl(int64_t bags, int64_t hidden)
      : dense_mlp(register_module("dense_mlp", torch::nn::Linear(kDense, kDim))),
        top(register_module("top", torch::nn::Sequential(torch::nn::Linear(kDim * (bags + 1), hidden),
                                                         torch::nn::ReLU(), torch::nn::Linear(hidden, 1)))) {
    for (int64_t b = 0; b < bags; ++b)
      tables.push_back(register_module(
          "bag" + std::to_string(b),
          torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(kItems, kDim).mode(torch::kMean))));
  }
  torch::Tensor forward(const torch::Tensor &dense, const std::vector<std::pair<torch::Tensor, torch::Tensor>> &bags) {
    std::vector<torch::Tensor> pooled{torch::relu(dense_mlp->forward(dense))};
    std::transform(bags.begin(), bags.end(), tables.begin(), std::back_inserter(pooled),
                   [](const auto &bag, torch::nn::EmbeddingBag &table) { return table->forward(bag.first, bag.second); });
    return top->forward(torch::cat(pooled, 1)).squeeze(1);
  }
  torch::nn::Linear dense_mlp;
  torch::nn::Sequential top;
  std::vector<torch::nn::EmbeddingBag> tables;
};
TORCH_MODULE(CtrNet);

class CtrNetBuilder {
 public:
  CtrNetBuilder &bags(int64_t n) {
    bags_ = n;
    return *this;
  }
  CtrNetBuilder &hidden(int64_t h) {
    hidden_ = h;
    return *this;
  }
  CtrNet build(const torch::Device &device) const {
    CtrNet net(bags_, hidden_);
    net->to(device);
    return net;
  }

 private:
  int64_t bags_ = 2;
  int64_t hidden_ = 128;
};

std::vector<Feature> fake_request_batch(int64_t batch) {
  std::vector<Feature> features;
  features.push_back(DenseFeature{std::vector<float>(batch * kDense, 0.5f)});
  for (int b = 0; b < 2; ++b) {
    BagFeature bag;
    for (int64_t r = 0; r < batch; ++r) {
      bag.offsets.push_back(static_cast<int64_t>(bag.ids.size()));
      for (int64_t k = 0; k < 1 + (r + b) % 5; ++k)
        bag.ids.push_back((r * 131 + k * 17 + b) % kItems);
    }
    features.push_back(std::move(bag));
  }
  return features;
}

int main() {
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto model = CtrNetBuilder().bags(2).hidden(256).build(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));

  auto running = std::make_shared<torch::Tensor>(torch::zeros({}, device));
  std::vector<double> step_times;
  const int64_t batch = 512;
  for (int64_t step = 0; step < 2000; ++step) {
    auto features = fake_request_batch(batch);
    torch::Tensor dense;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> bags;
    for (auto &&f : features) {
      std::visit(
          [&](auto &&feat) {
            using T = std::decay_t<decltype(feat)>;
            if constexpr (std::is_same_v<T, DenseFeature>) {
              auto host = torch::tensor(feat.values).view({batch, kDense});
              // BUG(torch-non-blocking-pageable): 'host' is a fresh pageable
              // tensor built from the vector; the flag does nothing.
              dense = host.to(device, /*non_blocking=*/true);
            } else {
              // OK(torch-non-blocking-pageable): the ids are pinned first; the
              // offsets are copied without the flag.
              bags.emplace_back(torch::tensor(feat.ids).pin_memory().to(device, /*non_blocking=*/true),
                                torch::tensor(feat.offsets).to(device));
            }
          },
          f);
    }
    auto clicks = (torch::rand({batch}, device) < 0.03).to(torch::kFloat);
    opt.zero_grad();
    auto loss = torch::binary_cross_entropy_with_logits(model->forward(dense, bags), clicks);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the running total behind the
    // shared_ptr outlives the loop and chains every step's graph.
    *running += loss;
    if (step % 200 == 0) {
      // OK(torch-host-sync-in-loop): every 200 steps.
      std::cout << "step " << step << " mean loss " << (*running / (step + 1)).item<double>() << "\n";
      step_times.push_back(static_cast<double>(step));
    }
  }
  const double span = std::accumulate(step_times.begin(), step_times.end(), 0.0);
  std::cout << "logged " << step_times.size() << " points (" << span << ")\n";

  // Popularity re-ranking table, on a second GPU when there is one.
  if (torch::cuda::is_available()) {
    // BUG(torch-device-index-unchecked): ordinal 1 is hard-coded and the
    // device count is never checked.
    torch::Device side("cuda:1");
    auto popularity = torch::rand({kItems}, torch::TensorOptions().device(side));
    std::vector<torch::Tensor> tables{model->tables[0]->weight, model->tables[1]->weight};
    std::for_each(tables.begin(), tables.end(), [&](torch::Tensor &t) {
      // BUG(torch-tensor-to-discarded): the copy onto the side GPU is thrown
      // away; 't' stays where it was.
      t.to(side);
    });
    std::vector<torch::Tensor> on_side;
    // OK(torch-tensor-to-discarded): std::transform keeps every converted table.
    std::transform(tables.begin(), tables.end(), std::back_inserter(on_side),
                   [&](const torch::Tensor &t) { return t.to(side); });
    // OK(torch-device-mismatch): both tables and the popularity are on 'side'.
    auto boosted = on_side[0].sum(1) + popularity;
    auto top = boosted.topk(10);
    std::cout << "top item " << std::get<1>(top)[0] << "\n";
  }
  return 0;
}
