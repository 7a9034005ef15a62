// Warehouse pallet detector (SSD-lite) on 64x64 ceiling-camera crops. Ground
// truth is matched to anchors (cached in a function-local static) on the host
// in collate(); a DevicePolicy places the net and tensors; frames go through a
// reused ring of pinned byte buffers; detection runs NMS on the host.
#include <torch/torch.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <random>
#include <utility>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;
namespace det {
constexpr int64_t kSide = 64, kGrid = 8, kPerCell = 3, kClasses = 4;  // class 0 is background
constexpr int64_t kAnchors = kGrid * kGrid * kPerCell;

struct SsdLiteImpl : nn::Module {
  SsdLiteImpl()
      : backbone(register_module("backbone", nn::Sequential(
            nn::Conv2d(nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
            nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
            nn::Conv2d(nn::Conv2dOptions(64, 64, 3).stride(2).padding(1)), nn::BatchNorm2d(64), nn::ReLU()))),
        cls_head(register_module("cls_head", nn::Conv2d(nn::Conv2dOptions(64, kPerCell * kClasses, 3).padding(1)))),
        box_head(register_module("box_head", nn::Conv2d(nn::Conv2dOptions(64, kPerCell * 4, 3).padding(1)))) {}
  // (class logits N x A x C, box offsets N x A x 4)
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &images) {
    auto f = backbone->forward(images);
    return {cls_head->forward(f).permute({0, 2, 3, 1}).reshape({images.size(0), kAnchors, kClasses}),
            box_head->forward(f).permute({0, 2, 3, 1}).reshape({images.size(0), kAnchors, 4})};
  }
  nn::Sequential backbone;
  nn::Conv2d cls_head, box_head;
};
TORCH_MODULE(SsdLite);
// Anchors as (cx, cy, w, h) in normalised image coordinates, three sizes per cell.
torch::Tensor make_anchors() {
  auto centres = (torch::arange(kGrid, torch::kFloat) + 0.5) / kGrid;
  auto grid = torch::meshgrid({centres, centres}, "ij");  // (rows, cols)
  auto sizes = torch::tensor({0.15f, 0.25f, 0.4f}).expand({kGrid * kGrid, kPerCell});
  auto cx = grid[1].reshape({-1, 1}).expand({-1, kPerCell}), cy = grid[0].reshape({-1, 1}).expand({-1, kPerCell});
  return torch::stack({cx, cy, sizes, sizes}, -1).reshape({kAnchors, 4});
}
const torch::Tensor &default_anchors() {
  static const torch::Tensor anchors = make_anchors();
  return anchors;
}
torch::Tensor corners(const torch::Tensor &cxcywh) {
  auto half = cxcywh.slice(-1, 2, 4) / 2;
  return torch::cat({cxcywh.slice(-1, 0, 2) - half, cxcywh.slice(-1, 0, 2) + half}, -1);
}
torch::Tensor box_iou(const torch::Tensor &a, const torch::Tensor &b) {
  auto lt = torch::max(a.slice(1, 0, 2).unsqueeze(1), b.slice(1, 0, 2).unsqueeze(0));
  auto rb = torch::min(a.slice(1, 2, 4).unsqueeze(1), b.slice(1, 2, 4).unsqueeze(0));
  auto inter = (rb - lt).clamp_min(0).prod(-1);
  auto area = [](const torch::Tensor &t) { return (t.select(1, 2) - t.select(1, 0)) * (t.select(1, 3) - t.select(1, 1)); };
  return inter / (area(a).unsqueeze(1) + area(b).unsqueeze(0) - inter);
}

// Offsets of matched anchors -> corner boxes.
torch::Tensor decode(const torch::Tensor &offsets, const torch::Tensor &anchors) {
  auto centre = anchors.slice(-1, 0, 2) + offsets.slice(-1, 0, 2) * 0.1 * anchors.slice(-1, 2, 4);
  auto size = anchors.slice(-1, 2, 4) * torch::exp(offsets.slice(-1, 2, 4) * 0.2);
  return corners(torch::cat({centre, size}, -1));
}
// image: 3 x H x W bytes; boxes: M x 4 corners; labels: M
struct Sample { torch::Tensor image, boxes, labels; };

Sample synth_sample(std::mt19937 &rng) {
  std::uniform_real_distribution<float> pos(0.05f, 0.55f), extent(0.15f, 0.4f);
  std::uniform_int_distribution<int64_t> cls(1, kClasses - 1);
  auto image = torch::randint(0, 40, {3, kSide, kSide}, torch::kUInt8);
  std::vector<float> boxes;
  std::vector<int64_t> labels;
  for (int k = 0; k < 2; ++k) {
    const float x = pos(rng), y = pos(rng), s = extent(rng);
    boxes.insert(boxes.end(), {x, y, x + s, y + s});
    labels.push_back(cls(rng));
    auto px = [](float v) { return static_cast<int64_t>(v * kSide); };
    image.slice(1, px(y), px(y + s)).slice(2, px(x), px(x + s)).fill_(60 * labels.back());
  }
  return {image, torch::tensor(boxes).view({-1, 4}), torch::tensor(labels)};
}

std::vector<Sample> synth_batch(std::mt19937 &rng, int64_t n) {
  std::vector<Sample> out(static_cast<size_t>(n));
  for (auto &s : out) s = synth_sample(rng);
  return out;
}
// images: N x 3 x H x W bytes; cls_targets: N x A (0 = background); box_targets: N x A x 4
struct DetBatch { torch::Tensor images, cls_targets, box_targets; };

// Matches every anchor to its best ground-truth box and stacks the batch.
DetBatch collate(const std::vector<Sample> &samples) {
  const auto &anchors = default_anchors();
  // The image batch is the big one: filled in place rather than stacked.
  auto images = torch::empty({static_cast<int64_t>(samples.size()), 3, kSide, kSide}, torch::kUInt8);
  std::vector<torch::Tensor> cls, box;
  for (const auto &s : samples) {
    images[static_cast<int64_t>(cls.size())].copy_(s.image);
    // OK(torch-device-mismatch): matching runs on the host, where both the anchors and the boxes live.
    auto iou = box_iou(corners(anchors), s.boxes);
    auto best = iou.max(1);
    auto negative = std::get<0>(best) < 0.4;
    auto matched = s.boxes.index_select(0, std::get<1>(best));
    auto centre = (matched.slice(1, 0, 2) + matched.slice(1, 2, 4)) / 2;
    auto size = matched.slice(1, 2, 4) - matched.slice(1, 0, 2);
    auto offsets = torch::cat({(centre - anchors.slice(1, 0, 2)) / (0.1 * anchors.slice(1, 2, 4)),
                               torch::log(size / anchors.slice(1, 2, 4)) / 0.2}, 1);
    cls.push_back(s.labels.index_select(0, std::get<1>(best)).masked_fill(negative, 0));
    box.push_back(offsets.masked_fill(negative.unsqueeze(1), 0.0));
  }
  return {images, torch::stack(cls), torch::stack(box)};
}
// Greedy NMS of one image's top candidates on the host; returns the kept rows of the top-50.
std::vector<int64_t> nms(const torch::Tensor &boxes, const torch::Tensor &scores, double threshold) {
  auto top = boxes.index_select(0, std::get<1>(scores.topk(50)));
  auto iou = box_iou(top, top);
  auto iou_a = iou.accessor<float, 2>();
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < iou.size(0); ++i)
    if (std::none_of(keep.begin(), keep.end(), [&](int64_t k) { return iou_a[i][k] > threshold; })) keep.push_back(i);
  return keep;
}
class DevicePolicy {
 public:
  explicit DevicePolicy(torch::Device device) : device_(device) {}
  void place(nn::Module &module) const { module.to(device_); }
  torch::Tensor place(const torch::Tensor &t) const { return t.to(device_); }
  // Asynchronous upload; meant for pinned host buffers.
  torch::Tensor upload(const torch::Tensor &t) const { return t.to(device_, /*non_blocking=*/true); }
  torch::Device device() const { return device_; }
 private:
  torch::Device device_;
};
// Two pinned byte buffers, filled alternately so one can upload while the other is refilled.
class PinnedRing {
 public:
  explicit PinnedRing(int64_t batch) {
    for (auto &slot : slots_)
      slot = torch::empty({batch, 3, kSide, kSide}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  }
  torch::Tensor &fill(const torch::Tensor &bytes) {
    auto &slot = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    slot.copy_(bytes);
    return slot;
  }
 private:
  std::array<torch::Tensor, 2> slots_;
  size_t next_ = 0;
};

class DetTrainer {
 public:
  DetTrainer(SsdLite net, DevicePolicy policy, int64_t batch)
      : net_(std::move(net)), policy_(policy), ring_(batch), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {
    policy_.place(*net_);
  }

  void train_step(const std::vector<Sample> &samples) {
    net_->train();
    auto batch = collate(samples);
    // OK(torch-non-blocking-pageable): the ring's slots are pinned.
    auto images = policy_.upload(ring_.fill(batch.images)).to(torch::kFloat).div_(255.0);
    auto out = net_->forward(images);
    auto box_targets = policy_.place(batch.box_targets);
    auto positive = box_targets.abs().sum(-1) > 0;
    // BUG(torch-device-mismatch): collate() built the class targets on the host; only the box targets went through the policy.
    auto cls_loss = F::cross_entropy(out.first.reshape({-1, kClasses}), batch.cls_targets.reshape({-1}));
    auto loss = cls_loss + F::smooth_l1_loss(out.second.index({positive}), box_targets.index({positive}));
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    // OK(torch-host-sync-in-loop): read every 50th step only.
    if (++steps_ % 50 == 0) std::cout << "step " << steps_ << " loss " << loss.item<float>() << '\n';
  }

  // Anchor accuracy and mean offset error of the positive anchors.
  std::pair<double, double> validate(const std::vector<std::vector<Sample>> &val) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto opts = torch::TensorOptions().device(policy_.device());
    auto correct = torch::zeros({}, opts.dtype(torch::kLong)), box_err = torch::zeros({}, opts);
    int64_t anchors_seen = 0;
    for (const auto &samples : val) {
      auto batch = collate(samples);
      // BUG(torch-non-blocking-pageable): validation skips the pinned ring; collate() filled the images into a pageable torch::empty batch.
      auto images = policy_.upload(batch.images).to(torch::kFloat).div_(255.0);
      auto out = net_->forward(images);
      // OK(torch-device-mismatch): here the class targets are placed before the comparison.
      auto target = policy_.place(batch.cls_targets);
      correct += (out.first.argmax(-1) == target).sum();
      // BUG(torch-device-mismatch): default_anchors() hands out the host copy cached in its static; decode() adds it to offsets on the policy's device.
      auto pred_boxes = decode(out.second, default_anchors());
      auto gt_boxes = policy_.place(decode(batch.box_targets, default_anchors()));
      box_err += (pred_boxes - gt_boxes).abs().mean();
      anchors_seen += target.numel();
    }
    // OK(torch-host-sync-in-loop): read once per validation, after its loop.
    return {static_cast<double>(correct.item<int64_t>()) / static_cast<double>(anchors_seen),
            box_err.item<double>() / static_cast<double>(val.size())};
  }

  std::vector<std::vector<int64_t>> detect(const torch::Tensor &frames) {
    torch::NoGradGuard no_grad;
    net_->eval();
    // Normalised on the host to keep the GPU free for the previous batch.
    auto normalised = ring_.fill(frames).to(torch::kFloat).div_(255.0);
    // BUG(torch-non-blocking-pageable): the float copy is fresh pageable memory; only the ring's byte slots are pinned.
    auto images = policy_.upload(normalised);
    auto out = net_->forward(images);
    auto scores = torch::softmax(out.first, -1).slice(-1, 1).amax(-1);
    auto anchors = policy_.place(default_anchors());
    // OK(torch-device-mismatch): the cached anchors were placed first.
    auto boxes = decode(out.second, anchors);
    auto scores_host = scores.to(torch::kCPU, /*non_blocking=*/true);
    auto boxes_host = boxes.to(torch::kCPU, /*non_blocking=*/true);
    std::vector<std::vector<int64_t>> kept;
    for (int64_t i = 0; i < frames.size(0); ++i)
      // BUG(torch-non-blocking-d2h-race): nms() reads both host copies before anything waited for them.
      kept.push_back(nms(boxes_host[i], scores_host[i], 0.45));
    return kept;
  }

 private:
  SsdLite net_;
  DevicePolicy policy_;
  PinnedRing ring_;
  torch::optim::Adam opt_;
  int64_t steps_ = 0;
};
}  // namespace det

int main() {
  using namespace det;
  torch::manual_seed(400);
  std::mt19937 rng(400);
  if (!torch::cuda::is_available()) {
    std::cerr << "the detector trainer needs a GPU\n";
    return 1;
  }
  constexpr int64_t kBatch = 16;
  // OK(torch-cuda-unguarded): main returned above when CUDA is missing.
  DetTrainer trainer(SsdLite(), DevicePolicy(torch::Device(torch::kCUDA)), kBatch);

  std::vector<std::vector<Sample>> val;
  for (int i = 0; i < 4; ++i) val.push_back(synth_batch(rng, kBatch));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t step = 0; step < 100; ++step) trainer.train_step(synth_batch(rng, kBatch));
    auto [accuracy, box_err] = trainer.validate(val);
    std::cout << "epoch " << epoch << " anchor accuracy " << accuracy << " box error " << box_err << '\n';
  }
  std::vector<torch::Tensor> frames;
  for (const auto &s : synth_batch(rng, kBatch)) frames.push_back(s.image);
  auto kept = trainer.detect(torch::stack(frames));
  std::cout << "kept " << kept.front().size() << " boxes in the first frame\n";
  return 0;
}
