// Floor-plan segmentation for a property-listing site: scanned 64x64
// plan crops are labelled per pixel as background, wall, door, window or
// room interior. The encoder is pretrained on another corpus; training
// first warms up the decoder head alone on frozen encoder features, then
// fine-tunes the whole network. The loss helper returns the cross-entropy
// and a wall-boundary term as a tuple, unpacked with structured bindings.
// Usage: floorplan_seg [device]   (default "cuda", the render farm's GPUs)
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kSide = 64, kClasses = 5;
enum Label : int64_t { kBackground = 0, kWall = 1, kDoor = 2, kWindow = 3, kRoom = 4 };

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : net(register_module(
            "net", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)),
                                         torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                         torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(2).dilation(2)),
                                         torch::nn::BatchNorm2d(64), torch::nn::ReLU()))) {}
  torch::Tensor forward(const torch::Tensor &x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Encoder);

struct DecoderImpl : torch::nn::Module {
  DecoderImpl()
      : net(register_module(
            "net", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3).padding(1)),
                                         torch::nn::ReLU(), torch::nn::Dropout2d(0.1),
                                         torch::nn::Conv2d(torch::nn::Conv2dOptions(64, kClasses, 1))))) {}
  torch::Tensor forward(const torch::Tensor &f) { return net->forward(f); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Decoder);

struct Plan {
  torch::Tensor image, labels;
};

// Two walls each way, a door gap in each inner wall, windows on the outline.
std::vector<Plan> synth_plans(int64_t count, int64_t batch, uint32_t seed, torch::Device device) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pos(16, kSide - 16);
  std::vector<Plan> plans;
  for (int64_t i = 0; i < count; ++i) {
    auto labels = torch::full({batch, kSide, kSide}, static_cast<int64_t>(kRoom), torch::kLong);
    for (int64_t b = 0; b < batch; ++b) {
      auto l = labels[b];
      l.slice(0, 0, 4).fill_(kBackground);
      l.slice(1, 0, 4).fill_(kBackground);
      l.select(0, 4).fill_(kWall);
      l.select(1, 4).fill_(kWall);
      l.select(0, 4).slice(0, 20, 30).fill_(kWindow);
      const int64_t x = pos(rng), y = pos(rng);
      l.select(1, x).slice(0, 4).fill_(kWall);
      l.select(0, y).slice(0, 4).fill_(kWall);
      l.select(1, x).slice(0, y + 4, y + 10).fill_(kDoor);
      l.select(0, y).slice(0, x + 4, x + 10).fill_(kDoor);
    }
    auto ink = (labels == kWall).to(torch::kFloat) + 0.5 * (labels == kWindow).to(torch::kFloat);
    auto image = (ink + 0.15 * torch::randn({batch, kSide, kSide})).unsqueeze(1);
    plans.push_back({image.to(device), labels.to(device)});
  }
  return plans;
}

// Cross-entropy, and a term that weighs the pixels next to walls.
std::tuple<torch::Tensor, torch::Tensor> seg_losses(const torch::Tensor &logits, const torch::Tensor &labels) {
  auto ce = F::cross_entropy(logits, labels);
  auto walls = (labels == kWall).to(torch::kFloat).unsqueeze(1);
  auto near_wall = F::max_pool2d(walls, F::MaxPool2dFuncOptions(5).stride(1).padding(2)).squeeze(1);
  auto per_pixel = F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto boundary = (per_pixel * near_wall).sum() / near_wall.sum().clamp_min(1.0);
  return {ce, boundary};
}

class SegTrainer {
 public:
  SegTrainer(Encoder enc, Decoder dec)
      : enc_(std::move(enc)), dec_(std::move(dec)),
        head_opt_(dec_->parameters(), torch::optim::AdamOptions(1e-3)),
        full_opt_({torch::optim::OptimizerParamGroup(enc_->parameters()),
                   torch::optim::OptimizerParamGroup(dec_->parameters())},
                  torch::optim::AdamOptions(2e-4)) {}

  void run(const std::vector<Plan> &plans, int64_t warmup_epochs, int64_t epochs) {
    enc_->eval();
    dec_->train();
    for (int64_t e = 0; e < warmup_epochs; ++e)
      for (const auto &plan : plans)
        warmup_batch(plan);
    enc_->train();
    full_opt_.zero_grad();
    for (int64_t e = 0; e < epochs; ++e) {
      for (const auto &plan : plans)
        train_batch(plan);
      std::cout << "epoch " << e << " ce " << torch::stack(epoch_ce_).mean().item<double>() << '\n';
      epoch_ce_.clear();
    }
  }

  size_t logged_boundaries() const { return boundary_log_.size(); }

 private:
  // The encoder is frozen (eval mode, no graph); only the head learns.
  void warmup_batch(const Plan &plan) {
    torch::Tensor feats;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): run() puts the encoder in eval() first.
      feats = enc_->forward(plan.image);
    }
    auto [ce, boundary] = seg_losses(dec_->forward(feats), plan.labels);
    (ce + 0.5 * boundary).backward();
    // BUG(torch-missing-zero-grad): the warm-up never resets the head's
    // gradients; every step applies the sum of all earlier batches'.
    head_opt_.step();
  }

  void train_batch(const Plan &plan) {
    auto [ce, boundary] = seg_losses(dec_->forward(enc_->forward(plan.image)), plan.labels);
    (ce + 0.5 * boundary).backward();
    // OK(torch-missing-zero-grad): reset right after every step.
    full_opt_.step();
    full_opt_.zero_grad();
    // OK(torch-loss-accumulation-graph): the epoch mean takes detached values.
    epoch_ce_.push_back(ce.detach());
    // BUG(torch-loss-accumulation-graph): the boundary term is logged with
    // its graph; every batch's activations stay alive for the whole run.
    boundary_log_.push_back(boundary);
  }

  Encoder enc_;
  Decoder dec_;
  torch::optim::Adam head_opt_;
  torch::optim::Adam full_opt_;
  std::vector<torch::Tensor> epoch_ce_;
  std::vector<torch::Tensor> boundary_log_;
};

// Intersection over union per class on held-out plans.
std::vector<double> class_iou(Encoder &enc, Decoder &dec, const std::vector<Plan> &plans) {
  torch::NoGradGuard no_grad;
  enc->eval();
  dec->eval();
  std::vector<double> inter(kClasses, 0.0), uni(kClasses, 0.0);
  for (const auto &plan : plans) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and the guard above.
    auto pred = dec->forward(enc->forward(plan.image)).argmax(1);
    for (int64_t c = 0; c < kClasses; ++c) {
      auto p = pred == c, t = plan.labels == c;
      inter[c] += (p & t).sum().item<double>();
      uni[c] += (p | t).sum().item<double>();
    }
  }
  std::vector<double> iou;
  for (int64_t c = 0; c < kClasses; ++c)
    iou.push_back(uni[c] > 0 ? inter[c] / uni[c] : 0.0);
  return iou;
}

int main(int argc, char **argv) {
  torch::manual_seed(230);
  // BUG(torch-cuda-unguarded): defaults to CUDA with no availability check;
  // the listing team's CPU-only laptops crash at the first upload.
  torch::Device device(argc > 1 ? argv[1] : "cuda");
  Encoder enc;
  Decoder dec;
  enc->to(device);
  dec->to(device);
  auto train = synth_plans(60, 8, 1, device);
  auto val = synth_plans(8, 16, 2, device);

  SegTrainer trainer(enc, dec);
  trainer.run(train, 2, 6);
  std::cout << "boundary terms logged: " << trainer.logged_boundaries() << '\n';

  const char *names[kClasses] = {"background", "wall", "door", "window", "room"};
  auto iou = class_iou(enc, dec, val);
  for (int64_t c = 0; c < kClasses; ++c)
    std::cout << names[c] << " IoU " << iou[c] << '\n';
}
