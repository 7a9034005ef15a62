// A sequence classifier over token ids with a fixed sinusoidal position
// table and a padding mask template, neither of which is a parameter or a
// buffer: the module overrides to() to carry what it needs along. Helpers
// live in a nested-namespace utility library (lab::util::dev, lab::util::io,
// lab::train).
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>

namespace lab {
namespace util {
namespace dev {

torch::Device pick(bool allow_gpu) {
  if (allow_gpu && torch::cuda::is_available()) return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}

namespace alloc = c10::cuda::CUDACachingAllocator;

// Gives the allocator's cached blocks back to the driver.
void release_cached() {
  // BUG(torch-empty-cache-in-loop): lab::train::fit() calls this after every
  // step; the next step has to cudaMalloc the same blocks again.
  alloc::emptyCache();
}

}  // namespace dev

namespace io {

void scalar(const std::string &tag, int64_t step, double value) { std::cout << tag << '@' << step << ' ' << value << '\n'; }

}  // namespace io
}  // namespace util

namespace model {

constexpr int64_t kVocab = 500;
constexpr int64_t kDim = 64;
constexpr int64_t kMaxLen = 48;

torch::Tensor sinusoid_table(int64_t len, int64_t dim) {
  auto pos = torch::arange(len, torch::kFloat).unsqueeze(1);
  auto freq = torch::exp(torch::arange(0, dim, 2, torch::kFloat) * (-std::log(10000.0) / static_cast<double>(dim)));
  auto table = torch::zeros({len, dim});
  table.slice(1, 0, dim, 2) = torch::sin(pos * freq);
  table.slice(1, 1, dim, 2) = torch::cos(pos * freq);
  return table;
}

struct SeqClassifierImpl : torch::nn::Module {
  SeqClassifierImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, kDim))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        head(register_module("head", torch::nn::Linear(kDim, 2))),
        positions_(sinusoid_table(kMaxLen, kDim)),
        causal_(torch::ones({kMaxLen, kMaxLen}).tril()) {}

  using torch::nn::Module::to;
  void to(torch::Device device, bool non_blocking = false) override {
    torch::nn::Module::to(device, non_blocking);
    device_ = device;
    positions_ = positions_.to(device);
  }

  torch::Tensor forward(torch::Tensor tokens) {
    const int64_t len = tokens.size(1);
    auto h = emb(tokens) + positions_.narrow(0, 0, len);  // [B, T, D]
    auto pad = tokens.ne(0).to(torch::kFloat).unsqueeze(2);
    // OK(torch-device-mismatch): positions_ follows the module in to().
    return head(drop((h * pad).sum(1) / pad.sum(1).clamp_min(1.0)));
  }

  // Attention-style smoothing of the embeddings of a single sequence, used
  // by the inspector.
  torch::Tensor smoothed(int64_t len) {
    auto ids = torch::randint(1, kVocab, {1, len}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    auto h = emb(ids).squeeze(0);  // [T, D]
    auto weights = causal_.narrow(0, 0, len).narrow(1, 0, len);
    // BUG(torch-device-mismatch): to() moved positions_ but forgot causal_;
    // after model->to(device) the mask is still on the host.
    auto mixed = torch::matmul(weights, h);
    return mixed / weights.sum(1, true);
  }

  torch::nn::Embedding emb;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
  torch::Tensor positions_;
  torch::Tensor causal_;
  torch::Device device_ = torch::kCPU;
};
TORCH_MODULE(SeqClassifier);

}  // namespace model

namespace train {

struct Batch {
  torch::Tensor tokens, labels;
};

// Label 1 when token 7 appears in the sequence.
Batch synth(int64_t n, torch::Device device) {
  auto tokens = torch::randint(1, model::kVocab, {n, model::kMaxLen}, torch::TensorOptions().dtype(torch::kLong));
  auto labels = tokens.eq(7).any(1).to(torch::kLong);
  return {tokens.to(device), labels.to(device)};
}

void fit(model::SeqClassifier &net, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-3));
  net->train();
  auto running = torch::zeros({}, device);
  for (int64_t step = 0; step < steps; ++step) {
    auto batch = synth(64, device);
    // OK(torch-device-mismatch): synth() returns both tensors on 'device'.
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch.tokens), batch.labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph): detached.
    running += loss.detach();
    // BUG(torch-host-sync-in-loop): reads the loss every step for a log line
    // that lab::util::io only prints.
    util::io::scalar("train/loss", step, loss.item<double>());
    util::dev::release_cached();
  }
  util::io::scalar("train/mean_loss", steps, (running / static_cast<double>(steps)).item<double>());
}

double accuracy(model::SeqClassifier &net, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0;
  for (int i = 0; i < 10; ++i) {
    auto batch = synth(256, device);
    auto tokens = batch.tokens.cpu();
    // BUG(torch-tensor-to-discarded): the copy back to the device is dropped.
    tokens.to(device);
    auto logits = net->forward(tokens);
    correct += logits.argmax(1).eq(batch.labels).sum().item<int64_t>();
  }
  net->train();
  return static_cast<double>(correct) / 2560.0;
}

}  // namespace train
}  // namespace lab

int main(int argc, char **argv) {
  const bool allow_gpu = !(argc > 1 && std::string(argv[1]) == "--cpu");
  const torch::Device device = lab::util::dev::pick(allow_gpu);
  lab::model::SeqClassifier net;
  net->to(device);
  lab::train::fit(net, device, 1500);
  // BUG(torch-device-mismatch): accuracy() calls 'net', moved to 'device'
  // above, with the host copy of the tokens.
  std::cout << "accuracy " << lab::train::accuracy(net, device) << '\n';
  std::cout << "smoothed norm " << net->smoothed(16).norm().item<double>() << '\n';
  return 0;
}
