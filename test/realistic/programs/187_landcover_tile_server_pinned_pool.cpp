// Land-cover classification service for Sentinel-2 tiles (13 bands, 32x32
// patches, 10 classes). A PinnedPool owns a few page-locked staging slots and
// hands them out by reference; the TileServer stages each request in a slot,
// uploads it, runs the classifier, and starts the copy of the class
// probabilities back to the host in submit() so that the host can decode the
// next request while the DMA runs. labels() and confidences() turn the last
// request's probabilities into answers. A nightly job scores the labelled
// hold-out shards, and a de-duplication job embeds incoming shards and
// compares them with the reference bank of already-ingested tiles.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kBands = 13, kPatch = 32, kClasses = 10, kEmbed = 64, kMaxBatch = 64;

struct LandCoverNetImpl : torch::nn::Module {
  LandCoverNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(kBands, 32, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)))),
        head(register_module("head", torch::nn::Linear(64, kClasses))) {}

  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::relu(conv2(torch::relu(conv1(x))));
    return head(h.mean({2, 3}));
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear head;
};
TORCH_MODULE(LandCoverNet);

torch::Tensor synthetic_tiles(int64_t n) { return torch::rand({n, kBands, kPatch, kPatch}); }

// Page-locked staging slots, reused round-robin by the server.
class PinnedPool {
 public:
  PinnedPool(size_t slots, int64_t rows) {
    for (size_t i = 0; i < slots; ++i)
      slots_.push_back(
          torch::empty({rows, kBands, kPatch, kPatch}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true)));
  }
  torch::Tensor &acquire(size_t ticket) { return slots_[ticket % slots_.size()]; }

 private:
  std::vector<torch::Tensor> slots_;
};

class TileServer {
 public:
  TileServer(LandCoverNet net, torch::Device device) : net_(std::move(net)), device_(device), pool_(2, kMaxBatch) {
    net_->to(device_);
    net_->eval();
  }

  // Stages a request of decoded tiles and starts the readback of its scores.
  void submit(const torch::Tensor &tiles) {
    torch::Tensor &slot = pool_.acquire(ticket_++);
    auto staged = slot.narrow(0, 0, tiles.size(0));
    staged.copy_(tiles);
    // OK(torch-non-blocking-pageable): the slot comes from the pinned pool.
    auto on_device = staged.to(device_, /*non_blocking=*/true);
    start_readback(on_device);
  }

  // The legacy endpoint ships raw float32 tiles in the request body.
  void submit_payload(std::vector<float> payload) {
    const int64_t n = static_cast<int64_t>(payload.size()) / (kBands * kPatch * kPatch);
    auto host = torch::from_blob(payload.data(), {n, kBands, kPatch, kPatch}, torch::kFloat);
    // BUG(torch-non-blocking-pageable): 'host' wraps the std::vector's heap
    // memory, which is pageable, so this copy is synchronous anyway.
    auto on_device = host.to(device_, /*non_blocking=*/true);
    start_readback(on_device);
  }

  std::vector<int64_t> labels() const {
    std::vector<int64_t> out;
    // BUG(torch-non-blocking-d2h-race): submit() only queued the copy of the
    // probabilities; nothing waits for it before the host walks the buffer.
    auto probs = scores_host_.accessor<float, 2>();
    for (int64_t i = 0; i < probs.size(0); ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < kClasses; ++c)
        if (probs[i][c] > probs[i][best])
          best = c;
      out.push_back(best);
    }
    return out;
  }

  double mean_confidence() const {
    wait_for_readback();
    // OK(torch-non-blocking-d2h-race): wait_for_readback() synchronised.
    return std::get<0>(scores_host_.max(1)).mean().item<double>();
  }

 private:
  void start_readback(const torch::Tensor &tiles) {
    auto probs = torch::softmax(net_->forward(tiles), 1);
    scores_host_ = probs.to(torch::kCPU, /*non_blocking=*/true);
  }

  void wait_for_readback() const {
    if (torch::cuda::is_available())
      torch::cuda::synchronize();
  }

  LandCoverNet net_;
  torch::Device device_;
  PinnedPool pool_;
  torch::Tensor scores_host_;
  size_t ticket_ = 0;
};

torch::Tensor classify(LandCoverNet &net, const torch::Tensor &tiles) {
  // OK(torch-inference-without-no-grad): its only caller holds an
  // InferenceMode guard around the shard loop.
  return net->forward(tiles).argmax(1);
}

double shard_accuracy(LandCoverNet &net, const torch::Tensor &tiles, const torch::Tensor &truth, torch::Device device) {
  auto pred = classify(net, tiles.to(device));
  return pred.eq(truth.to(device)).to(torch::kFloat).mean().item<double>();
}

torch::Tensor embed(torch::nn::Sequential &embedder, const torch::Tensor &tiles, torch::Device device) {
  // BUG(torch-inference-without-no-grad): count_near_duplicates() calls this
  // once per incoming shard with autograd recording every activation.
  auto e = embedder->forward(tiles.to(device));
  return F::normalize(e, F::NormalizeFuncOptions().dim(1));
}

int64_t count_near_duplicates(torch::nn::Sequential &embedder, const std::vector<torch::Tensor> &shards,
                              const torch::Tensor &bank, torch::Device device) {
  int64_t dups = 0;
  for (const auto &shard : shards) {
    auto sims = torch::mm(embed(embedder, shard, device), bank.t());
    dups += std::get<0>(sims.max(1)).gt(0.97).sum().item<int64_t>();
  }
  return dups;
}

int main() {
  torch::manual_seed(11);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;

  LandCoverNet net;
  TileServer server(net, device);
  {
    c10::InferenceMode guard;
    for (int req = 0; req < 500; ++req) {
      server.submit(synthetic_tiles(8 + req % 56));
      auto labels = server.labels();
      if (req % 100 == 0)
        std::cout << "request " << req << ": " << labels.size() << " tiles, first label " << labels.front()
                  << ", mean confidence " << server.mean_confidence() << "\n";
    }
    std::vector<float> payload(4 * kBands * kPatch * kPatch, 0.25f);
    server.submit_payload(std::move(payload));
    std::cout << "legacy request confidence " << server.mean_confidence() << "\n";

    double acc = 0.0;
    const int shards = 12;
    for (int s = 0; s < shards; ++s) {
      auto tiles = synthetic_tiles(kMaxBatch);
      auto truth = torch::randint(0, kClasses, {kMaxBatch}, torch::kLong);
      acc += shard_accuracy(net, tiles, truth, device);
    }
    std::cout << "hold-out accuracy " << acc / shards << "\n";
  }

  torch::nn::Sequential embedder(torch::nn::Conv2d(torch::nn::Conv2dOptions(kBands, 32, 3).stride(2)),
                                 torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(),
                                 torch::nn::Linear(32, kEmbed));
  embedder->to(device);
  auto bank = F::normalize(torch::randn({1024, kEmbed}), F::NormalizeFuncOptions().dim(1)).to(device);
  std::vector<torch::Tensor> incoming;
  for (int i = 0; i < 20; ++i)
    incoming.push_back(synthetic_tiles(kMaxBatch));
  std::cout << "near duplicates: " << count_near_duplicates(embedder, incoming, bank, device) << "\n";
  return 0;
}
