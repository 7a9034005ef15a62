// A throughput benchmark for a transformer encoder block over several batch
// and sequence sizes. A GPU-only tool: it is meant to run on the GPU nodes.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <vector>

struct BenchConfig {
  int64_t batch;
  int64_t seq;
};

struct TokenBatch {
  torch::Tensor input;  // [B, S, D]
};

struct EncoderBlockImpl : torch::nn::Module {
  explicit EncoderBlockImpl(int64_t d)
      : attn(register_module("attn", torch::nn::MultiheadAttention(torch::nn::MultiheadAttentionOptions(d, 8)))),
        ff1(register_module("ff1", torch::nn::Linear(d, 4 * d))),
        ff2(register_module("ff2", torch::nn::Linear(4 * d, d))),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))) {}
  torch::Tensor forward(torch::Tensor x) {  // x: [S, B, D]
    auto a = std::get<0>(attn->forward(x, x, x));
    x = ln1(x + a);
    return ln2(x + ff2(torch::gelu(ff1(x))));
  }
  torch::nn::MultiheadAttention attn;
  torch::nn::Linear ff1, ff2;
  torch::nn::LayerNorm ln1, ln2;
};
TORCH_MODULE(EncoderBlock);

template <typename Module>
void to_gpu(Module &module) {
  // BUG(torch-cuda-unguarded): main() calls this with no is_available()
  // check anywhere and no CPU path.
  module->to(torch::kCUDA);
}

template <typename Batch>
void prepare(Batch &batch) {
  batch.input = batch.input.transpose(0, 1);
  // BUG(torch-tensor-to-discarded): contiguous() returns the copy; the batch
  // keeps the transposed view.
  batch.input.contiguous();
}

template <typename Fn>
void for_each_config(const std::vector<BenchConfig> &configs, Fn &&fn) {
  for (const auto &c : configs)
    fn(c);
}

int main() {
  const int64_t d = 512;
  EncoderBlock block(d);
  to_gpu(block);
  block->eval();
  const auto device = block->ff1->weight.device();

  std::vector<BenchConfig> configs{{8, 128}, {16, 256}, {32, 512}, {64, 512}};
  for_each_config(configs, [&](const BenchConfig &c) {
    c10::InferenceMode guard;
    TokenBatch batch{torch::randn({c.batch, c.seq, d})};
    prepare(batch);
    auto x = batch.input.to(device);
    auto start = std::chrono::steady_clock::now();
    // OK(torch-inference-without-no-grad): InferenceMode is held.
    auto out = block->forward(x);
    for (int rep = 1; rep < 20; ++rep)
      out = block->forward(x);
    auto checksum = out.sum().to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): printing reads the checksum before
    // the copy (and the 20 forwards queued before it) finished.
    std::cout << "batch " << c.batch << " seq " << c.seq << " checksum " << checksum << '\n';
    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "  " << 20.0 * c.batch * c.seq / seconds << " tokens/s\n";
    // BUG(torch-empty-cache-in-loop): for_each_config() calls this lambda for
    // every configuration; each call drains the device and frees the cache.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });
  return 0;
}
