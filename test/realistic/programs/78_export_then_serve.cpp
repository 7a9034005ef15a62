// Export-then-serve for a sentence-embedding model. A trained encoder is
// saved, reloaded into a serving backend, checked once against a golden
// batch (the "export validation", which retries once when the GPU is short
// of memory), and then answers similarity queries. Backends share a base
// class that owns the device, the request-to-tensor conversion and the
// post-processing; the concrete backend owns the network.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

constexpr int64_t kVocab = 30000;
constexpr int64_t kDim = 256;
constexpr int64_t kSeq = 32;

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, kDim))),
        proj(register_module("proj", torch::nn::Linear(kDim, kDim))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})))) {}
  torch::Tensor forward(const torch::Tensor &ids) {
    auto h = embed->forward(ids).mean(1);
    return torch::nn::functional::normalize(norm->forward(proj->forward(h)),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Embedding embed;
  torch::nn::Linear proj;
  torch::nn::LayerNorm norm;
};
TORCH_MODULE(Encoder);

struct Request {
  std::string id;
  std::vector<int64_t> tokens;  // padded to kSeq
};

class BackendBase {
 public:
  explicit BackendBase(torch::Device device) : device_(device) {}

 protected:
  // Token ids of a batch of requests, on the serving device.
  torch::Tensor to_input(const std::vector<Request> &batch) const {
    std::vector<int64_t> flat;
    flat.reserve(batch.size() * kSeq);
    for (const auto &r : batch)
      flat.insert(flat.end(), r.tokens.begin(), r.tokens.end());
    auto ids = torch::from_blob(flat.data(), {static_cast<int64_t>(batch.size()), kSeq}, torch::kLong).clone();
    // BUG(torch-non-blocking-pageable): 'ids' was just cloned into pageable
    // memory; the non-blocking upload is synchronous.
    return ids.to(device_, /*non_blocking=*/true);
  }
  std::vector<float> postprocess(const torch::Tensor &scores) const {
    auto host = scores.to(torch::kCPU).contiguous();
    return std::vector<float>(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
  }
  torch::Device device_;
};

class EncoderBackend : public BackendBase {
 public:
  EncoderBackend(const std::string &path, torch::Device device) : BackendBase(device) {
    torch::load(net_, path);
    net_->to(device_);
    net_->eval();
  }

  torch::Tensor embed(const std::vector<Request> &batch) {
    torch::NoGradGuard no_grad;
    // OK(torch-inference-without-no-grad): one forward per call, under a guard.
    return net_->forward(to_input(batch));
  }

  // Cosine similarity of every request with a query, for a stream of batches.
  std::vector<float> score_stream(const std::vector<std::vector<Request>> &stream, const torch::Tensor &query) {
    std::vector<float> out;
    for (const auto &batch : stream) {
      // BUG(torch-inference-without-no-grad): the serving loop has no guard;
      // autograd records every batch.
      auto emb = net_->forward(to_input(batch));
      // OK(torch-host-sync-in-loop): a serving loop, not a training loop.
      auto s = postprocess(torch::matmul(emb, query));
      out.insert(out.end(), s.begin(), s.end());
    }
    return out;
  }

  torch::Tensor embed_query(const Request &q) {
    torch::NoGradGuard no_grad;
    auto ids = to_input({q});
    // BUG(torch-tensor-to-discarded): the dtype conversion of the ids is
    // dropped; they stay int64.
    ids.to(torch::kInt);
    return net_->forward(ids).squeeze(0);
  }

 private:
  Encoder net_;
};

std::vector<Request> golden_batch(int64_t n) {
  std::vector<Request> batch;
  for (int64_t i = 0; i < n; ++i)
    batch.push_back({"golden-" + std::to_string(i), std::vector<int64_t>(kSeq, (i * 37) % kVocab)});
  return batch;
}

// Export validation: the reloaded encoder must reproduce the trained one.
bool validate_export(EncoderBackend &backend, Encoder &reference, const std::vector<Request> &golden,
                     const torch::Tensor &golden_ids) {
  torch::Tensor got;
  try {
    got = backend.embed(golden);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the same golden batch is embedded
    // again at the same size.
    c10::cuda::CUDACachingAllocator::emptyCache();
    got = backend.embed(golden);
  }
  torch::NoGradGuard no_grad;
  auto want = reference->forward(golden_ids);
  // OK(torch-device-mismatch): both sides are brought to the host.
  return torch::allclose(got.cpu(), want.cpu(), 1e-4, 1e-5);
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Encoder trained;
  trained->eval();
  torch::save(trained, "encoder.pt");

  EncoderBackend backend("encoder.pt", device);
  auto golden = golden_batch(8);
  std::vector<int64_t> flat;
  for (const auto &r : golden)
    flat.insert(flat.end(), r.tokens.begin(), r.tokens.end());
  auto golden_ids = torch::tensor(flat).view({8, kSeq});
  if (!validate_export(backend, trained, golden, golden_ids)) {
    std::cerr << "export mismatch\n";
    return 1;
  }

  std::vector<std::vector<Request>> stream(16, golden_batch(32));
  auto query = backend.embed_query(golden.front());
  auto scores = backend.score_stream(stream, query);
  std::cout << "scored " << scores.size() << " requests, first " << scores.front() << "\n";
  return 0;
}
