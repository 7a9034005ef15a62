// Fast neural style transfer for a photo-editing app (Johnson et al.): an
// instance-norm transform net trained against a frozen VGG-like loss net
// (content at stage 3, Gram style at all four), refined on a client's
// photos, distilled into a BatchNorm phone model. Optimizers come from a
// registry keyed by the config's names. LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kSize = 128;

nn::InstanceNorm2d inorm(int64_t c) { return nn::InstanceNorm2d(nn::InstanceNorm2dOptions(c).affine(true)); }

struct TransformNetImpl : nn::Module {
  TransformNetImpl()
      : body(register_module("body", nn::Sequential(
                 nn::Conv2d(nn::Conv2dOptions(3, 32, 9).padding(4)), inorm(32), nn::ReLU(),
                 nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)), inorm(64), nn::ReLU(),
                 nn::Upsample(nn::UpsampleOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kNearest)),
                 nn::Conv2d(nn::Conv2dOptions(64, 32, 3).padding(1)), inorm(32), nn::ReLU(),
                 nn::Conv2d(nn::Conv2dOptions(32, 3, 9).padding(4))))) {}
  torch::Tensor forward(const torch::Tensor& photo) { return torch::sigmoid(body->forward(photo)); }
  nn::Sequential body;
};
TORCH_MODULE(TransformNet);

// The phone model: depthwise-separable convs with batch norm.
struct MobileStylizerImpl : nn::Module {
  MobileStylizerImpl()
      : body(register_module("body", nn::Sequential(
                 nn::Conv2d(nn::Conv2dOptions(3, 16, 3).padding(1)), nn::BatchNorm2d(16), nn::ReLU(),
                 nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1).groups(16)), nn::Conv2d(16, 32, 1), nn::BatchNorm2d(32), nn::ReLU(),
                 nn::Conv2d(nn::Conv2dOptions(32, 3, 3).padding(1))))) {}
  torch::Tensor forward(const torch::Tensor& photo) { return torch::sigmoid(body->forward(photo)); }
  nn::Sequential body;
};
TORCH_MODULE(MobileStylizer);

struct LossNetImpl : nn::Module {
  LossNetImpl() {
    const int64_t widths[] = {3, 32, 64, 128, 128};
    for (int s = 0; s < 4; ++s)
      stages.push_back(register_module("stage" + std::to_string(s), nn::Sequential(
          nn::Conv2d(nn::Conv2dOptions(widths[s], widths[s + 1], 3).stride(s == 0 ? 1 : 2).padding(1)), nn::ReLU())));
    for (auto& p : parameters()) p.requires_grad_(false);
  }
  std::vector<torch::Tensor> forward(torch::Tensor x) {
    std::vector<torch::Tensor> feats;
    for (auto& stage : stages) feats.push_back(x = stage->forward(x));
    return feats;
  }
  std::vector<nn::Sequential> stages;
};
TORCH_MODULE(LossNet);

torch::Tensor gram(const torch::Tensor& f) {
  auto flat = f.flatten(2);
  return torch::bmm(flat, flat.transpose(1, 2)) / static_cast<double>(flat.size(1) * flat.size(2));
}

class PerceptualLoss {
 public:
  struct Terms { torch::Tensor content, style, total; };
  PerceptualLoss(LossNet net, const torch::Tensor& style_image, double content_w, double style_w)
      : net_(std::move(net)), content_w_(content_w), style_w_(style_w) {
    torch::NoGradGuard no_grad;
    for (const auto& f : net_->forward(style_image)) style_grams_.push_back(gram(f));
    for (auto& t : layer_style_) t = torch::zeros({}, style_image.device());
  }
  Terms operator()(const torch::Tensor& stylized, const torch::Tensor& photo) {
    auto fs = net_->forward(stylized);
    torch::Tensor fc;
    {
      torch::NoGradGuard no_grad;
      fc = net_->forward(photo)[2];
    }
    std::vector<torch::Tensor> terms;
    for (size_t l = 0; l < fs.size(); ++l) {
      auto g = gram(fs[l]);
      auto term = F::mse_loss(g, style_grams_[l].expand_as(g));
      // BUG(torch-loss-accumulation-graph): the per-layer diagnostics are
      // members; every training step's style graph stays chained in them.
      layer_style_[l] += term;
      // OK(torch-loss-accumulation-graph): collected to be summed and returned.
      terms.push_back(term);
    }
    auto content = F::mse_loss(fs[2], fc);
    auto style = torch::stack(terms).sum();
    return {content, style, content_w_ * content + style_w_ * style};
  }
  void reset_diagnostics() { for (auto& t : layer_style_) t = torch::zeros({}, t.device()); }

 private:
  LossNet net_;
  double content_w_, style_w_;
  std::vector<torch::Tensor> style_grams_;
  std::array<torch::Tensor, 4> layer_style_;
};

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>, double)>;

const std::map<std::string, OptimizerFactory>& optimizer_registry() {
  static const std::map<std::string, OptimizerFactory> registry = {
      {"adam", [](std::vector<torch::Tensor> p, double lr) -> std::unique_ptr<torch::optim::Optimizer> {
         return std::make_unique<torch::optim::Adam>(std::move(p), torch::optim::AdamOptions(lr));
       }},
      {"sgd", [](std::vector<torch::Tensor> p, double lr) -> std::unique_ptr<torch::optim::Optimizer> {
         return std::make_unique<torch::optim::SGD>(std::move(p), torch::optim::SGDOptions(lr).momentum(0.9));
       }}};
  return registry;
}

struct StyleConfig {
  std::string optimizer = "adam", student_optimizer = "sgd";
  double lr = 1e-3, student_lr = 1e-2;
  int64_t accum_steps = 4;  // student micro-batches per update
  int64_t preview_every = 10;
};

struct RunningLoss {
  torch::Tensor content, style;
  int64_t steps = 0;
};

class StyleTrainer {
 public:
  StyleTrainer(TransformNet net, PerceptualLoss& criterion, const StyleConfig& cfg)
      : net_(std::move(net)), criterion_(criterion), opt_(optimizer_registry().at(cfg.optimizer)(net_->parameters(), cfg.lr)) {}

  void fit(const std::vector<torch::Tensor>& photos, int epochs) {
    net_->train();
    for (int e = 0; e < epochs; ++e) {
      running_ = std::make_unique<RunningLoss>();
      running_->content = torch::zeros({}, photos.front().options());
      running_->style = torch::zeros({}, photos.front().options());
      criterion_.reset_diagnostics();
      double last = 0.0;
      for (const auto& batch : photos) last = train_step(batch);
      // OK(torch-host-sync-in-loop): once per epoch.
      std::cout << "epoch " << e << " last " << last << " mean style "
                << (running_->style / static_cast<double>(running_->steps)).item<double>() << '\n';
    }
  }

 private:
  void clear_grads() {
    auto params = net_->parameters();
    std::for_each(params.begin(), params.end(), [](torch::Tensor& p) { p.mutable_grad() = torch::Tensor(); });
  }

  double train_step(const torch::Tensor& photos) {
    clear_grads();
    auto terms = criterion_(net_->forward(photos), photos);
    terms.total.backward();
    // OK(torch-missing-zero-grad): clear_grads() reset every gradient.
    opt_->step();
    // OK(torch-loss-accumulation-graph): detached.
    running_->content += terms.content.detach();
    // BUG(torch-loss-accumulation-graph): running_ lives for the epoch and
    // the style term is still on the step's graph.
    running_->style += terms.style;
    ++running_->steps;
    // BUG(torch-host-sync-in-loop): on every batch of fit(), loss on `device`.
    return terms.total.item<double>();
  }

  TransformNet net_;
  PerceptualLoss& criterion_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  std::unique_ptr<RunningLoss> running_;
};

// A client's own photos, with a preview of every tenth one.
void refine_on_client(TransformNet& net, PerceptualLoss& criterion, const std::vector<torch::Tensor>& photos,
                      std::vector<torch::Tensor>& previews, int64_t preview_every) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-4));
  opt.zero_grad();
  for (size_t i = 0; i < photos.size(); ++i) {
    auto stylized = net->forward(photos[i]);
    criterion(stylized, photos[i]).total.backward();
    // BUG(torch-missing-zero-grad): the reset sits after the preview's
    // early continue; nine photos in ten step with stale gradients.
    opt.step();
    if (static_cast<int64_t>(i + 1) % preview_every != 0) continue;
    // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): detached, conditional.
    previews.push_back(stylized.detach().cpu());
    opt.zero_grad();
  }
}

void distill_to_mobile(TransformNet& teacher, MobileStylizer& student, const std::vector<torch::Tensor>& photos, const StyleConfig& cfg) {
  student->train();
  auto opt = optimizer_registry().at(cfg.student_optimizer)(student->parameters(), cfg.student_lr);
  opt->zero_grad();
  int64_t micro = 0;
  for (const auto& p : photos) {
    torch::Tensor target;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): the teacher's instance norms keep no
      // running statistics; its mode changes nothing.
      target = teacher->forward(p);
    }
    auto loss = F::mse_loss(student->forward(p), target);
    // BUG(torch-grad-accumulation-unscaled): cfg.accum_steps micro-batches
    // per step and the mean loss is not divided.
    loss.backward();
    if (++micro % cfg.accum_steps == 0) {
      opt->step();
      opt->zero_grad();
    }
  }
}

double student_fidelity(TransformNet& teacher, MobileStylizer& student, const std::vector<torch::Tensor>& photos) {
  torch::NoGradGuard no_grad;
  student->eval();
  double total = 0.0;
  // OK(torch-eval-mode-missing): the student is in eval(); the teacher's
  // instance norms keep no running statistics.
  for (const auto& p : photos) total += F::l1_loss(student->forward(p), teacher->forward(p)).item<double>();
  return total / static_cast<double>(photos.size());
}

int main() {
  torch::manual_seed(375);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  TransformNet net;
  MobileStylizer student;
  LossNet loss_net;
  net->to(device);
  student->to(device);
  loss_net->to(device);

  std::vector<torch::Tensor> photos, client, previews;
  for (int i = 0; i < 40; ++i) photos.push_back(torch::rand({4, 3, kSize, kSize}, device));
  for (int i = 0; i < 30; ++i) client.push_back(torch::rand({1, 3, kSize, kSize}, device));
  auto style_image = torch::rand({1, 3, kSize, kSize}, device);

  StyleConfig cfg;
  PerceptualLoss criterion(loss_net, style_image, 1.0, 1e5);
  StyleTrainer trainer(net, criterion, cfg);
  trainer.fit(photos, 2);
  refine_on_client(net, criterion, client, previews, cfg.preview_every);
  distill_to_mobile(net, student, photos, cfg);
  std::cout << previews.size() << " previews, student L1 to teacher " << student_fidelity(net, student, client) << '\n';
}
