// A single-stage detector head over a feature pyramid: anchors generated
// once on the host, box regression and classification losses per level.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <tuple>
#include <vector>

struct AnchorConfig {
  static const torch::TensorOptions kOpts;
  int64_t levels = 3;
  int64_t anchors = 9;
  int64_t classes = 20;
  int64_t channels = 64;
};
const torch::TensorOptions AnchorConfig::kOpts = torch::TensorOptions().dtype(torch::kFloat);

struct HeadImpl : torch::nn::Module {
  HeadImpl(int64_t channels, int64_t anchors, int64_t classes)
      : box(register_module("box", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, anchors * 4, 3).padding(1)))),
        cls(register_module("cls", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, anchors * classes, 3).padding(1)))),
        anchors_(anchors), classes_(classes) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor features) {
    auto b = features.size(0);
    return {box(features).permute({0, 2, 3, 1}).reshape({b, -1, 4}),
            cls(features).permute({0, 2, 3, 1}).reshape({b, -1, classes_})};
  }
  torch::nn::Conv2d box, cls;
  int64_t anchors_, classes_;
};
TORCH_MODULE(Head);

// Sums the per-level losses; the caller runs backward() on the result.
std::tuple<torch::Tensor, torch::Tensor> detection_loss(const std::vector<torch::Tensor> &boxes,
                                                        const std::vector<torch::Tensor> &logits,
                                                        const std::vector<torch::Tensor> &box_targets,
                                                        const std::vector<torch::Tensor> &cls_targets) {
  auto box_loss = torch::zeros({}, boxes.front().options());
  auto cls_loss = torch::zeros({}, boxes.front().options());
  for (size_t l = 0; l < boxes.size(); ++l) {
    // OK(torch-loss-accumulation-graph): per-level terms of one loss,
    // returned in a tuple; no backward() in this loop.
    box_loss += torch::smooth_l1_loss(boxes[l], box_targets[l]);
    cls_loss += torch::binary_cross_entropy_with_logits(logits[l], cls_targets[l]);
  }
  return std::make_tuple(box_loss, cls_loss);
}

class Detector {
 public:
  Detector(const AnchorConfig &cfg, torch::Device device) : cfg_(cfg), device_(device), head_(cfg.channels, cfg.anchors, cfg.classes) {
    head_->to(device_);
    for (int64_t l = 0; l < cfg_.levels; ++l) {
      int64_t side = 32 >> l;
      anchors_.push_back(torch::rand({side * side * cfg_.anchors, 4}, AnchorConfig::kOpts));
    }
  }

  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor> &pyramid, std::vector<torch::Tensor> &logits) {
    std::vector<torch::Tensor> boxes;
    for (size_t l = 0; l < pyramid.size(); ++l) {
      // OK(torch-inference-without-no-grad): the outputs reach backward() in main().
      auto [deltas, scores] = head_->forward(pyramid[l]);
      logits.push_back(scores);
      // BUG(torch-device-mismatch): the deltas come from head_ on 'device',
      // the anchors were made on the host with AnchorConfig::kOpts.
      boxes.push_back(deltas + anchors_[l]);
    }
    return boxes;
  }

  torch::nn::Module &head() { return *head_; }

 private:
  AnchorConfig cfg_;
  torch::Device device_;
  Head head_;
  std::vector<torch::Tensor> anchors_;
};

// Runs one convolution so cuDNN picks its algorithms before the timing starts.
void warm_up_cudnn() {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3));
  // BUG(torch-cuda-unguarded): main() calls this before it checks
  // is_available(); a CPU-only machine crashes here.
  conv->to(torch::kCUDA);
  conv->forward(torch::randn({1, 3, 64, 64}).cuda());
}

int main() {
  warm_up_cudnn();
  AnchorConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Detector detector(cfg, device);
  torch::optim::SGD opt(detector.head().parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9));
  for (int step = 0; step < 100; ++step) {
    std::vector<torch::Tensor> pyramid, logits, box_t, cls_t;
    for (int64_t l = 0; l < cfg.levels; ++l) {
      int64_t side = 32 >> l;
      pyramid.push_back(torch::randn({2, cfg.channels, side, side}, device));
      box_t.push_back(torch::randn({2, side * side * cfg.anchors, 4}, device));
      cls_t.push_back(torch::rand({2, side * side * cfg.anchors, cfg.classes}, device));
    }
    auto boxes = detector.decode(pyramid, logits);
    auto [box_loss, cls_loss] = detection_loss(boxes, logits, box_t, cls_t);
    auto loss = box_loss + cls_loss;
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return 0;
}
