// Retinal vessel segmentation on fundus patches (DRIVE-like 64x64 crops of
// the green channel). Two small U-Nets are trained on the same patches and
// combined, with a classical vesselness filter, in an ensemble that averages
// probability maps through a virtual predict(). The better network is
// checkpointed, reloaded the way the export tool does it, and run over a
// full-size fundus image with a sliding window.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace retina {

constexpr int64_t kPatch = 64;

struct Patch {
  torch::Tensor image;  // [B, 1, 64, 64] green channel, normalised
  torch::Tensor mask;   // [B, 1, 64, 64] vessel annotation
};

// One thin curved vessel per patch, darker than the background.
std::vector<Patch> synth_patches(int batches, int64_t n, const torch::Device& device) {
  std::vector<Patch> out;
  auto ys = torch::linspace(-1, 1, kPatch).view({1, 1, kPatch, 1});
  auto xs = torch::linspace(-1, 1, kPatch).view({1, 1, 1, kPatch});
  for (int b = 0; b < batches; ++b) {
    auto offset = torch::rand({n, 1, 1, 1}) * 1.2 - 0.6;
    auto mask = (ys - offset - 0.3 * xs.pow(2)).abs().lt(0.05).to(torch::kFloat);
    auto image = 0.6 - 0.4 * mask + 0.05 * torch::randn({n, 1, kPatch, kPatch});
    out.push_back({image.to(device), mask.to(device)});
  }
  return out;
}

nn::Sequential double_conv(int64_t in, int64_t out) {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::BatchNorm2d(out), nn::ReLU(),
                        nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1)), nn::BatchNorm2d(out), nn::ReLU());
}

struct VesselUNetImpl : nn::Module {
  VesselUNetImpl(int64_t width, double p)
      : down1(register_module("down1", double_conv(1, width))),
        down2(register_module("down2", double_conv(width, 2 * width))),
        fuse(register_module("fuse", double_conv(2 * width, width))),
        up(register_module("up", nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2 * width, width, 2).stride(2)))),
        drop(register_module("drop", nn::Dropout(p))),
        head(register_module("head", nn::Conv2d(nn::Conv2dOptions(width, 1, 1)))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto s1 = down1->forward(x);
    auto s2 = drop->forward(down2->forward(F::max_pool2d(s1, F::MaxPool2dFuncOptions(2))));
    return head->forward(fuse->forward(torch::cat({up->forward(s2), s1}, 1)));
  }
  nn::Sequential down1, down2, fuse;
  nn::ConvTranspose2d up;
  nn::Dropout drop;
  nn::Conv2d head;
};
TORCH_MODULE(VesselUNet);

torch::Tensor soft_dice_loss(const torch::Tensor& prob, const torch::Tensor& mask) {
  auto inter = (prob * mask).sum({1, 2, 3});
  auto denom = prob.sum({1, 2, 3}) + mask.sum({1, 2, 3});
  return 1 - ((2 * inter + 1) / (denom + 1)).mean();
}

double dice_score(const torch::Tensor& prob, const torch::Tensor& mask) {
  return (1 - soft_dice_loss(prob.gt(0.5).to(torch::kFloat), mask)).item<double>();
}

}  // namespace retina

using retina::Patch;
using retina::VesselUNet;

struct EpochLog {
  torch::Tensor loss_sum;
  int64_t steps = 0;
};

void train_epoch(VesselUNet& net, torch::optim::Optimizer& opt, const std::vector<Patch>& data, EpochLog& log) {
  net->train();
  for (const auto& p : data) {
    opt.zero_grad();
    auto logits = net->forward(p.image);
    auto loss = F::binary_cross_entropy_with_logits(logits, p.mask) +
                retina::soft_dice_loss(torch::sigmoid(logits), p.mask);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the caller's log outlives the step and keeps every graph of the epoch.
    log.loss_sum += loss;
    ++log.steps;
  }
}

// Model selection between epochs; puts the network back into training afterwards.
double dice_on(VesselUNet& net, const std::vector<Patch>& data) {
  net->eval();
  double dice = 0.0;
  for (const auto& p : data) {
    // OK(torch-eval-mode-missing): eval() above.
    // BUG(torch-inference-without-no-grad): eval() does not stop autograd; every U-Net activation is kept.
    auto prob = torch::sigmoid(net->forward(p.image));
    dice += retina::dice_score(prob, p.mask);
  }
  net->train();
  return dice / static_cast<double>(data.size());
}

class Segmenter {
 public:
  virtual ~Segmenter() = default;
  virtual std::string name() const = 0;
  virtual void freeze() = 0;  // no more updates, inference behaviour
  virtual torch::Tensor predict(const torch::Tensor& image) = 0;
};

class UNetMember : public Segmenter {
 public:
  UNetMember(std::string name, VesselUNet net) : name_(std::move(name)), net_(std::move(net)) {}
  std::string name() const override { return name_; }
  void freeze() override {
    net_->eval();
    for (auto& p : net_->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor predict(const torch::Tensor& image) override {
    // OK(torch-eval-mode-missing): freeze() switched this member to eval().
    return torch::sigmoid(net_->forward(image));
  }

 private:
  std::string name_;
  VesselUNet net_;
};

// Test-time augmentation: average with the horizontally mirrored patch.
class FlipTtaMember : public Segmenter {
 public:
  FlipTtaMember(std::string name, VesselUNet net) : name_(std::move(name)), net_(std::move(net)) {}
  std::string name() const override { return name_ + "+flip"; }
  void freeze() override {
    for (auto& p : net_->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor predict(const torch::Tensor& image) override {
    // BUG(torch-eval-mode-missing): freeze() only stops the gradients; the trained net_ keeps dropout and batch statistics on.
    auto avg = 0.5 * (net_->forward(image) + net_->forward(image.flip({3})).flip({3}));
    return torch::sigmoid(avg);
  }

 private:
  std::string name_;
  VesselUNet net_;
};

// Dark ridges relative to the local background; no parameters.
class VesselnessMember : public Segmenter {
 public:
  std::string name() const override { return "vesselness"; }
  void freeze() override {}  // nothing to freeze
  torch::Tensor predict(const torch::Tensor& image) override {
    auto background = F::avg_pool2d(image, F::AvgPool2dFuncOptions(9).stride(1).padding(4));
    return torch::sigmoid((background - image - 0.1) * 40.0);
  }
};

class Ensemble {
 public:
  void add(std::shared_ptr<Segmenter> member, double weight) {
    members_.push_back(std::move(member));
    weights_.push_back(weight);
  }
  void freeze_all() { for (auto& m : members_) m->freeze(); }
  torch::Tensor predict(const torch::Tensor& image) {
    auto acc = torch::zeros_like(image);
    double total = 0.0;
    for (size_t i = 0; i < members_.size(); ++i) {
      // OK(torch-loss-accumulation-graph): a local sum that is returned; the caller holds a no-grad guard.
      acc = acc + weights_[i] * members_[i]->predict(image);
      total += weights_[i];
    }
    return acc / total;
  }

 private:
  std::vector<std::shared_ptr<Segmenter>> members_;
  std::vector<double> weights_;
};

// Rebuilds the network the way the export tool does and loads the weights.
VesselUNet restore(int64_t width, double p, const std::string& path, const torch::Device& device) {
  VesselUNet net(width, p);
  torch::load(net, path);
  net->to(device);
  return net;
}

// Tiles a full-size fundus image [1, 1, H, W] into non-overlapping patches.
template <typename Model>
torch::Tensor sliding_window(Model& net, const torch::Tensor& fundus) {
  auto out = torch::zeros_like(fundus);
  const int64_t h = fundus.size(2), w = fundus.size(3);
  for (int64_t y = 0; y + retina::kPatch <= h; y += retina::kPatch)
    for (int64_t x = 0; x + retina::kPatch <= w; x += retina::kPatch) {
      auto tile = fundus.narrow(2, y, retina::kPatch).narrow(3, x, retina::kPatch);
      // BUG(torch-eval-mode-missing): restore() hands back a freshly built module, in training mode; torch::load keeps it so.
      // OK(torch-inference-without-no-grad): the caller holds a NoGradGuard.
      auto prob = torch::sigmoid(net->forward(tile));
      out.narrow(2, y, retina::kPatch).narrow(3, x, retina::kPatch).copy_(prob);
    }
  return out;
}

int main() {
  torch::manual_seed(332);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto train = retina::synth_patches(30, 16, device), val = retina::synth_patches(4, 32, device),
       test = retina::synth_patches(4, 32, device);

  VesselUNet net_a(16, 0.2), net_b(24, 0.3);
  for (auto* net : {&net_a, &net_b}) (*net)->to(device);
  torch::optim::Adam opt_a(net_a->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::Adam opt_b(net_b->parameters(), torch::optim::AdamOptions(1e-3));
  double dice_a = 0.0, dice_b = 0.0;
  for (int epoch = 0; epoch < 6; ++epoch) {
    EpochLog log_a{torch::zeros({}, device)}, log_b{torch::zeros({}, device)};
    train_epoch(net_a, opt_a, train, log_a);
    train_epoch(net_b, opt_b, train, log_b);
    dice_a = dice_on(net_a, val);
    dice_b = dice_on(net_b, val);
    std::cout << "epoch " << epoch << " loss " << log_a.loss_sum.item<double>() / log_a.steps << " / "
              << log_b.loss_sum.item<double>() / log_b.steps << " dice " << dice_a << " / " << dice_b << '\n';
  }

  Ensemble ensemble;
  ensemble.add(std::make_shared<UNetMember>("unet16", net_a), 0.4);
  ensemble.add(std::make_shared<FlipTtaMember>("unet24", net_b), 0.4);
  ensemble.add(std::make_shared<VesselnessMember>(), 0.2);
  {
    torch::NoGradGuard no_grad;
    ensemble.freeze_all();
    double dice = 0.0;
    for (const auto& p : test) dice += retina::dice_score(ensemble.predict(p.image), p.mask);
    std::cout << "ensemble test dice " << dice / static_cast<double>(test.size()) << '\n';
  }

  // The network of the two with the better validation Dice goes to the export tool.
  const bool a_wins = dice_a >= dice_b;
  torch::save(a_wins ? net_a : net_b, "vessel_unet.pt");
  VesselUNet exported = restore(a_wins ? 16 : 24, a_wins ? 0.2 : 0.3, "vessel_unet.pt", device);
  torch::NoGradGuard no_grad;
  auto fundus = 0.6 + 0.05 * torch::randn({1, 1, 512, 512}, device);
  auto map = sliding_window(exported, fundus);
  std::cout << "vessel pixels in the fundus image: " << map.gt(0.5).sum().item<int64_t>() << '\n';
}
