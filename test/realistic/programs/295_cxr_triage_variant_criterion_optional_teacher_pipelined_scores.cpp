// Chest X-ray triage: a small multi-label CNN over the 14 ChestX-ray14
// findings, trained with an asymmetric or a focal loss chosen at start-up and
// optionally distilled from a wider teacher pretrained on the public set.
// Validation applies per-finding temperature scaling. The triage service then
// ranks incoming studies so that suspected pneumothorax and effusion reach a
// radiologist first; score read-back is pipelined one study behind.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kFindings = 14, kSide = 128, kEffusion = 2, kPneumothorax = 7;

const torch::Device &runtime_device() {
  // OK(torch-cuda-unguarded): chosen once, under is_available().
  static const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  return device;
}

// One study as the PACS bridge hands it over: 8-bit pixels, one channel.
struct XrayStudy {
  std::string accession;
  torch::Tensor image;  // [1, side, side] uint8

  static XrayStudy from_pixels(const std::vector<uint8_t> &pixels, int64_t side, std::string accession) {
    auto image = torch::empty({1, side, side}, torch::kByte);
    std::memcpy(image.data_ptr<uint8_t>(), pixels.data(), pixels.size());
    return {std::move(accession), image};
  }
};

std::vector<uint8_t> fake_pixels(int64_t side, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(side * side));
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(seed) * 131) % 251);
  return px;
}

struct CxrBatch {
  torch::Tensor images;  // [B, 1, H, W] in [0, 1]
  torch::Tensor labels;  // [B, 14] 0/1
};

CxrBatch synth_batch(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return {torch::rand({n, 1, kSide, kSide}, gen), (torch::rand({n, kFindings}, gen) < 0.1).to(torch::kFloat)};
}

struct TriageNetImpl : nn::Module {
  explicit TriageNetImpl(int64_t w)
      : features(register_module(
            "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, w, 3).stride(2).padding(1)), nn::BatchNorm2d(w),
                                       nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(w, 2 * w, 3).stride(2).padding(1)),
                                       nn::BatchNorm2d(2 * w), nn::ReLU(), nn::AdaptiveAvgPool2d(1), nn::Flatten()))),
        drop(register_module("drop", nn::Dropout(0.25))),
        classifier(register_module("classifier", nn::Linear(2 * w, kFindings))) {}
  torch::Tensor forward(const torch::Tensor &x) { return classifier->forward(drop->forward(features->forward(x))); }
  nn::Sequential features;
  nn::Dropout drop;
  nn::Linear classifier;
};
TORCH_MODULE(TriageNet);

struct LossTerms {
  torch::Tensor total;        // scalar, what backward() sees
  torch::Tensor per_finding;  // [14], for the per-finding training curve
};

// Asymmetric loss (Ridnik et al.): down-weights easy negatives, which
// dominate a 14-label chest X-ray set.
struct AsymmetricLoss {
  double gamma_neg = 4.0, clip = 0.05;
  LossTerms operator()(const torch::Tensor &logits, const torch::Tensor &y) const {
    auto p = torch::sigmoid(logits);
    auto p_neg = (p - clip).clamp_min(0.0);
    auto pos = y * torch::log(p.clamp_min(1e-8));
    auto neg = (1 - y) * torch::pow(p_neg, gamma_neg) * torch::log((1 - p_neg).clamp_min(1e-8));
    auto per = -(pos + neg).mean(0);
    return {per.sum(), per};
  }
};

struct FocalLoss {
  double gamma = 2.0;
  LossTerms operator()(const torch::Tensor &logits, const torch::Tensor &y) const {
    auto bce = F::binary_cross_entropy_with_logits(logits, y,
                                                   F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
    auto per = (torch::pow(1 - torch::exp(-bce), gamma) * bce).mean(0);
    return {per.sum(), per};
  }
};

using Criterion = std::variant<AsymmetricLoss, FocalLoss>;

// Per-finding temperatures fitted on the calibration split.
template <int64_t N>
class TemperatureScaler {
 public:
  explicit TemperatureScaler(double t0) : temperature_(torch::full({N}, t0)) {}
  const torch::Tensor &temperature() const { return temperature_; }
  void set(int64_t finding, double t) { temperature_[finding].fill_(t); }

 private:
  torch::Tensor temperature_;
};

void pretrain(TriageNet &net, const std::vector<CxrBatch> &data, const torch::Device &device) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  net->train();
  for (const auto &b : data) {
    opt.zero_grad();
    auto logits = net->forward(b.images.to(device));
    F::binary_cross_entropy_with_logits(logits, b.labels.to(device)).backward();
    opt.step();
  }
}

class StudentTrainer {
 public:
  StudentTrainer(TriageNet net, Criterion criterion, torch::Device device)
      : net_(net), criterion_(criterion), opt_(net->parameters(), torch::optim::AdamWOptions(3e-4)), device_(device),
        scaler_(1.0) {
    scaler_.set(kPneumothorax, 1.6);
  }

  template <typename LogFn>
  void train_epoch(const std::vector<CxrBatch> &data, std::optional<TriageNet> &teacher, LogFn &&log_scalar) {
    net_->train();
    auto per_finding_sum = torch::zeros({kFindings}, torch::TensorOptions().device(device_));
    for (const auto &b : data) {
      auto x = b.images.to(device_);
      auto y = b.labels.to(device_);
      opt_.zero_grad();
      auto logits = net_->forward(x);
      auto terms = std::visit([&](const auto &crit) { return crit(logits, y); }, criterion_);
      torch::Tensor soft;
      if (teacher) {
        torch::NoGradGuard no_grad;
        // BUG(torch-eval-mode-missing): pretrain() left the teacher in
        // training mode; its dropout and batch norm run while it labels.
        soft = torch::sigmoid((*teacher)->forward(x));
      }
      auto loss = soft.defined() ? terms.total + 0.5 * F::mse_loss(torch::sigmoid(logits), soft) : terms.total;
      loss.backward();
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the per-finding terms from the
      // criterion are still attached to the step's graph.
      per_finding_sum += terms.per_finding;
      log_scalar("train/loss", loss);
    }
    // OK(torch-host-sync-in-loop): once per epoch, after the batch loop.
    auto mean = (per_finding_sum / static_cast<double>(data.size())).cpu();
    std::cout << "pneumothorax " << mean[kPneumothorax].item<float>() << " effusion " << mean[kEffusion].item<float>()
              << '\n';
  }

  double validate(const std::vector<CxrBatch> &data) {
    net_->eval();
    torch::NoGradGuard no_grad;
    double bce = 0.0;
    for (const auto &b : data) {
      auto logits = net_->forward(b.images.to(device_));
      // BUG(torch-device-mismatch): the temperatures were made on the host by
      // torch::full() in the scaler; the logits are on device_.
      auto calibrated = logits / scaler_.temperature();
      // OK(torch-host-sync-in-loop): validation trains nothing.
      bce += F::binary_cross_entropy_with_logits(calibrated, b.labels.to(device_)).item<double>();
    }
    return bce / static_cast<double>(data.size());
  }

 private:
  TriageNet net_;
  Criterion criterion_;
  torch::optim::AdamW opt_;
  torch::Device device_;
  TemperatureScaler<kFindings> scaler_;
};

struct PendingScores {
  std::string accession;
  torch::Tensor scores;  // [14] on the host, copy possibly in flight
};

int main(int argc, char **argv) {
  torch::manual_seed(295);
  const torch::Device device = runtime_device();
  const bool distill = argc > 1 && std::string(argv[1]) == "--distill";
  std::vector<CxrBatch> train, val, public_set;
  for (uint64_t i = 0; i < 50; ++i)
    train.push_back(synth_batch(32, i));
  for (uint64_t i = 0; i < 8; ++i)
    val.push_back(synth_batch(32, 500 + i));

  std::optional<TriageNet> teacher;
  if (distill) {
    for (uint64_t i = 0; i < 80; ++i)
      public_set.push_back(synth_batch(32, 1000 + i));
    teacher.emplace(64);
    (*teacher)->to(device);
    pretrain(*teacher, public_set, device);
  }

  TriageNet net(32);
  net->to(device);
  StudentTrainer trainer(net, distill ? Criterion{FocalLoss{}} : Criterion{AsymmetricLoss{}}, device);
  std::map<std::string, std::vector<float>> board;
  auto log_scalar = [&board](const std::string &tag, const auto &value) {
    // BUG(torch-host-sync-in-loop): the scalar board reads the loss on every step.
    board[tag].push_back(value.template item<float>());
  };
  for (int epoch = 0; epoch < 5; ++epoch) {
    trainer.train_epoch(train, teacher, log_scalar);
    std::cout << "epoch " << epoch << " val bce " << trainer.validate(val) << '\n';
  }

  // Triage: read back each study's scores while the next one is computed.
  net->eval();
  torch::NoGradGuard no_grad;
  std::optional<PendingScores> previous;
  std::vector<std::pair<float, std::string>> worklist;
  for (int i = 0; i < 6; ++i) {
    auto study = XrayStudy::from_pixels(fake_pixels(kSide, i), kSide, "ACC" + std::to_string(7000 + i));
    // BUG(torch-non-blocking-pageable): from_pixels() fills a plain
    // torch::empty(), pageable memory.
    auto x = study.image.to(device, torch::kFloat, /*non_blocking=*/true).div_(255.0).unsqueeze(0);
    auto probs = torch::sigmoid(net->forward(x)).squeeze(0);
    if (previous) {
      // BUG(torch-non-blocking-d2h-race): the previous study's copy was only
      // queued; nothing waited for it before the accessor reads it.
      auto s = previous->scores.accessor<float, 1>();
      worklist.emplace_back(std::max(s[kPneumothorax], s[kEffusion]), previous->accession);
    }
    previous = PendingScores{study.accession, probs.to(torch::kCPU, /*non_blocking=*/true)};
  }
  if (device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised after the last copy.
  auto last = previous->scores.accessor<float, 1>();
  worklist.emplace_back(std::max(last[kPneumothorax], last[kEffusion]), previous->accession);
  std::sort(worklist.rbegin(), worklist.rend());
  for (const auto &w : worklist)
    std::cout << w.second << " urgency " << w.first << '\n';
}
