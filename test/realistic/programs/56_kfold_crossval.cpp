// K-fold cross-validation of a small tabular regressor. Each fold builds a
// fresh model and optimizer (nothing leaks between folds), trains it on the
// other folds' rows and scores it on the held-out fold. The whole data set is
// kept on the host and sliced per fold with index_select, the way a CSV
// loader would hand it over. The best fold's weights are kept as a clone().
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <limits>
#include <vector>

constexpr int64_t kFeatures = 12;
constexpr int64_t kRows = 4000;
constexpr int64_t kFolds = 5;

struct RegressorImpl : torch::nn::Module {
  RegressorImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeatures, 64))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        fc2(register_module("fc2", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::gelu(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Regressor);

struct Split {
  torch::Tensor train_idx;
  torch::Tensor val_idx;
};

Split make_split(int64_t fold) {
  const int64_t per = kRows / kFolds;
  auto all = torch::arange(kRows, torch::kLong);
  auto val = all.narrow(0, fold * per, per);
  auto mask = torch::ones({kRows}, torch::kBool);
  mask.narrow(0, fold * per, per).fill_(false);
  return {all.masked_select(mask), val};
}

Regressor fresh_model(torch::Device device) {
  Regressor net;
  net->to(device);
  return net;
}

// Trains one fold; returns the last epoch's mean loss.
double train_fold(Regressor &net, const torch::Tensor &X, const torch::Tensor &Y, const Split &split,
                  torch::Device device, int64_t epochs) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  torch::nn::MSELoss mse;
  net->train();
  const int64_t batch = 128;
  const int64_t n = split.train_idx.size(0);
  auto epoch_loss = torch::zeros({}, device);
  int64_t steps = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    auto perm = split.train_idx.index_select(0, torch::randperm(n));
    epoch_loss = torch::zeros({}, device);
    steps = 0;
    for (int64_t s = 0; s + batch <= n; s += batch, ++steps) {
      auto idx = perm.narrow(0, s, batch);
      // OK(torch-non-blocking-pageable, torch-device-mismatch): the feature
      // slice is pinned before its asynchronous upload.
      auto xb = X.index_select(0, idx).pin_memory().to(device, /*non_blocking=*/true);
      // BUG(torch-non-blocking-pageable): index_select of the host targets is
      // fresh pageable memory; the copy runs synchronously anyway.
      auto yb = Y.index_select(0, idx).to(device, /*non_blocking=*/true);
      opt.zero_grad();
      // OK(torch-device-mismatch): a parameterless loss module has no device.
      auto loss = mse(net->forward(xb), yb);
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): epoch_loss lives for the whole
      // epoch; adding the loss itself keeps every step's graph alive.
      epoch_loss = epoch_loss + loss;
      if (steps % 10 == 0) {
        // OK(torch-host-sync-in-loop): read once every ten steps.
        std::cout << "  step " << steps << " loss " << loss.item<double>() << '\n';
      }
    }
  }
  // OK(torch-host-sync-in-loop): read once, after the epochs.
  return epoch_loss.item<double>() / static_cast<double>(steps);
}

// Only called under the NoGradGuard that cross_validate() holds.
double score_fold(Regressor &net, const torch::Tensor &X, const torch::Tensor &Y, const Split &split,
                  torch::Device device) {
  net->eval();
  double sse = 0.0;
  const int64_t n = split.val_idx.size(0);
  for (int64_t s = 0; s < n; s += 256) {
    auto idx = split.val_idx.narrow(0, s, std::min<int64_t>(256, n - s));
    auto xb = X.index_select(0, idx).to(device);
    auto yb = Y.index_select(0, idx);
    // OK(torch-inference-without-no-grad): the caller holds a NoGradGuard.
    auto pred = net->forward(xb);
    // BUG(torch-device-mismatch): the predictions are on 'device' (the
    // inputs were moved there), the targets are slices of Y, which never
    // left the host: this function moves one and forgets the other.
    auto err = torch::mse_loss(pred, yb, torch::Reduction::Sum);
    // OK(torch-loss-accumulation-graph): no graph under the caller's guard,
    // and .item() returns a double anyway.
    sse += err.item<double>();
  }
  return sse / static_cast<double>(n);
}

int main() {
  torch::manual_seed(0);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;

  auto X = torch::randn({kRows, kFeatures});
  auto Y = X.narrow(1, 0, 3).sum(1, true) + 0.1 * torch::randn({kRows, 1});

  std::vector<double> fold_scores;
  double best = std::numeric_limits<double>::infinity();
  Regressor best_model;
  for (int64_t fold = 0; fold < kFolds; ++fold) {
    auto split = make_split(fold);
    auto net = fresh_model(device);
    const double train_loss = train_fold(net, X, Y, split, device, 3);
    double val = 0.0;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-device-mismatch): every call passes the host Y, so the
      // mismatch is reported in score_fold(), where it is made.
      val = score_fold(net, X, Y, split, device);
    }
    fold_scores.push_back(val);
    std::cout << "fold " << fold << " train " << train_loss << " val " << val << '\n';
    if (val < best) {
      best = val;
      best_model = std::dynamic_pointer_cast<RegressorImpl>(net->clone());
    }
  }
  // OK(torch-empty-cache-in-loop): once, after every fold has finished.
  c10::cuda::CUDACachingAllocator::emptyCache();

  double mean = 0.0;
  for (double s : fold_scores)
    mean += s;
  std::cout << "cv mse " << mean / kFolds << " best " << best << '\n';

  torch::NoGradGuard no_grad;
  best_model->eval();
  // OK(torch-device-mismatch): clone() keeps the device of the fold's model,
  // and the probe is made there.
  auto probe = torch::randn({4, kFeatures}, torch::TensorOptions().device(device));
  std::cout << best_model->forward(probe).cpu() << '\n';
  return 0;
}
