// Per-point semantic segmentation of LiDAR sweeps (ground, vehicle,
// pedestrian, vegetation, building) with a PointNet-style network. Sweeps
// have different point counts, so a custom collate concatenates them and
// keeps the offsets; the training collate pins its output when a GPU is
// there, the validation one was written later, by someone else. A metrics
// class accumulates a confusion matrix for the per-class IoU.
#include <torch/torch.h>

#include <cstdint>
#include <iomanip>
#include <iostream>
#include <vector>

constexpr int64_t kClasses = 5, kFeat = 4;  // x, y, z, intensity

struct Sweep {
  torch::Tensor points;  // [N, 4]
  torch::Tensor labels;  // [N]
};

struct CloudBatch {
  torch::Tensor points;   // [sum N, 4]
  torch::Tensor labels;   // [sum N]
  torch::Tensor offsets;  // [B + 1]
};

// The driver hands over channel-first buffers; the sweep views them as [N, 4].
Sweep synth_sweep(int64_t n) {
  auto pts = torch::randn({kFeat, n}).t();
  auto labels = (pts.select(1, 2) > 0.5).to(torch::kLong) + (pts.select(1, 0) > 1.0).to(torch::kLong) * 2;
  return Sweep{pts, labels.clamp_max(kClasses - 1)};
}

void normalise_sweeps(std::vector<Sweep> &sweeps) {
  for (auto &s : sweeps) {
    auto xyz = s.points.narrow(1, 0, 3);
    xyz.sub_(xyz.mean(0, /*keepdim=*/true));
    // BUG(torch-tensor-to-discarded): the channel-first view stays
    // non-contiguous; the result of contiguous() is dropped.
    s.points.contiguous();
  }
}

class CloudCollate {
 public:
  explicit CloudCollate(bool pin) : pin_(pin) {}
  CloudBatch operator()(const std::vector<Sweep> &sweeps) const {
    std::vector<torch::Tensor> pts, lbl;
    std::vector<int64_t> offs = {0};
    for (const auto &s : sweeps) {
      pts.push_back(s.points);
      lbl.push_back(s.labels);
      offs.push_back(offs.back() + s.points.size(0));
    }
    CloudBatch b{torch::cat(pts), torch::cat(lbl), torch::tensor(offs)};
    if (pin_) {
      b.points = b.points.pin_memory();
      b.labels = b.labels.pin_memory();
    }
    return b;
  }

 private:
  bool pin_;
};

CloudBatch collate_eval(const std::vector<Sweep> &sweeps) {
  std::vector<torch::Tensor> pts, lbl;
  for (const auto &s : sweeps) {
    pts.push_back(s.points);
    lbl.push_back(s.labels);
  }
  return CloudBatch{torch::cat(pts), torch::cat(lbl), torch::tensor({int64_t(0)})};
}

struct PointSegNetImpl : torch::nn::Module {
  PointSegNetImpl()
      : local(register_module("local", torch::nn::Sequential(torch::nn::Linear(kFeat, 64), torch::nn::BatchNorm1d(64),
                                                             torch::nn::ReLU(), torch::nn::Linear(64, 128),
                                                             torch::nn::ReLU()))),
        head(register_module("head", torch::nn::Sequential(torch::nn::Linear(256, 128), torch::nn::ReLU(),
                                                           torch::nn::Dropout(0.3), torch::nn::Linear(128, kClasses)))) {}
  // Global feature: max over all points of the batch (sweeps are small).
  torch::Tensor forward(const torch::Tensor &points) {
    auto f = local->forward(points);
    auto g = std::get<0>(f.max(0, /*keepdim=*/true)).expand_as(f);
    return head->forward(torch::cat({f, g}, 1));
  }
  torch::nn::Sequential local, head;
};
TORCH_MODULE(PointSegNet);

class SegMetrics {
 public:
  void update(const torch::Tensor &logits, const torch::Tensor &labels) {
    auto pred = logits.argmax(1);
    // BUG(torch-host-sync-in-loop): the trainer updates the metrics after
    // every step; bringing the confusion counts to the host waits for the GPU.
    auto counts = torch::bincount(labels * kClasses + pred, {}, kClasses * kClasses).to(torch::kCPU);
    confusion_ += counts.view({kClasses, kClasses});
  }
  torch::Tensor iou() const {
    auto tp = confusion_.diag().to(torch::kDouble);
    return tp / (confusion_.sum(0) + confusion_.sum(1) - confusion_.diag()).to(torch::kDouble).clamp_min(1);
  }
  void reset() { confusion_.zero_(); }

 private:
  torch::Tensor confusion_ = torch::zeros({kClasses, kClasses}, torch::kLong);
};

double validate(PointSegNet &net, const std::vector<std::vector<Sweep>> &val, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  double total = 0.0;
  for (const auto &sweeps : val) {
    auto batch = collate_eval(sweeps);
    // BUG(torch-non-blocking-pageable): collate_eval() never pins its
    // output, so the "asynchronous" upload is a plain synchronous copy.
    auto pts = batch.points.to(device, /*non_blocking=*/true);
    auto logits = net->forward(pts);
    // BUG(torch-device-mismatch): the labels were never moved; the loss meets
    // device logits and host labels.
    auto loss = torch::nn::functional::cross_entropy(logits, batch.labels);
    total += loss.item<double>();
  }
  return total / static_cast<double>(val.size());
}

int main() {
  torch::manual_seed(137);
  const bool gpu = torch::cuda::is_available();
  torch::Device device = gpu ? torch::kCUDA : torch::kCPU;
  PointSegNet net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  CloudCollate collate(/*pin=*/gpu);
  SegMetrics metrics;

  std::vector<std::vector<Sweep>> val;
  for (int v = 0; v < 10; ++v)
    val.push_back({synth_sweep(3000), synth_sweep(2500)});

  for (int epoch = 0; epoch < 20; ++epoch) {
    net->train();
    metrics.reset();
    for (int it = 0; it < 100; ++it) {
      std::vector<Sweep> sweeps = {synth_sweep(2000 + it * 7), synth_sweep(1800), synth_sweep(2200)};
      normalise_sweeps(sweeps);
      auto batch = collate(sweeps);
      // OK(torch-non-blocking-pageable): the training collate pins when a GPU
      // is there, and without one the copy is CPU to CPU.
      auto pts = batch.points.to(device, /*non_blocking=*/true);
      auto labels = batch.labels.to(device, /*non_blocking=*/true);
      auto logits = net->forward(pts);
      // OK(torch-device-mismatch): both sides were uploaded.
      auto loss = torch::nn::functional::cross_entropy(logits, labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      metrics.update(logits.detach(), labels);
    }
    auto iou = metrics.iou();
    std::cout << "epoch " << epoch << " mIoU " << std::fixed << std::setprecision(3) << iou.mean().item<double>()
              << " val loss " << validate(net, val, device) << "\n";
  }
  return 0;
}
