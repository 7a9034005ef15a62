// The training loop over the shard iterator, a pinned fine-tuning pass, and
// main().
#include "shards.h"

#include <iostream>

namespace {

torch::Device choose_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

void train_epoch(TabularNet &net, torch::optim::Optimizer &opt, const ShardLoader &loader, torch::Device device,
                 int epoch) {
  net->train();
  auto epoch_loss = torch::zeros({}, device);
  double acc_sum = 0.0;
  int64_t steps = 0;
  auto it = loader.begin();
  while (it != loader.end()) {
    Batch b = *it;
    // BUG(torch-non-blocking-pageable): the shard iterator (loader.cpp)
    // builds the batch in pageable memory; this copy runs synchronously.
    auto x = b.features.to(device, /*non_blocking=*/true);
    auto y = b.labels.to(device);
    auto logits = net->forward(x);
    // BUG(torch-device-mismatch): class_weights() (loader.cpp) returns a host
    // tensor; weighted_loss() (metrics.cpp) multiplies it with the per-row
    // loss on 'device'.
    auto loss = weighted_loss(logits, y, class_weights());
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): 'epoch_loss' outlives the step and
    // keeps every step's graph.
    epoch_loss = epoch_loss + loss;
    acc_sum += batch_accuracy(logits, y);
    ++steps;
    if (it.index() % 100 == 0) {
      // OK(torch-host-sync-in-loop): read every 100 batches.
      std::cout << "epoch " << epoch << " batch " << it.index() << " loss " << loss.item<double>() << '\n';
    }
    ++it;
  }
  std::cout << "epoch " << epoch << " mean loss " << (epoch_loss / static_cast<double>(steps)).item<double>()
            << " train acc " << acc_sum / static_cast<double>(steps) << '\n';
}

// A last pass at a lower learning rate over a small pinned subset.
void fine_tune(TabularNet &net, const ShardLoader &loader, torch::Device device) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3));
  net->train();
  const auto weights = class_weights().to(device);
  for (auto it = loader.begin(); it != loader.end(); ++it) {
    Batch b = *it;
    // OK(torch-non-blocking-pageable): pinned first.
    auto x = b.features.pin_memory().to(device, /*non_blocking=*/true);
    auto y = b.labels.to(device);
    // OK(torch-device-mismatch): the weights were moved to 'device'.
    auto loss = weighted_loss(net->forward(x), y, weights);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

}  // namespace

int main() {
  const torch::Device device = choose_device();
  TabularNet net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  ShardLoader train_shards(400, 256, 1);
  ShardLoader val_shards(20, 1024, 2);
  for (int epoch = 0; epoch < 3; ++epoch) {
    train_epoch(net, opt, train_shards, device, epoch);
    torch::NoGradGuard no_grad;
    std::cout << "val acc " << evaluate(net, val_shards, device) << '\n';
  }
  fine_tune(net, ShardLoader(20, 256, 3), device);
  const auto preds = predict_all(net, val_shards, device);
  std::cout << preds.size() << " predictions, first " << preds.front() << '\n';
  return 0;
}
