// Validation, the logit dump for the review tool, and the labelling of a
// long camera stream with overlapping windows.
#include "action.h"

#include <iostream>

double evaluate(R2Plus1D &net, torch::Device device, int64_t batches, uint64_t seed) {
  torch::NoGradGuard no_grad;
  ClipSource source(16, seed);
  ConfusionMatrix confusion;
  for (int64_t b = 0; b < batches; ++b) {
    ClipBatch batch = source.next();
    // BUG(torch-non-blocking-pageable): next() (clips.cpp) builds the clips
    // in pageable memory; the copy runs synchronously.
    auto x = batch.frames.to(device, /*non_blocking=*/true);
    // BUG(torch-eval-mode-missing): main.cpp calls evaluate() right after
    // train_epoch() (train.cpp) left the network in training mode; dropout
    // and batch norm run as in training.
    auto logits = net->forward(x);
    auto preds = logits.argmax(1).to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): add() reads the predictions before
    // the copy from the device has finished.
    confusion.add(preds, batch.labels);
  }
  return confusion.accuracy();
}

void dump_val_logits(R2Plus1D &net, torch::Device device, int64_t batches, const std::string &path) {
  net->eval();
  ClipSource source(16, /*seed=*/777000);
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < batches; ++b) {
    ClipBatch batch = source.next();
    // BUG(torch-inference-without-no-grad): main.cpp holds no guard either;
    // each forward records its activations for nothing.
    auto logits = net->forward(batch.frames.to(device));
    rows.push_back(logits.detach().cpu());
  }
  torch::save(torch::cat(rows), path);
}

std::vector<int64_t> label_stream(R2Plus1D &net, const torch::Tensor &stream, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  const int64_t window = 2 * kFrames, hop = kFrames;
  std::vector<torch::Tensor> pending;
  for (int64_t t = 0; t + window <= stream.size(1); t += hop) {
    auto clip = resample_clip(stream.narrow(1, t, window));
    // The window stays where resample_clip() (clips.cpp) left it, on the
    // host: see the call in main.cpp.
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and the guard above.
    auto logits = net->forward(clip.unsqueeze(0));
    pending.push_back(logits.argmax(1).to(torch::kCPU, /*non_blocking=*/true));
  }
  if (device.is_cuda())
    torch::cuda::synchronize();
  std::vector<int64_t> labels;
  for (const auto &p : pending) {
    // OK(torch-non-blocking-d2h-race): the device was synchronised above.
    labels.push_back(p.item<int64_t>());
  }
  return labels;
}
