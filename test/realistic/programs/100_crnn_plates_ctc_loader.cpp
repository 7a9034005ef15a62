// Licence-plate recognition with a CRNN (conv features, a bidirectional GRU
// over columns) trained with CTC. Plates are rendered synthetically by a
// custom torch::data dataset with fixed-length targets, batched by the
// stock Stack transform. Before training, a probe finds the largest batch
// that fits on the GPU.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>

constexpr int64_t kChars = 37;  // blank + 0-9 + A-Z
constexpr int64_t kPlateLen = 8, kH = 32, kW = 128;

class PlateDataset : public torch::data::datasets::Dataset<PlateDataset> {
 public:
  explicit PlateDataset(int64_t n) : n_(n) {}
  torch::data::Example<> get(size_t index) override {
    auto gen = torch::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(index));
    auto label = torch::randint(1, kChars, {kPlateLen}, gen, torch::kLong);
    auto img = torch::rand({1, kH, kW}, gen) * 0.2 + label.to(torch::kFloat).repeat_interleave(kW / kPlateLen).view({1, 1, kW}) / kChars;
    return {img, label};
  }
  torch::optional<size_t> size() const override { return n_; }

 private:
  int64_t n_;
};

struct CrnnImpl : torch::nn::Module {
  CrnnImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        rnn(register_module("rnn", torch::nn::GRU(torch::nn::GRUOptions(64 * 8, 128).bidirectional(true)))),
        out(register_module("out", torch::nn::Linear(256, kChars))) {}
  // Returns log-probabilities [T, B, C] with T = kW / 4 columns.
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::max_pool2d(torch::relu(c1->forward(x)), 2);
    h = torch::max_pool2d(torch::relu(c2->forward(h)), 2);       // [B, 64, 8, 32]
    h = h.permute({3, 0, 1, 2}).flatten(2);                       // [32, B, 512]
    auto seq = std::get<0>(rnn->forward(h));
    return torch::log_softmax(out->forward(seq), 2);
  }
  torch::nn::Conv2d c1, c2;
  torch::nn::GRU rnn;
  torch::nn::Linear out;
};
TORCH_MODULE(Crnn);

torch::Tensor ctc(const torch::Tensor &logp, const torch::Tensor &targets) {
  const int64_t b = logp.size(1);
  auto in_len = torch::full({b}, logp.size(0), torch::kLong);
  auto tgt_len = torch::full({b}, kPlateLen, torch::kLong);
  // OK(torch-device-mismatch): ctc_loss takes its length tensors on the host
  // whatever the device of the log-probabilities.
  return torch::ctc_loss(logp, targets, in_len, tgt_len, /*blank=*/0, at::Reduction::Mean, /*zero_infinity=*/true);
}

// One forward and backward at batch size `bs`; true when it fits.
bool fits(Crnn &net, torch::Device device, int64_t bs) {
  auto x = torch::rand({bs, 1, kH, kW}, torch::TensorOptions().device(device));
  auto y = torch::randint(1, kChars, {bs, kPlateLen}, torch::TensorOptions().dtype(torch::kLong).device(device));
  try {
    ctc(net->forward(x), y).backward();
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the same batch size is tried again
    // after emptying the cache, which the allocator already did.
    c10::cuda::CUDACachingAllocator::emptyCache();
    ctc(net->forward(x), y).backward();
  }
  net->zero_grad();
  return true;
}

int main(int argc, char **argv) {
  // BUG(torch-cuda-unguarded): without an argument the program picks CUDA
  // and nothing checks that it exists.
  torch::Device device(argc > 1 ? argv[1] : "cuda");
  Crnn net;
  net->to(device);
  const int64_t batch = fits(net, device, 256) ? 256 : 64;

  auto loader = torch::data::make_data_loader(
      PlateDataset(200000).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(batch).workers(2));
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));

  int64_t skipped = 0, step = 0;
  for (auto &b : *loader) {
    opt.zero_grad();
    // BUG(torch-non-blocking-pageable): loader batches are stacked in
    // pageable memory; the flag does nothing.
    auto x = b.data.to(device, /*non_blocking=*/true);
    // OK(torch-non-blocking-pageable): a blocking copy.
    auto y = b.target.to(device);
    auto loss = ctc(net->forward(x), y);
    // BUG(torch-host-sync-in-loop): the finiteness test reads the loss back
    // on every step, before backward.
    if (!std::isfinite(loss.item<double>())) {
      ++skipped;
      continue;
    }
    loss.backward();
    torch::nn::utils::clip_grad_norm_(net->parameters(), 5.0);
    opt.step();
    if (++step % 500 == 0)
      // OK(torch-host-sync-in-loop): every 500 steps.
      std::cout << "step " << step << " ctc " << loss.item<float>() << " skipped " << skipped << "\n";
  }
  torch::save(net, "crnn_plates.pt");
  return 0;
}
