// Protein contact-map prediction: pairwise MSA features (coevolution,
// one-hot pairs, separation) of shape [16, L, L] go through a 2-D residual
// network; each residue pair gets a contact logit (C-beta closer than 8 A).
// Training samples 64x64 crops per protein and steps once per protein. The
// general model is snapshotted for the CASP targets, then refined on one
// protein family, and a Platt calibrator is fitted on the test logits.
#include <torch/torch.h>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kPair = 16, kCrop = 64, kMinSep = 6;

struct NetConfig { int64_t channels = 48; int depth = 4; double dropout = 0.1; };

struct ResBlockImpl : nn::Module {
  ResBlockImpl(int64_t ch, double p)
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(ch, ch, 3).padding(1)))),
        conv2(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(ch, ch, 3).padding(2).dilation(2)))),
        bn1(register_module("bn1", nn::BatchNorm2d(ch))), bn2(register_module("bn2", nn::BatchNorm2d(ch))),
        drop(register_module("drop", nn::Dropout2d(p))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = drop(torch::elu(bn1(conv1(x))));
    return torch::elu(x + bn2(conv2(h)));
  }
  nn::Conv2d conv1, conv2; nn::BatchNorm2d bn1, bn2; nn::Dropout2d drop;
};
TORCH_MODULE(ResBlock);

struct ContactNetImpl : nn::Module {
  explicit ContactNetImpl(const NetConfig& cfg)
      : stem(register_module("stem", nn::Conv2d(nn::Conv2dOptions(kPair, cfg.channels, 1)))),
        stem_bn(register_module("stem_bn", nn::BatchNorm2d(cfg.channels))),
        blocks(register_module("blocks", nn::Sequential())),
        head(register_module("head", nn::Conv2d(nn::Conv2dOptions(cfg.channels, 1, 1)))) {
    for (int i = 0; i < cfg.depth; ++i) blocks->push_back(ResBlock(cfg.channels, cfg.dropout));
    feat_scale = register_buffer("feat_scale", torch::full({kPair, 1, 1}, 0.5));
  }
  torch::Tensor forward(const torch::Tensor& x) {  // [B, 16, L, L] -> [B, L, L]
    // OK(torch-device-mismatch): feat_scale is a registered buffer; it moved with the module.
    auto h = torch::elu(stem_bn(stem(x * feat_scale)));
    auto logits = head(blocks->forward(h)).squeeze(1);
    return 0.5 * (logits + logits.transpose(1, 2));
  }
  nn::Conv2d stem; nn::BatchNorm2d stem_bn; nn::Sequential blocks;
  nn::Conv2d head; torch::Tensor feat_scale;
};
TORCH_MODULE(ContactNet);

struct Protein {
  torch::Tensor features, contacts, mask;  // [16, L, L], [L, L] float, [L, L] float (|i - j| >= 6)
};

Protein synth_protein(int64_t len, const torch::Device& device) {
  auto coords = torch::randn({len, 3}).cumsum(0) * 1.2;
  auto idx = torch::arange(len);
  auto sep = (idx.unsqueeze(0) - idx.unsqueeze(1)).abs();
  return {torch::randn({kPair, len, len}).to(device), (torch::cdist(coords, coords) < 8.0).to(torch::kFloat).to(device),
          (sep >= kMinSep).to(torch::kFloat).to(device)};
}

torch::Tensor contact_loss(const torch::Tensor& logits, const torch::Tensor& contacts, const torch::Tensor& mask) {
  // OK(torch-device-mismatch): pos_weight takes the logits' options, hence their device.
  auto pos_weight = torch::full({1}, 8.0, logits.options());
  return F::binary_cross_entropy_with_logits(
      logits, contacts, F::BinaryCrossEntropyWithLogitsFuncOptions().weight(mask).pos_weight(pos_weight));
}

double top_l_precision(const torch::Tensor& logits, const torch::Tensor& contacts, const torch::Tensor& mask) {
  auto len = logits.size(-1);
  auto scores = (logits.triu(kMinSep) - 1e4 * (1 - mask.triu(kMinSep))).flatten();
  auto top = std::get<1>(scores.topk(len));
  return contacts.flatten().index_select(0, top).mean().item<double>();
}

class Learner {
 public:
  virtual ~Learner() = default;
  void fit(int epochs) {
    for (int e = 0; e < epochs; ++e) {
      on_train_start();
      double loss = train_epoch();
      on_validation_start();
      std::cout << "epoch " << e << " loss " << loss << " top-L " << validate() << '\n';
    }
  }
 protected:
  virtual void on_train_start() {}
  virtual void on_validation_start() {}
  virtual double train_epoch() = 0;
  virtual double validate() = 0;
};

struct EpochStats {
  torch::Tensor total;
  int64_t crops = 0;
};

class ContactLearner : public Learner {
 public:
  ContactLearner(const NetConfig& cfg, std::vector<Protein> train, std::vector<Protein> val, torch::Device device)
      : model_(cfg), opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)), train_(std::move(train)),
        val_(std::move(val)), device_(device) {
    model_->to(device_);
  }
  ContactNet& model() { return model_; }
  double evaluate_test(const std::vector<Protein>& test) {
    model_->eval();
    torch::NoGradGuard no_grad;
    double sum = 0.0;
    test_logits_.clear();
    test_labels_.clear();
    for (const auto& p : test) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
      auto logits = model_->forward(p.features.unsqueeze(0)).squeeze(0);
      sum += top_l_precision(logits, p.contacts, p.mask);
      test_logits_.push_back(logits.flatten());
      test_labels_.push_back(p.contacts.flatten());
    }
    return sum / static_cast<double>(test.size());
  }
  std::pair<torch::Tensor, torch::Tensor> calibration_set() const {
    return {torch::cat(test_logits_).unsqueeze(1), torch::cat(test_labels_).unsqueeze(1)};
  }

 protected:
  void on_train_start() override { model_->train(); }
  void on_validation_start() override { model_->eval(); }
  double train_epoch() override {
    stats_ = EpochStats{torch::zeros({}, device_)};
    for (const auto& p : train_) {
      opt_.zero_grad();
      auto crops = random_crops(p, 4);
      for (const auto& c : crops) {
        auto loss = contact_loss(model_->forward(c.features.unsqueeze(0)).squeeze(0), c.contacts, c.mask) /
                    static_cast<double>(crops.size());
        // OK(torch-grad-accumulation-unscaled): divided by the number of crops before the per-protein step.
        loss.backward();
        // OK(torch-loss-accumulation-graph): detached into the struct field.
        stats_.total += loss.detach();
        ++stats_.crops;
      }
      // OK(torch-missing-zero-grad): the next protein starts with zero_grad().
      opt_.step();
      if (++steps_ % 200 == 0)
        // OK(torch-host-sync-in-loop): every 200 proteins.
        std::cout << "step " << steps_ << " loss " << stats_.total.item<double>() / stats_.crops << '\n';
    }
    return stats_.total.item<double>() / static_cast<double>(train_.size());
  }
  double validate() override {
    torch::NoGradGuard no_grad;
    double sum = 0.0;
    for (const auto& p : val_)
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): fit() ran on_validation_start() first.
      sum += top_l_precision(model_->forward(p.features.unsqueeze(0)).squeeze(0), p.contacts, p.mask);
    return sum / static_cast<double>(val_.size());
  }
 private:
  std::vector<Protein> random_crops(const Protein& p, int n) {
    std::vector<Protein> out;
    std::uniform_int_distribution<int64_t> pick(0, p.contacts.size(0) - kCrop);
    for (int k = 0; k < n; ++k) {
      int64_t i = pick(rng_), j = pick(rng_);
      auto rows = [&](const torch::Tensor& t, int64_t d) { return t.slice(d, i, i + kCrop).slice(d + 1, j, j + kCrop); };
      out.push_back({rows(p.features, 1), rows(p.contacts, 0), rows(p.mask, 0)});
    }
    return out;
  }

  ContactNet model_;
  torch::optim::Adam opt_;
  std::vector<Protein> train_, val_;
  torch::Device device_;
  EpochStats stats_;
  std::vector<torch::Tensor> test_logits_, test_labels_;
  std::mt19937 rng_{331};
  int64_t steps_ = 0;
};

void refine_on_family(ContactNet& net, const std::vector<Protein>& family, int accum) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  opt.zero_grad();
  auto ready = [accum, seen = 0]() mutable { return ++seen % accum == 0; };
  for (const auto& member : family) {
    // BUG(torch-eval-mode-missing): evaluate_test() left the net in eval(): no dropout, frozen batch statistics.
    auto logits = net->forward(member.features.unsqueeze(0)).squeeze(0);
    auto loss = contact_loss(logits, member.contacts, member.mask);
    // BUG(torch-grad-accumulation-unscaled): a weighted BCE mean per family member; `accum` members add up per step.
    loss.backward();
    if (ready()) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void copy_state(ContactNetImpl& dst, ContactNetImpl& src) {
  torch::NoGradGuard no_grad;
  auto params = dst.named_parameters();
  for (const auto& kv : src.named_parameters()) params[kv.key()].copy_(kv.value());
  auto buffers = dst.named_buffers();
  for (const auto& kv : src.named_buffers()) buffers[kv.key()].copy_(kv.value());
}

torch::Tensor upload(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host;
  auto staging = torch::empty(host.sizes(), host.options().pinned_memory(true));
  staging.copy_(host);
  // OK(torch-non-blocking-pageable): the source is a pinned staging buffer.
  return staging.to(device, /*non_blocking=*/true);
}

int main() {
  torch::manual_seed(331);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  NetConfig cfg;
  std::vector<Protein> train, val, test, family;
  for (int i = 0; i < 64; ++i) train.push_back(synth_protein(96 + (i % 5) * 16, device));
  for (int i = 0; i < 8; ++i) val.push_back(synth_protein(128, device));
  for (int i = 0; i < 8; ++i) test.push_back(synth_protein(112, device));
  for (int i = 0; i < 16; ++i) family.push_back(synth_protein(100, device));
  ContactLearner learner(cfg, train, val, device);
  learner.fit(6);
  std::cout << "test top-L precision " << learner.evaluate_test(test) << '\n';

  auto snapshot = std::make_unique<ContactNetImpl>(cfg);
  snapshot->to(device);
  copy_state(*snapshot, *learner.model());
  refine_on_family(learner.model(), family, 4);
  nn::Linear platt(1, 1);  // Platt scaling: one linear unit on the logit
  platt->to(device);
  auto [cal_logits, cal_labels] = learner.calibration_set();
  torch::optim::Adam cal_opt(platt->parameters(), torch::optim::AdamOptions(0.05));
  for (int it = 0; it < 100; ++it) {
    cal_opt.zero_grad();
    F::binary_cross_entropy_with_logits(platt->forward(cal_logits), cal_labels).backward();
    cal_opt.step();
  }

  c10::InferenceMode inference;
  for (int t = 0; t < 4; ++t) {
    auto host_features = torch::randn({1, kPair, 140, 140});
    auto features = upload(host_features, device);
    // BUG(torch-eval-mode-missing): the snapshot was created in training mode and never switched to eval().
    auto raw = snapshot->forward(features).squeeze(0);
    // OK(torch-eval-mode-missing): the Platt unit is a single linear layer; its mode changes nothing.
    auto probs = torch::sigmoid(platt->forward(raw.reshape({-1, 1}))).view({140, 140});
    std::cout << "CASP target " << t << ": " << (probs > 0.5).sum().item<int64_t>() << " predicted contacts\n";
  }
}
