// LiDAR semantic segmentation of 64-beam sweeps: every point (x, y, z,
// intensity) gets one of six classes (road, sidewalk, vehicle, pedestrian,
// vegetation, building) from a PointNet-style shared MLP with a global
// context vector. Sweeps arrive on the host and are uploaded into
// device-resident buffers; predicted labels stream back through an exporter
// that writes one .label file per frame for the mapping team.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kPoints = 16384, kFeat = 4, kClasses = 6;

struct Sweep {
  torch::Tensor points;  // [N, 4]
  torch::Tensor labels;  // [N] long
  int64_t frame;
};

Sweep synth_sweep(int64_t frame) {
  auto points = torch::empty({kPoints, kFeat});
  points.narrow(1, 0, 2).uniform_(-50.0, 50.0);
  points.select(1, 2).uniform_(-2.0, 3.0);
  points.select(1, 3).uniform_(0.0, 255.0);
  return {points, torch::randint(0, kClasses, {kPoints}, torch::kLong), frame};
}

// Mean and spread of the sensor's channels, from the calibration sheet.
struct SensorCalib {
  torch::Tensor mean = torch::tensor({0.0f, 0.0f, 0.4f, 60.0f});
  torch::Tensor stdev = torch::tensor({20.0f, 20.0f, 1.5f, 45.0f});
};

torch::Tensor normalize(const torch::Tensor &points, const SensorCalib &calib) {
  return (points - calib.mean) / calib.stdev;
}

struct PointSegNetImpl : nn::Module {
  PointSegNetImpl()
      : local(register_module("local", nn::Sequential(nn::Linear(kFeat, 64), nn::BatchNorm1d(64), nn::ReLU(),
                                                      nn::Linear(64, 128), nn::ReLU()))),
        head(register_module("head", nn::Sequential(nn::Linear(256, 128), nn::ReLU(), nn::Dropout(0.3),
                                                    nn::Linear(128, kClasses)))) {}
  // [N, 4] -> [N, kClasses]
  torch::Tensor forward(const torch::Tensor &x) {
    auto f = local->forward(x);
    auto global = std::get<0>(f.max(0, /*keepdim=*/true)).expand_as(f);
    return head->forward(torch::cat({f, global}, 1));
  }
  nn::Sequential local, head;
};
TORCH_MODULE(PointSegNet);

// Three page-locked host buffers used round robin, so a copy still in flight
// from one slot is not overwritten by the next sweep.
class StagingRing {
 public:
  StagingRing() {
    for (auto &slot : slots_)
      slot = torch::empty({kPoints, kFeat}).pin_memory();
  }
  torch::Tensor &next() { return slots_[cursor_++ % slots_.size()]; }

 private:
  std::array<torch::Tensor, 3> slots_;
  size_t cursor_ = 0;
};

// Device-resident input buffers, refilled for every sweep.
class SweepUploader {
 public:
  explicit SweepUploader(torch::Device device)
      : points_dev_(torch::empty({kPoints, kFeat}, torch::TensorOptions().device(device))),
        labels_dev_(torch::empty({kPoints}, torch::TensorOptions().device(device).dtype(torch::kLong))),
        labels_host_(torch::empty({kPoints}, torch::kLong)) {}

  const torch::Tensor &points(const Sweep &s) {
    auto &slot = ring_.next();
    slot.copy_(s.points);
    // OK(torch-non-blocking-pageable): the slot comes from the page-locked ring.
    points_dev_.copy_(slot, /*non_blocking=*/true);
    return points_dev_;
  }
  const torch::Tensor &labels(const Sweep &s) {
    labels_host_.copy_(s.labels);
    // BUG(torch-non-blocking-pageable): the label staging buffer is a plain
    // torch::empty() member, never pinned.
    labels_dev_.copy_(labels_host_, /*non_blocking=*/true);
    return labels_dev_;
  }

 private:
  StagingRing ring_;
  torch::Tensor points_dev_, labels_dev_, labels_host_;
};

// Labels each sweep and writes the predicted class of every point, one byte
// each, for the mapping team.
class LabelExporter {
 public:
  LabelExporter(PointSegNet net, std::string dir)
      : net_(net), dir_(std::move(dir)),
        host_(torch::empty({kPoints}, torch::TensorOptions().dtype(torch::kByte).pinned_memory(true))) {
    net_->eval();
  }
  torch::Tensor predict(int64_t frame, const torch::Tensor &feats) {
    frame_ = frame;
    auto logits = net_->forward(feats);
    host_.copy_(logits.argmax(1).to(torch::kByte), /*non_blocking=*/true);
    return logits;
  }
  void write() const {
    // BUG(torch-non-blocking-d2h-race): predict() only queued the copy into
    // host_; nothing waited before the bytes are read here.
    const uint8_t *labels = host_.data_ptr<uint8_t>();
    std::ofstream out(dir_ + "/" + std::to_string(frame_) + ".label", std::ios::binary);
    out.write(reinterpret_cast<const char *>(labels), kPoints);
  }

 private:
  PointSegNet net_;
  std::string dir_;
  torch::Tensor host_;
  int64_t frame_ = -1;
};

class TrainerBase {
 public:
  explicit TrainerBase(torch::Device device) : device_(device) {}
  virtual ~TrainerBase() = default;

 protected:
  virtual void on_batch_end(int64_t step, const torch::Tensor &loss) {}
  torch::Device device_;
};

class SegTrainer : public TrainerBase {
 public:
  SegTrainer(PointSegNet net, torch::Device device)
      : TrainerBase(device), net_(net), uploader_(device), opt_(net->parameters(), torch::optim::AdamOptions(1e-3)) {}

  void train_epoch(const std::vector<Sweep> &sweeps, int64_t epoch) {
    net_->train();
    std::array<torch::Tensor, 3> band_loss;
    for (auto &b : band_loss)
      b = torch::zeros({}, torch::TensorOptions().device(device_));
    int64_t step = epoch * static_cast<int64_t>(sweeps.size());
    for (const auto &s : sweeps) {
      const auto &pts = uploader_.points(s);
      const auto &labels = uploader_.labels(s);
      // BUG(torch-device-mismatch): the calibration tensors stayed on the
      // host; normalize() subtracts them from the device points.
      auto feats = normalize(pts, calib_);
      opt_.zero_grad();
      auto per_point = F::cross_entropy(net_->forward(feats), labels,
                                        F::CrossEntropyFuncOptions().reduction(torch::kNone));
      auto loss = per_point.mean();
      loss.backward();
      opt_.step();
      auto range = pts.narrow(1, 0, 2).norm(2, 1);
      auto add_band = [&](size_t band, double lo, double hi) {
        auto in_band = ((range >= lo) & (range < hi)).to(torch::kFloat);
        // BUG(torch-loss-accumulation-graph): per_point is still attached;
        // the epoch's band sums keep every step's graph.
        band_loss[band] += (per_point * in_band).sum() / in_band.sum().clamp_min(1.0);
      };
      add_band(0, 0.0, 20.0);
      add_band(1, 20.0, 40.0);
      add_band(2, 40.0, 1e9);
      on_batch_end(step++, loss);
    }
    // OK(torch-host-sync-in-loop): read once per epoch, after the batch loop.
    std::cout << "epoch " << epoch << " near " << band_loss[0].item<double>() << " mid " << band_loss[1].item<double>()
              << " far " << band_loss[2].item<double>() << '\n';
  }

  // Per-frame labels for the mapping team, and the mean IoU over the set.
  void export_labels(const std::vector<Sweep> &sweeps, LabelExporter &exporter) {
    net_->eval();
    torch::NoGradGuard no_grad;
    SensorCalib on_device{calib_.mean.to(device_), calib_.stdev.to(device_)};
    auto confusion = torch::zeros({kClasses * kClasses}, torch::TensorOptions().device(device_).dtype(torch::kLong));
    for (const auto &s : sweeps) {
      const auto &pts = uploader_.points(s);
      // OK(torch-device-mismatch): the calibration was moved to device_ first.
      auto logits = exporter.predict(s.frame, normalize(pts, on_device));
      confusion.index_add_(0, uploader_.labels(s) * kClasses + logits.argmax(1), torch::ones_like(uploader_.labels(s)));
      exporter.write();
    }
    auto host = confusion.to(torch::kCPU, /*non_blocking=*/true);
    if (device_.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised right after the copy.
    auto cm = host.view({kClasses, kClasses}).to(torch::kDouble);
    auto iou = cm.diagonal() / (cm.sum(0) + cm.sum(1) - cm.diagonal()).clamp_min(1.0);
    std::cout << "mIoU " << iou.mean().item<double>() << '\n';
  }

 protected:
  void on_batch_end(int64_t step, const torch::Tensor &loss) override {
    // BUG(torch-host-sync-in-loop): a blocking copy of the loss to the host
    // on every training step, for the loss curve.
    curve_.push_back(loss.detach().to(torch::kCPU));
    if (step % 200 == 0)
      std::cout << "step " << step << " ce " << curve_.back().item<float>() << '\n';
  }

 private:
  PointSegNet net_;
  SweepUploader uploader_;
  SensorCalib calib_;
  torch::optim::Adam opt_;
  std::vector<torch::Tensor> curve_;
};

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "lidar_seg: a CUDA device is required\n";
    return 1;
  }
  torch::manual_seed(294);
  // OK(torch-cuda-unguarded): main returned above when no GPU is present.
  const torch::Device device(torch::kCUDA);
  std::vector<Sweep> train, val;
  for (int64_t f = 0; f < 64; ++f)
    train.push_back(synth_sweep(f));
  for (int64_t f = 1000; f < 1008; ++f)
    val.push_back(synth_sweep(f));

  PointSegNet net;
  net->to(device);
  SegTrainer trainer(net, device);
  for (int64_t epoch = 0; epoch < 10; ++epoch)
    trainer.train_epoch(train, epoch);
  LabelExporter exporter(net, "/tmp/lidar_labels");
  trainer.export_labels(val, exporter);
  torch::save(net, "pointseg.pt");
}
