// County-level crop-yield regression from multispectral satellite patches
// (6 bands, 16x16 pixels, yield in t/ha). The patches come from a loader
// with a hand-written input iterator that refills one host buffer per batch,
// and the training schedule is a small state machine: a linear warm-up phase,
// plain training epochs, a validation phase every third epoch, and a final
// export of the county predictions.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>

constexpr int64_t kBands = 6, kSide = 16;

struct YieldNetImpl : torch::nn::Module {
  YieldNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(kBands, 32, 3).padding(1)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(32))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)))),
        out(register_module("out", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(bn1(conv1(x)));
    h = torch::relu(conv2(h)).mean({2, 3});
    return out(h).squeeze(1);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear out;
};
TORCH_MODULE(YieldNet);

struct PatchBatch {
  torch::Tensor patches;  // [B, 6, 16, 16]
  torch::Tensor yield;    // [B]
};

// Reads `batches` batches of `batch` patches into one reusable host buffer.
class PatchLoader {
 public:
  PatchLoader(int64_t batches, int64_t batch, uint64_t seed)
      : batches_(batches), patches_(torch::empty({batch, kBands, kSide, kSide})),
        yield_(torch::empty({batch})), seed_(seed) {}

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = PatchBatch;
    using difference_type = std::ptrdiff_t;
    using pointer = const PatchBatch *;
    using reference = PatchBatch;

    iterator(PatchLoader *owner, int64_t index) : owner_(owner), index_(index) {}
    PatchBatch operator*() const { return owner_->fill(index_); }
    iterator &operator++() {
      ++index_;
      return *this;
    }
    bool operator!=(const iterator &other) const { return index_ != other.index_; }

   private:
    PatchLoader *owner_;
    int64_t index_;
  };

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, batches_); }

 private:
  // NDVI-like signal in bands 3 and 4 drives the yield.
  PatchBatch fill(int64_t index) {
    auto gen = at::detail::createCPUGenerator(seed_ * 100003 + static_cast<uint64_t>(index));
    patches_.copy_(torch::rand(patches_.sizes(), gen));
    auto ndvi = (patches_.select(1, 4) - patches_.select(1, 3)) / (patches_.select(1, 4) + patches_.select(1, 3) + 1e-3);
    yield_.copy_(4.0 + 6.0 * ndvi.mean({1, 2}) + 0.1 * torch::randn(yield_.sizes(), gen));
    return {patches_, yield_};
  }

  int64_t batches_;
  torch::Tensor patches_, yield_;
  uint64_t seed_;
};

enum class Phase { kWarmup, kTrain, kValidate, kExport, kDone };

int main() {
  torch::manual_seed(147);
  // OK(torch-cuda-unguarded): CPU fallback.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  YieldNet net;
  net->to(device);
  const double base_lr = 3e-3;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(base_lr));
  PatchLoader train_loader(40, 64, 1), val_loader(8, 256, 2);

  Phase phase = Phase::kWarmup;
  int64_t epoch = 0;
  double best_rmse = 1e9;
  while (phase != Phase::kDone) {
    switch (phase) {
      case Phase::kWarmup: {
        net->train();
        int64_t i = 0;
        for (auto batch : train_loader) {
          const double scale = static_cast<double>(++i) / 40.0;
          static_cast<torch::optim::AdamOptions &>(opt.param_groups()[0].options()).lr(base_lr * scale);
          // BUG(torch-non-blocking-pageable): the loader's buffer is plain
          // torch::empty memory; the non_blocking upload is synchronous.
          auto x = batch.patches.to(device, /*non_blocking=*/true);
          auto y = batch.yield.to(device);
          opt.zero_grad();
          auto loss = torch::mse_loss(net->forward(x), y);
          loss.backward();
          // BUG(torch-missing-zero-grad): the last warm-up step's gradients
          // stay in .grad() and the kTrain phase's first backward() adds to
          // them (that phase never resets).
          opt.step();
        }
        phase = Phase::kTrain;
        break;
      }
      case Phase::kTrain: {
        net->train();
        auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device));
        for (auto batch : train_loader) {
          auto x = batch.patches.to(device);
          auto y = batch.yield.to(device);
          auto loss = torch::mse_loss(net->forward(x), y);
          loss.backward();
          // BUG(torch-missing-zero-grad): only the warm-up phase resets the
          // gradients; here every step adds the earlier batches' gradients.
          opt.step();
          // BUG(torch-loss-accumulation-graph): epoch_loss outlives the batch
          // and keeps each batch's graph alive until the epoch ends.
          epoch_loss += loss;
        }
        // OK(torch-host-sync-in-loop): once per epoch, in the kTrain case only.
        std::cout << "epoch " << epoch << " train mse " << epoch_loss.item<double>() / 40 << '\n';
        ++epoch;
        phase = epoch % 3 == 0 ? Phase::kValidate : Phase::kTrain;
        break;
      }
      case Phase::kValidate: {
        net->eval();
        double se = 0;
        int64_t n = 0;
        for (auto batch : val_loader) {
          // BUG(torch-inference-without-no-grad): the validation batches never
          // reach backward(), yet autograd records every forward.
          auto pred = net->forward(batch.patches.to(device));
          // OK(torch-host-sync-in-loop): validation, not a training step.
          se += (pred - batch.yield.to(device)).pow(2).sum().item<double>();
          n += pred.size(0);
        }
        const double rmse = std::sqrt(se / static_cast<double>(n));
        std::cout << "validation rmse " << rmse << " t/ha\n";
        if (rmse < best_rmse) {
          best_rmse = rmse;
          torch::save(net, "yield_best.pt");
        }
        phase = epoch >= 9 ? Phase::kExport : Phase::kTrain;
        break;
      }
      case Phase::kExport: {
        torch::NoGradGuard no_grad;
        net->eval();
        PatchLoader counties(1, 512, 3);
        for (auto batch : counties) {
          auto pred = net->forward(batch.patches.to(device));
          auto host = pred.to(torch::kCPU, /*non_blocking=*/true);
          // BUG(torch-non-blocking-d2h-race): the county predictions are read
          // before the queued copy is known to be complete.
          auto a = host.accessor<float, 1>();
          double total = 0;
          for (int64_t c = 0; c < a.size(0); ++c)
            total += a[c];
          std::cout << "mean predicted yield " << total / static_cast<double>(a.size(0)) << " t/ha\n";
        }
        phase = Phase::kDone;
        break;
      }
      case Phase::kDone:
        break;
    }
  }
  return 0;
}
