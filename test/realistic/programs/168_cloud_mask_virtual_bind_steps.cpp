// Cloud masking for Sentinel-2 style tiles: four bands (B, G, R, NIR) in,
// a per-pixel label out (clear / cloud / cloud shadow). The task derives from
// a SegTask base with virtual train_step / eval_step, and the runner drives it
// through std::function objects made with std::bind. Tiles come from a reader
// that fills std::vector scanlines, wrapped with torch::from_blob. The mask
// head is also exported for the ground station's GPU.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

constexpr int64_t kBands = 4, kTile = 64, kClasses = 3;

torch::nn::Sequential conv_block(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)),
                               torch::nn::BatchNorm2d(out), torch::nn::ReLU());
}

struct CloudNetImpl : torch::nn::Cloneable<CloudNetImpl> {
  CloudNetImpl() { reset(); }
  void reset() override {
    enc1 = register_module("enc1", conv_block(kBands, 32));
    enc2 = register_module("enc2", conv_block(32, 64));
    dec = register_module("dec", conv_block(64 + 32, 32));
    head = register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, kClasses, 1)));
  }
  torch::Tensor forward(const torch::Tensor &x) {
    auto s1 = enc1->forward(x);
    auto s2 = enc2->forward(torch::max_pool2d(s1, 2));
    auto up = torch::upsample_nearest2d(s2, {kTile, kTile});
    return head->forward(dec->forward(torch::cat({up, s1}, 1)));
  }
  torch::nn::Sequential enc1{nullptr}, enc2{nullptr}, dec{nullptr};
  torch::nn::Conv2d head{nullptr};
};
TORCH_MODULE(CloudNet);

struct TileBatch {
  torch::Tensor bands;   // [N, 4, 64, 64] float
  torch::Tensor labels;  // [N, 64, 64] long

  // Wraps the reader's buffers; they stay owned by the reader.
  static TileBatch from_reader(std::vector<float> &raw, std::vector<int64_t> &mask, int64_t n) {
    return {torch::from_blob(raw.data(), {n, kBands, kTile, kTile}, torch::kFloat),
            torch::from_blob(mask.data(), {n, kTile, kTile}, torch::kLong)};
  }
};

// Stand-in for the GeoTIFF reader: bright, NIR-flat blobs are clouds.
class TileReader {
 public:
  TileBatch next(int64_t n) {
    raw_.assign(static_cast<size_t>(n * kBands * kTile * kTile), 0.0f);
    mask_.assign(static_cast<size_t>(n * kTile * kTile), 0);
    std::uniform_real_distribution<float> u(0.0f, 0.4f);
    for (size_t i = 0; i < raw_.size(); ++i)
      raw_[i] = u(rng_);
    std::uniform_int_distribution<int64_t> c(8, kTile - 8);
    for (int64_t b = 0; b < n; ++b) {
      const int64_t cy = c(rng_), cx = c(rng_);
      for (int64_t y = cy - 6; y < cy + 6; ++y)
        for (int64_t x = cx - 6; x < cx + 6; ++x) {
          mask_[(b * kTile + y) * kTile + x] = 1;
          for (int64_t band = 0; band < kBands; ++band)
            raw_[((b * kBands + band) * kTile + y) * kTile + x] += 0.5f;
        }
    }
    return TileBatch::from_reader(raw_, mask_, n);
  }

 private:
  std::mt19937 rng_{168};
  std::vector<float> raw_;
  std::vector<int64_t> mask_;
};

class SegTask {
 public:
  virtual ~SegTask() = default;
  virtual torch::Tensor train_step(const TileBatch &batch) = 0;
  virtual double eval_step(const TileBatch &batch) = 0;
};

class CloudMaskTask : public SegTask {
 public:
  explicit CloudMaskTask(torch::Device device)
      : device_(device), class_weights_(torch::tensor({1.0, 2.5, 4.0})), loss_sum_(torch::zeros({}, device)),
        opt_(net_->parameters(), torch::optim::AdamOptions(3e-4)) {
    net_->to(device_);
  }

  torch::Tensor train_step(const TileBatch &batch) override {
    net_->train();
    auto logits = net_->forward(batch.bands);
    // BUG(torch-device-mismatch): the class weights were made on the CPU in
    // the constructor and never moved; the logits are on device_.
    auto loss = torch::nn::functional::cross_entropy(
        logits, batch.labels, torch::nn::functional::CrossEntropyFuncOptions().weight(class_weights_));
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    // BUG(torch-loss-accumulation-graph): the running sum is a member and
    // keeps every step's graph alive until the epoch summary.
    loss_sum_ += loss;
    ++steps_;
    return loss.detach();
  }

  double eval_step(const TileBatch &batch) override {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto pred = net_->forward(batch.bands).argmax(1);
    // OK(torch-device-mismatch): eval batches are staged on device_ too.
    return pred.eq(batch.labels).to(torch::kFloat).mean().item<double>();
  }

  double mean_loss() const { return loss_sum_.item<double>() / static_cast<double>(steps_ > 0 ? steps_ : 1); }
  CloudNet &net() { return net_; }

 private:
  torch::Device device_;
  CloudNet net_;
  torch::Tensor class_weights_;
  torch::Tensor loss_sum_;
  int64_t steps_ = 0;
  torch::optim::Adam opt_;
};

struct Runner {
  std::function<torch::Tensor(const TileBatch &)> train;
  std::function<double(const TileBatch &)> eval;
};

Runner bind_task(SegTask &task) {
  using std::placeholders::_1;
  return {std::bind(&SegTask::train_step, &task, _1), std::bind(&SegTask::eval_step, &task, _1)};
}

// Validation tiles are pinned once and then uploaded without blocking.
TileBatch stage_validation(const TileBatch &host, torch::Device device) {
  if (!device.is_cuda())
    return {host.bands.clone(), host.labels.clone()};
  auto bands = host.bands.pin_memory();
  auto labels = host.labels.pin_memory();
  // OK(torch-non-blocking-pageable): both sources were pinned just above.
  return {bands.to(device, /*non_blocking=*/true), labels.to(device, /*non_blocking=*/true)};
}

// The ground station's inference box serves the mask head from its second
// card.
void export_for_station(CloudNet &net) {
  // BUG(torch-device-index-unchecked): ordinal 1 is never compared with
  // torch::cuda::device_count().
  // OK(torch-cuda-unguarded): main() only calls this after is_available().
  torch::Device station("cuda:1");
  auto replica = std::dynamic_pointer_cast<CloudNetImpl>(net->clone(station));
  torch::save(replica, "cloudnet_station.pt");
}

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TileReader reader;
  CloudMaskTask task(device);
  Runner runner = bind_task(task);

  const TileBatch val = stage_validation(reader.next(32), device);
  for (int epoch = 0; epoch < 10; ++epoch) {
    for (int step = 0; step < 100; ++step) {
      TileBatch host = reader.next(16);
      // BUG(torch-non-blocking-pageable): from_blob over the reader's
      // std::vector is pageable memory; the copy runs synchronously.
      TileBatch batch{host.bands.to(device, /*non_blocking=*/true), host.labels.to(device)};
      auto loss = runner.train(batch);
      if (step % 50 == 0)
        // OK(torch-host-sync-in-loop): every 50th step.
        std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<float>() << "\n";
    }
    std::cout << "epoch " << epoch << " mean loss " << task.mean_loss() << " val acc " << runner.eval(val) << "\n";
  }

  if (torch::cuda::is_available())
    export_for_station(task.net());
  return 0;
}
