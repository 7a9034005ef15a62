// Parcel detector for a sorting-line camera: a small single-stage detector
// (one stride-8 feature map, three anchor sizes per cell, RetinaNet-style
// head) trained on rendered conveyor scenes. The run settings live in one
// namespace-scope RunConfig that main() fills in before anything is built.
// Target assignment runs on the CPU next to the anchors; the network runs on
// the configured device. A fixed array of StepMetric objects is updated after
// every optimizer step and printed with the periodic log line.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

namespace parcel {

struct RunConfig {
  torch::Device device{torch::kCPU};
  int64_t image_size = 128;
  int64_t batch = 16;
  int64_t objects = 4;
  int64_t steps = 400;
  int64_t log_every = 50;
  double lr = 1e-3;
};

RunConfig g_config;

constexpr int64_t kStride = 8, kSizes = 3, kClasses = 3;  // envelope, carton, tube; 0 is background

// Anchors of the stride-8 map as (cx, cy, w, h), row-major over cells, three sizes per cell.
torch::Tensor make_anchors(int64_t image_size) {
  const int64_t cells = image_size / kStride;
  auto centers = (torch::arange(cells, torch::kFloat) + 0.5) * kStride;
  auto cy = centers.view({cells, 1}).expand({cells, cells});
  auto cx = centers.view({1, cells}).expand({cells, cells});
  std::vector<torch::Tensor> per_size;
  for (double side : {16.0, 32.0, 64.0})
    per_size.push_back(torch::stack({cx, cy, torch::full({cells, cells}, side), torch::full({cells, cells}, side)}, -1));
  return torch::stack(per_size, 2).reshape({-1, 4});
}

torch::Tensor build_variance() { return torch::tensor({0.1f, 0.1f, 0.2f, 0.2f}); }

// Box-coder variances, shared by training and detection; built once.
const torch::Tensor &box_variance() {
  static const torch::Tensor variance = build_variance();
  return variance;
}

// (cx, cy, w, h) boxes from anchors and raw (variance-scaled) offsets.
torch::Tensor decode(const torch::Tensor &anchors, const torch::Tensor &offsets) {
  auto xy = anchors.slice(-1, 0, 2) + offsets.slice(-1, 0, 2) * anchors.slice(-1, 2, 4);
  auto wh = anchors.slice(-1, 2, 4) * torch::exp(offsets.slice(-1, 2, 4).clamp_max(4.0));
  return torch::cat({xy, wh}, -1);
}

torch::Tensor pairwise_iou(const torch::Tensor &a, const torch::Tensor &b) {
  auto a0 = (a.slice(1, 0, 2) - a.slice(1, 2, 4) / 2).unsqueeze(1), a1 = (a.slice(1, 0, 2) + a.slice(1, 2, 4) / 2).unsqueeze(1);
  auto b0 = (b.slice(1, 0, 2) - b.slice(1, 2, 4) / 2).unsqueeze(0), b1 = (b.slice(1, 0, 2) + b.slice(1, 2, 4) / 2).unsqueeze(0);
  auto inter = (torch::min(a1, b1) - torch::max(a0, b0)).clamp_min(0).prod(-1);
  auto area_a = a.slice(1, 2, 4).prod(1).unsqueeze(1), area_b = b.slice(1, 2, 4).prod(1).unsqueeze(0);
  return inter / (area_a + area_b - inter);
}

struct SceneBatch {
  torch::Tensor images, boxes, labels;  // B x 3 x S x S; B x N x (cx, cy, w, h) in pixels; B x N in 1..kClasses
};

struct Targets {
  torch::Tensor matched;            // B x A x 4, the box each anchor is matched to
  torch::Tensor classes, positive;  // B x A: class (0 for background); 1 where an object was matched
};

Targets assign_targets(const torch::Tensor &anchors, const torch::Tensor &boxes, const torch::Tensor &labels) {
  std::vector<torch::Tensor> matched, classes, positive;
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    auto best = pairwise_iou(anchors, boxes[i]).max(1);
    auto best_idx = std::get<1>(best);
    auto pos = std::get<0>(best) >= 0.5;
    matched.push_back(boxes[i].index_select(0, best_idx));
    classes.push_back(torch::where(pos, labels[i].index_select(0, best_idx), torch::zeros_like(best_idx)));
    positive.push_back(pos.to(torch::kFloat));
  }
  return {torch::stack(matched), torch::stack(classes), torch::stack(positive)};
}

SceneBatch render_scenes(int64_t batch, int64_t size, int64_t objects, std::mt19937 &rng) {
  std::uniform_real_distribution<float> center(16.f, static_cast<float>(size) - 16.f), side(12.f, 60.f);
  std::uniform_int_distribution<int64_t> cls(1, kClasses);
  auto images = torch::rand({batch, 3, size, size}) * 0.1;
  auto boxes = torch::empty({batch, objects, 4});
  auto labels = torch::empty({batch, objects}, torch::kLong);
  auto b = boxes.accessor<float, 3>();
  auto l = labels.accessor<int64_t, 2>();
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < objects; ++j) {
      const float cx = center(rng), cy = center(rng), w = side(rng), h = side(rng);
      b[i][j][0] = cx, b[i][j][1] = cy, b[i][j][2] = w, b[i][j][3] = h;
      l[i][j] = cls(rng);
      const auto x0 = static_cast<int64_t>(cx - w / 2), y0 = static_cast<int64_t>(cy - h / 2);
      images[i].slice(1, std::max<int64_t>(0, y0), y0 + static_cast<int64_t>(h))
          .slice(2, std::max<int64_t>(0, x0), x0 + static_cast<int64_t>(w))
          .fill_(0.3 * static_cast<double>(l[i][j]));
    }
  return {images, boxes, labels};
}

struct DetectorNetImpl : torch::nn::Module {
  DetectorNetImpl()
      : backbone(register_module(
            "backbone", torch::nn::Sequential(
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)), torch::nn::ReLU(),
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)), torch::nn::ReLU(),
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 96, 3).stride(2).padding(1)), torch::nn::ReLU()))),
        head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(96, kSizes * (4 + kClasses + 1), 1)))) {}

  // B x (cells * cells * kSizes) x (4 + 1 + kClasses): box offsets, then class logits.
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = head->forward(backbone->forward(x));
    return h.permute({0, 2, 3, 1}).reshape({h.size(0), -1, 4 + kClasses + 1});
  }

  torch::nn::Sequential backbone;
  torch::nn::Conv2d head;
};
TORCH_MODULE(DetectorNet);

struct StepStats {
  torch::Tensor loss, positives;  // the scalar loss with its graph; matched anchors in the batch
};

class Detector {
 public:
  explicit Detector(int64_t image_size) : anchors_(make_anchors(image_size)) { net_->to(g_config.device); }

  DetectorNet &net() { return net_; }

  StepStats loss(const SceneBatch &batch) {
    // OK(torch-device-mismatch): assignment runs on the CPU, where the anchors and the labels are.
    Targets t = assign_targets(anchors_, batch.boxes, batch.labels);
    // BUG(torch-non-blocking-pageable): render_scenes() draws the images with
    // torch::rand into pageable memory; the copy is synchronous anyway.
    auto images = batch.images.to(g_config.device, /*non_blocking=*/true);
    auto matched = t.matched.to(g_config.device);
    auto positive = t.positive.to(g_config.device);
    auto out = net_->forward(images);
    // OK(torch-device-mismatch): the variances are moved next to the offsets.
    auto offsets = out.slice(2, 0, 4) * box_variance().to(g_config.device);
    // BUG(torch-device-mismatch): anchors_ stayed on the CPU since the
    // constructor; decode() adds them to offsets on g_config.device.
    auto boxes = decode(anchors_, offsets);
    auto l1 = (boxes - matched).abs().sum(2) / static_cast<double>(g_config.image_size);
    auto reg_loss = (l1 * positive).sum() / positive.sum().clamp_min(1.0);
    // BUG(torch-device-mismatch): every target field was moved but classes,
    // still on the CPU where assign_targets() built it.
    auto cls_loss = F::cross_entropy(out.slice(2, 4).reshape({-1, kClasses + 1}), t.classes.reshape({-1}));
    return {reg_loss + cls_loss, positive.sum()};
  }

  // Boxes (cx, cy, w, h) of the anchors of one image whose best object score passes the threshold.
  torch::Tensor detect(const torch::Tensor &image, double threshold) {
    torch::NoGradGuard no_grad;
    // OK(torch-non-blocking-pageable): the caller hands over views of a pinned batch.
    auto out = net_->forward(image.unsqueeze(0).to(g_config.device, /*non_blocking=*/true))[0];
    // BUG(torch-device-mismatch): box_variance() is the CPU static; out is on g_config.device.
    auto offsets = out.slice(1, 0, 4) * box_variance();
    auto scores = std::get<0>(torch::softmax(out.slice(1, 4), 1).slice(1, 1).max(1));
    auto keep = (scores > threshold).nonzero().squeeze(1);
    return decode(anchors_, offsets.cpu()).index_select(0, keep.cpu());
  }

 private:
  torch::Tensor anchors_;
  DetectorNet net_;
};

struct StepMetric {
  virtual ~StepMetric() = default;
  virtual void update(const StepStats &s) = 0;
  virtual std::string report() const = 0;
};

class LossAverage : public StepMetric {
 public:
  void update(const StepStats &s) override {
    // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): detached, stays on the device.
    sum_ = sum_.defined() ? sum_ + s.loss.detach() : s.loss.detach();
    ++n_;
  }
  std::string report() const override { return "loss " + std::to_string(sum_.item<double>() / static_cast<double>(n_)); }

 private:
  torch::Tensor sum_;
  int64_t n_ = 0;
};

class PositiveAnchors : public StepMetric {
 public:
  void update(const StepStats &s) override {
    // BUG(torch-host-sync-in-loop): fit() updates every metric after every
    // step; positives is on g_config.device, so .item() stalls each step.
    total_ += s.positives.item<double>();
    ++n_;
  }
  std::string report() const override { return "positives/step " + std::to_string(total_ / static_cast<double>(n_)); }

 private:
  double total_ = 0.0;
  int64_t n_ = 0;
};

using MetricArray = std::array<std::unique_ptr<StepMetric>, 2>;

void fit(Detector &detector, MetricArray &metrics, std::mt19937 &rng) {
  torch::optim::Adam opt(detector.net()->parameters(), torch::optim::AdamOptions(g_config.lr));
  for (int64_t step = 1; step <= g_config.steps; ++step) {
    SceneBatch batch = render_scenes(g_config.batch, g_config.image_size, g_config.objects, rng);
    opt.zero_grad();
    StepStats stats = detector.loss(batch);
    stats.loss.backward();
    opt.step();
    for (auto &m : metrics)
      m->update(stats);
    if (step % g_config.log_every == 0) {
      // OK(torch-host-sync-in-loop): once every log_every steps.
      std::cout << "step " << step << " loss " << stats.loss.item<double>();
      for (const auto &m : metrics)
        std::cout << "  " << m->report();
      std::cout << '\n';
    }
  }
}

}  // namespace parcel

int main() {
  using namespace parcel;
  torch::manual_seed(336);
  std::mt19937 rng(336);
  // OK(torch-cuda-unguarded): CUDA only when it is available.
  g_config.device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  Detector detector(g_config.image_size);
  MetricArray metrics{std::make_unique<LossAverage>(), std::make_unique<PositiveAnchors>()};
  fit(detector, metrics, rng);

  detector.net()->eval();
  auto images = render_scenes(32, g_config.image_size, g_config.objects, rng).images.pin_memory();
  int64_t found = 0;
  for (int64_t i = 0; i < images.size(0); ++i)
    found += detector.detect(images[i], 0.5).size(0);
  std::cout << "validation: " << found << " confident anchors over " << images.size(0) << " scenes\n";
}
