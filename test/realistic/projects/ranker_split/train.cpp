#include "ranker.h"

#include <iostream>

void fit(Scorer &model, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  RunStats stats;
  stats.loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  model->train();
  for (int64_t step = 0; step < steps; ++step) {
    // OK(torch-non-blocking-pageable): pinned_features() pins its output.
    auto x = upload(pinned_features(64), device);
    // OK(torch-device-mismatch): the labels are moved next to the scores.
    auto y = relevance_labels(64).to(device);
    opt.zero_grad();
    auto loss = pairwise_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    accumulate(stats, loss);
    log_every(step, 100, loss);
  }
  std::cout << "mean train loss " << (stats.loss_sum / static_cast<double>(stats.steps)).item<double>() << '\n';

  // One extra fine-tuning pass on a hard list, kept apart from the loop.
  // BUG(torch-non-blocking-pageable): host_features() returns pageable
  // memory, and upload() copies it with non_blocking.
  auto hard = upload(host_features(256), device);
  auto hard_labels = relevance_labels(256);
  opt.zero_grad();
  // BUG(torch-device-mismatch): the scores are on 'device', the labels that
  // pairwise_loss() compares them with are still on the host.
  auto hard_loss = pairwise_loss(model->forward(hard), hard_labels);
  hard_loss.backward();
  opt.step();
}

// main() calls this under a NoGradGuard.
double evaluate(Scorer &model, torch::Device device, int64_t batches) {
  model->eval();
  double total = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    auto x = host_features(128).to(device);
    // OK(torch-inference-without-no-grad): the caller holds a NoGradGuard.
    auto scores = model->forward(x);
    total += pairwise_loss(scores, relevance_labels(128).to(device)).item<double>();
  }
  return total / static_cast<double>(batches);
}

// Scores result pages for the offline report.
void score_candidates(Scorer &model, torch::Device device, int64_t pages) {
  model->eval();
  for (int64_t p = 0; p < pages; ++p) {
    auto x = host_features(1000).to(device);
    // BUG(torch-inference-without-no-grad): a pure scoring loop with autograd
    // on; main() holds no guard around this call.
    auto scores = model->forward(x);
    auto top = std::get<1>(scores.topk(10));
    auto host = to_host_async(top);
    // BUG(torch-non-blocking-d2h-race): to_host_async() only queues the
    // copy; the ids are printed before the GPU has written them.
    std::cout << "page " << p << " top ids " << host << '\n';
  }
}
