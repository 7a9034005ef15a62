// Pool-based active learning for an image classifier: each round trains a
// fresh model on the labelled set, scores the unlabelled pool with an
// acquisition function (predictive entropy or margin, chosen per run), asks
// the "oracle" for the labels of the top-k most uncertain examples and moves
// them into the labelled set. The acquisition is a template parameter so the
// selection code is shared.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(32 * 7 * 7, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(c2->forward(x)), 2);
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d c1, c2;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

struct Pool {
  torch::Tensor images;  // [N, 1, 28, 28], host
  torch::Tensor labels;  // [N], host; only the oracle may read the unlabelled ones
  std::vector<int64_t> labelled;
  std::vector<int64_t> unlabelled;
};

Pool make_pool(int64_t n, int64_t seed_size) {
  Pool p{torch::rand({n, 1, 28, 28}), torch::randint(10, {n}, torch::kLong), {}, {}};
  for (int64_t i = 0; i < n; ++i)
    (i < seed_size ? p.labelled : p.unlabelled).push_back(i);
  return p;
}

torch::Tensor index_of(const std::vector<int64_t> &ids) { return torch::tensor(ids, torch::kLong); }

struct Entropy {
  torch::Tensor operator()(const torch::Tensor &logits) const {
    auto p = torch::softmax(logits, -1);
    return -(p * torch::log(p + 1e-12)).sum(-1);
  }
};

struct Margin {
  torch::Tensor operator()(const torch::Tensor &logits) const {
    auto top2 = std::get<0>(torch::softmax(logits, -1).topk(2, -1));
    return -(top2.select(1, 0) - top2.select(1, 1));
  }
};

// Scores every unlabelled example; higher means more informative.
template <typename Acquisition>
torch::Tensor score_pool(ConvNet &model, const Pool &pool, torch::Device device, Acquisition acquire) {
  model->eval();
  std::vector<torch::Tensor> scores;
  const auto ids = index_of(pool.unlabelled);
  for (int64_t i = 0; i < ids.size(0); i += 1024) {
    auto x = pool.images.index_select(0, ids.slice(0, i, i + 1024)).to(device);
    // BUG(torch-inference-without-no-grad): scoring the pool only reads the
    // logits; autograd records every chunk.
    auto logits = model->forward(x);
    scores.push_back(acquire(logits));
  }
  return torch::cat(scores);
}

std::vector<int64_t> top_k(const torch::Tensor &scores, int64_t k) {
  auto order = std::get<1>(scores.topk(k));
  auto host = order.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the chosen positions are read before
  // the asynchronous copy has landed.
  const int64_t *p = host.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + k);
}

double train_round(ConvNet &model, const Pool &pool, torch::Device device, int64_t epochs) {
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  const auto ids = index_of(pool.labelled);
  int64_t correct = 0, seen = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    auto perm = ids.index_select(0, torch::randperm(ids.size(0)));
    for (int64_t i = 0; i < perm.size(0); i += 64) {
      auto batch = perm.slice(0, i, i + 64);
      auto x = pool.images.index_select(0, batch).to(device);
      auto y = pool.labels.index_select(0, batch).to(device);
      opt.zero_grad();
      auto logits = model->forward(x);
      auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      opt.step();
      // BUG(torch-host-sync-in-loop): the training accuracy is pulled to the
      // host after every step.
      correct += (logits.argmax(1) == y).sum().item<int64_t>();
      seen += y.size(0);
    }
  }
  return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(1, seen));
}

double test_accuracy(ConvNet &model, const torch::Tensor &x, const torch::Tensor &y, torch::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < x.size(0); i += 1024) {
    // OK(torch-inference-without-no-grad): under the guard above.
    auto pred = model->forward(x.slice(0, i, i + 1024).to(device)).argmax(1);
    // OK(torch-device-mismatch): the labels are moved with the inputs.
    correct += (pred == y.slice(0, i, i + 1024).to(device)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(x.size(0));
}

template <typename Acquisition>
void run(Pool pool, const torch::Tensor &test_x, const torch::Tensor &test_y, torch::Device device,
         Acquisition acquire, int64_t rounds, int64_t k) {
  for (int64_t r = 0; r < rounds; ++r) {
    ConvNet model;
    model->to(device);
    const double train_acc = train_round(model, pool, device, 5);
    const double test_acc = test_accuracy(model, test_x, test_y, device);
    auto picked = top_k(score_pool(model, pool, device, acquire), k);
    std::sort(picked.begin(), picked.end(), std::greater<int64_t>());
    for (auto pos : picked) {
      pool.labelled.push_back(pool.unlabelled[pos]);
      pool.unlabelled.erase(pool.unlabelled.begin() + pos);
    }
    std::cout << "round " << r << " labelled " << pool.labelled.size() << " train_acc " << train_acc
              << " test_acc " << test_acc << "\n";
  }
}

int main(int argc, char **argv) {
  torch::manual_seed(5);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto pool = make_pool(20000, 500);
  auto test_x = torch::rand({2000, 1, 28, 28});
  auto test_y = torch::randint(10, {2000}, torch::kLong);
  const bool use_margin = argc > 1 && std::string(argv[1]) == "margin";
  if (use_margin)
    run(pool, test_x, test_y, device, Margin{}, 10, 250);
  else
    run(pool, test_x, test_y, device, Entropy{}, 10, 250);
  return 0;
}
