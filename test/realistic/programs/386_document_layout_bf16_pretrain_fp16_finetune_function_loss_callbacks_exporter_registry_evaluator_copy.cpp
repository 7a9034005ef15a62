// Document layout analysis for a newspaper-archive digitisation pipeline: a
// small encoder with two decoders labels every pixel of a 1x128x96 page
// thumbnail as background / text / title / table / figure, or reconstructs
// the page. The backbone is pretrained on synthetic pages with a masked
// reconstruction objective in bfloat16; the segmentation head is then
// fine-tuned on annotated pages in float16. Each phase takes its loss as a
// std::function callback, so the recipes live in main(). Exporters are
// registered by name and write region masks for the archive viewer.
// LibTorch 1.13/2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace layout {

constexpr int64_t kClasses = 5, kH = 128, kW = 96;

namespace amp {
inline void begin(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
  at::autocast::set_autocast_gpu_dtype(dtype);
  at::autocast::set_enabled(true);
#endif
}
inline void end() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
  at::autocast::set_enabled(false);
#endif
}
}  // namespace amp

nn::Sequential upsampler(int64_t out_channels) {
  return nn::Sequential(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1)), nn::ReLU(),
                        nn::ConvTranspose2d(nn::ConvTranspose2dOptions(32, out_channels, 4).stride(2).padding(1)));
}

struct LayoutNetImpl : nn::Module {
  LayoutNetImpl()
      : encoder(register_module("encoder", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).stride(2).padding(1)), nn::BatchNorm2d(32),
                                                          nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)),
                                                          nn::BatchNorm2d(64), nn::ReLU()))),
        drop(register_module("drop", nn::Dropout2d(0.1))),
        seg_head(register_module("seg_head", upsampler(kClasses))),
        recon_head(register_module("recon_head", upsampler(1))) {}
  torch::Tensor features(const torch::Tensor& pages) { return drop->forward(encoder->forward(pages)); }
  torch::Tensor segment(const torch::Tensor& pages) { return seg_head->forward(features(pages)); }
  torch::Tensor reconstruct(const torch::Tensor& pages) { return torch::sigmoid(recon_head->forward(features(pages))); }
  nn::Sequential encoder;
  nn::Dropout2d drop;
  nn::Sequential seg_head, recon_head;
};
TORCH_MODULE(LayoutNet);

struct PageBatch {
  torch::Tensor pages;   // B x 1 x H x W, ink darkness in [0, 1]
  torch::Tensor labels;  // B x H x W, class per pixel
};

// Synthetic pages: a title band, text columns, and a table block.
std::vector<PageBatch> synth_pages(int64_t n, int64_t b, torch::Device device) {
  std::vector<PageBatch> out;
  for (int64_t i = 0; i < n; ++i) {
    auto labels = torch::zeros({b, kH, kW}, torch::TensorOptions().dtype(torch::kLong).device(device));
    labels.slice(1, 4, 16).fill_(2);
    labels.slice(1, 20, 90).slice(2, 4, 44).fill_(1);
    labels.slice(1, 20, 90).slice(2, 52, 92).fill_(1 + (i % 3));
    auto pages = (labels > 0).to(torch::kFloat).unsqueeze(1) * torch::rand({b, 1, kH, kW}, device);
    out.push_back({pages, labels});
  }
  return out;
}

using LossFn = std::function<torch::Tensor(PageBatch&)>;

// Stage 1: masked reconstruction pretrains the encoder.
double pretrain_backbone(LayoutNet& net, std::vector<PageBatch>& pages, const LossFn& loss_fn) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4));
  auto running = torch::zeros({}, pages.front().pages.options());
  for (auto& b : pages) {
    opt.zero_grad();
    amp::begin(at::kBFloat16);
    auto loss = loss_fn(b);
    amp::end();
    // OK(torch-autocast-region): a bfloat16 region, closed before backward(); bfloat16 needs no loss scale.
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph): detached before it joins the running sum.
    running += loss.detach();
  }
  return running.item<double>() / static_cast<double>(pages.size());
}

bool diverged(const torch::Tensor& loss) {
  // BUG(torch-host-sync-in-loop): HeadFinetuner::run() asks this on every step; the loss is read back from the device each time.
  return !std::isfinite(loss.item<double>());
}

// Stage 2: the segmentation head (and the encoder, at a lower rate) on annotated pages.
class HeadFinetuner {
 public:
  HeadFinetuner(LayoutNet net, LossFn loss_fn)
      : net_(std::move(net)), loss_fn_(std::move(loss_fn)),
        opt_({torch::optim::OptimizerParamGroup(net_->seg_head->parameters(), std::make_unique<torch::optim::AdamOptions>(1e-3)),
              torch::optim::OptimizerParamGroup(net_->encoder->parameters(), std::make_unique<torch::optim::AdamOptions>(1e-4))}) {}

  void run(std::vector<PageBatch>& pages, int epochs) {
    net_->train();
    for (int e = 0; e < epochs; ++e) {
      for (auto& b : pages) {
        net_->zero_grad();
        amp::begin(at::kHalf);
        auto loss = loss_fn_(b);
        amp::end();
        // BUG(torch-autocast-region): the callback's cross-entropy is a mean loss from a float16 region; it reaches backward() with no loss scale.
        loss.backward();
        if (diverged(loss)) throw std::runtime_error("layout fine-tune diverged");
        opt_.step();
      }
    }
  }

 private:
  LayoutNet net_;
  LossFn loss_fn_;
  torch::optim::Adam opt_;
};

// Per-class IoU on held-out pages; shares the trainer's module.
class LayoutEvaluator {
 public:
  explicit LayoutEvaluator(LayoutNet net) : net_(std::move(net)) {}
  double mean_iou(const std::vector<PageBatch>& val) {
    torch::NoGradGuard no_grad;
    std::vector<double> iou(kClasses, 0.0);
    for (const auto& b : val) {
      // BUG(torch-eval-mode-missing): the fine-tuner left the shared module in training mode; Dropout2d and BatchNorm2d are live.
      auto pred = net_->segment(b.pages).argmax(1);
      for (int64_t c = 0; c < kClasses; ++c) {
        auto p = pred == c, t = b.labels == c;
        iou[c] += ((p & t).sum().item<double>() + 1.0) / ((p | t).sum().item<double>() + 1.0);
      }
    }
    double sum = 0.0;
    for (double v : iou) sum += v / static_cast<double>(val.size());
    return sum / static_cast<double>(kClasses);
  }

 private:
  LayoutNet net_;
};

using Exporter = std::function<torch::Tensor(const torch::Tensor&)>;

std::map<std::string, Exporter> make_exporters(LayoutNet net) {
  std::map<std::string, Exporter> reg;
  reg["regions"] = [net](const torch::Tensor& page) mutable {
    // BUG(torch-inference-without-no-grad): export_archive() calls this per page with no guard; autograd records every forward.
    return net->segment(page).argmax(1).to(torch::kByte);
  };
  reg["tables"] = [net](const torch::Tensor& page) mutable {
    torch::NoGradGuard no_grad;
    // OK(torch-inference-without-no-grad, torch-eval-mode-missing): guarded here; main() called eval() before exporting.
    return (net->segment(page).argmax(1) == 3).to(torch::kByte);
  };
  return reg;
}

int64_t export_archive(std::map<std::string, Exporter>& exporters, const std::vector<PageBatch>& archive) {
  int64_t written = 0;
  for (const auto& b : archive)
    for (auto& [name, fn] : exporters) written += fn(b.pages).size(0);
  return written;
}

}  // namespace layout

int main() {
  using namespace layout;
  torch::manual_seed(386);
  // OK(torch-cuda-unguarded): guarded selection.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  LayoutNet net;
  net->to(device);

  auto synthetic = synth_pages(40, 16, device);
  const LossFn masked_recon = [net](PageBatch& b) mutable {
    auto keep = (torch::rand_like(b.pages) > 0.4).to(torch::kFloat);
    return torch::mse_loss(net->reconstruct(b.pages * keep), b.pages);
  };
  std::cout << "pretrain recon " << pretrain_backbone(net, synthetic, masked_recon) << '\n';

  auto annotated = synth_pages(24, 8, device);
  HeadFinetuner finetuner(net, [net](PageBatch& b) mutable {
    b.pages = (b.pages * (0.8 + 0.4 * torch::rand({b.pages.size(0), 1, 1, 1}, b.pages.options()))).clamp(0.0, 1.0);
    return F::cross_entropy(net->segment(b.pages), b.labels);
  });
  finetuner.run(annotated, 3);

  LayoutEvaluator evaluator(net);
  std::cout << "mean IoU " << evaluator.mean_iou(synth_pages(6, 8, device)) << '\n';

  net->eval();
  auto exporters = make_exporters(net);
  std::cout << "exported " << export_archive(exporters, synth_pages(10, 8, device)) << " masks\n";
  return 0;
}
