// Skin-lesion classification bake-off (7 diagnostic classes, 3x32x32 crops).
// The backbone is named in the experiment sheet and built by a factory that
// returns a std::variant of two module holders: a small CNN with batch norm,
// or an MLP-mixer-like patch model with dropout. A visitor struct with a
// templated call operator trains whichever alternative is held, scoring goes
// through std::visit with an overloaded set of lambdas, and a std::get_if
// branch exports the CNN's batch-norm statistics for the on-device runtime.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

constexpr int64_t kClasses = 7, kSide = 32, kPatch = 8;

struct SmallCnnImpl : torch::nn::Module {
  explicit SmallCnnImpl(int64_t width)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, width, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(width))),
        fc(register_module("fc", torch::nn::Linear(width, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(bn(conv(x)));
    return fc(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(SmallCnn);

struct PatchMixerImpl : torch::nn::Module {
  explicit PatchMixerImpl(int64_t dim)
      : embed(register_module("embed", torch::nn::Linear(3 * kPatch * kPatch, dim))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        head(register_module("head", torch::nn::Linear(dim, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    // [B, 3, 32, 32] -> [B, 16, 3 * 8 * 8] patches
    auto p = x.unfold(2, kPatch, kPatch).unfold(3, kPatch, kPatch);
    p = p.permute({0, 2, 3, 1, 4, 5}).reshape({x.size(0), -1, 3 * kPatch * kPatch});
    return head(drop(torch::gelu(embed(p))).mean(1));
  }
  torch::nn::Linear embed;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(PatchMixer);

using Backbone = std::variant<SmallCnn, PatchMixer>;

template <class... Fs> struct Overloaded : Fs... { using Fs::operator()...; };
template <class... Fs> Overloaded(Fs...) -> Overloaded<Fs...>;

Backbone make_backbone(const std::string &arch) {
  if (arch == "mixer")
    return PatchMixer(96);
  return SmallCnn(48);
}

struct LesionBatch {
  torch::Tensor images;  // [B, 3, 32, 32], host
  torch::Tensor labels;  // [B], host
};

// Stand-in for the dermoscopy reader: class k brightens channel k % 3.
LesionBatch read_batch(int64_t n) {
  auto labels = torch::randint(kClasses, {n}, torch::kLong);
  auto images = torch::rand({n, 3, kSide, kSide});
  images.select(1, 0).add_(labels.remainder(3).eq(0).to(torch::kFloat).view({n, 1, 1}) * 0.5);
  images.select(1, 1).add_(labels.remainder(3).eq(1).to(torch::kFloat).view({n, 1, 1}) * 0.5);
  return {images, labels};
}

struct TrainVisitor {
  torch::Device device;
  int64_t steps;
  double lr;

  template <class Net> double operator()(Net &net) const {
    net->to(device);
    net->train();
    torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(lr).weight_decay(0.05));
    auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device));
    for (int64_t s = 0; s < steps; ++s) {
      auto batch = read_batch(64);
      // BUG(torch-non-blocking-pageable): read_batch() returns ordinary host
      // tensors; the "asynchronous" upload is synchronous.
      auto images = batch.images.to(device, /*non_blocking=*/true);
      torch::Tensor logits = net->forward(images);
      // BUG(torch-device-mismatch): the labels were never moved; the logits
      // are on `device`.
      torch::Tensor loss = torch::nn::functional::cross_entropy(logits, batch.labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): epoch_loss outlives the step and
      // keeps every step's graph.
      epoch_loss += loss;
      if (s % 100 == 0)
        // OK(torch-host-sync-in-loop): logging steps only.
        std::cout << "step " << s << " loss " << loss.item<double>() << '\n';
    }
    return epoch_loss.item<double>() / static_cast<double>(steps);
  }
};

double top1(const torch::Tensor &logits, const torch::Tensor &labels) {
  return logits.argmax(1).eq(labels).to(torch::kFloat).mean().item<double>();
}

int main() {
  torch::manual_seed(146);
  // OK(torch-cuda-unguarded): CPU fallback.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  const std::vector<std::string> sheet = {"cnn", "mixer"};

  std::vector<Backbone> candidates;
  for (const auto &arch : sheet) {
    Backbone bb = make_backbone(arch);
    const double mean_loss = std::visit(TrainVisitor{device, 600, 2e-3}, bb);
    std::cout << arch << " mean train loss " << mean_loss << '\n';
    candidates.push_back(std::move(bb));
  }

  auto val = read_batch(512);
  auto val_images = val.images.to(device);
  auto val_labels = val.labels.to(device);
  for (auto &bb : candidates) {
    torch::NoGradGuard no_grad;
    const double acc = std::visit(
        Overloaded{
            [&](SmallCnn &net) {
              net->eval();
              double sum = 0;
              for (int64_t i = 0; i < 4; ++i) {
                // OK(torch-eval-mode-missing, torch-inference-without-no-grad):
                // eval() above and the guard of the enclosing block.
                sum += top1(net->forward(val_images.narrow(0, i * 128, 128)), val_labels.narrow(0, i * 128, 128));
              }
              return sum / 4;
            },
            [&](PatchMixer &net) {
              double sum = 0;
              for (int64_t i = 0; i < 4; ++i) {
                // BUG(torch-eval-mode-missing): the mixer is scored straight
                // after TrainVisitor's train(); dropout is still on.
                sum += top1(net->forward(val_images.narrow(0, i * 128, 128)), val_labels.narrow(0, i * 128, 128));
              }
              return sum / 4;
            }},
        bb);
    std::cout << "top-1 " << acc << '\n';
  }

  if (auto *cnn = std::get_if<SmallCnn>(&candidates.front())) {
    auto mean = (*cnn)->bn->running_mean;
    auto var = (*cnn)->bn->running_var;
    // BUG(torch-tensor-to-discarded): the host copy of the running mean is
    // thrown away; torch::save below writes the device tensor.
    mean.cpu();
    var = var.cpu();
    torch::save(std::vector<torch::Tensor>{mean, var}, "cnn_bn_stats.pt");
  }
  return 0;
}
