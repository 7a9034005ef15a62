// Retinal OCT B-scan triage (normal / CNV / DME / drusen). The network is a
// torch::nn::Sequential assembled at run time from a layer-spec string, with
// its head taken from a registry of AnyModule factories so the clinic's
// variants differ only in their spec. Free functions take the Sequential by
// reference; the epoch loop runs a list of std::function callbacks (metric
// tracker, best-checkpoint saver, early stopping). Scans the graders flagged
// as hard cases get a short fine-tune before test-time-augmented scoring.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kClasses = 4, kSide = 64;

struct TrainConfig {
  int64_t epochs = 25;
  int64_t accum_steps = 4;
  int64_t patience = 3;
  int64_t hard_case_passes = 5;
  double lr = 3e-4;
};
static const TrainConfig kConfig;

struct Scan {
  torch::Tensor x, y;  // [B, 1, 64, 64], [B]
};

// "c32 b r p ... g": conv(out), batch norm, relu, max-pool, dropout(p), global pool.
nn::Sequential build_backbone(const std::string& spec, int64_t in_channels) {
  nn::Sequential seq;
  std::istringstream tokens(spec);
  std::string tok;
  int64_t ch = in_channels;
  while (tokens >> tok) {
    switch (tok[0]) {
      case 'c': {
        const int64_t out = std::stoll(tok.substr(1));
        seq->push_back(nn::Conv2d(nn::Conv2dOptions(ch, out, 3).padding(1).bias(false)));
        ch = out;
        break;
      }
      case 'b': seq->push_back(nn::BatchNorm2d(ch)); break;
      case 'r': seq->push_back(nn::ReLU()); break;
      case 'p': seq->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2))); break;
      case 'd': seq->push_back(nn::Dropout(std::stod(tok.substr(1)))); break;
      case 'g':
        seq->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)));
        seq->push_back(nn::Flatten());
        break;
      default: throw std::invalid_argument("bad layer token " + tok);
    }
  }
  return seq;
}

struct MlpHeadImpl : nn::Module {
  explicit MlpHeadImpl(int64_t in)
      : fc1(register_module("fc1", nn::Linear(in, 128))), drop(register_module("drop", nn::Dropout(0.5))),
        fc2(register_module("fc2", nn::Linear(128, kClasses))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(fc1(x)))); }
  nn::Linear fc1;
  nn::Dropout drop;
  nn::Linear fc2;
};
TORCH_MODULE(MlpHead);

std::map<std::string, std::function<nn::AnyModule(int64_t)>> head_registry() {
  return {
      {"linear", [](int64_t in) { return nn::AnyModule(nn::Linear(in, kClasses)); }},
      {"mlp", [](int64_t in) { return nn::AnyModule(MlpHead(in)); }},
  };
}

std::vector<Scan> synth_scans(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Scan> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto y = torch::randint(kClasses, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto depth = torch::linspace(0, 1, kSide, device).view({1, 1, kSide, 1});
    auto layers = torch::sin(depth * 40 + y.view({n, 1, 1, 1}).to(torch::kFloat));
    out.push_back({layers.expand({n, 1, kSide, kSide}) + 0.3 * torch::randn({n, 1, kSide, kSide}, device), y});
  }
  return out;
}

void train_one_epoch(nn::Sequential& model, const std::vector<Scan>& scans, torch::optim::Optimizer& opt,
                     const TrainConfig& cfg) {
  model->train();
  opt.zero_grad();
  for (size_t i = 0; i < scans.size(); ++i) {
    const auto& [x, y] = scans[i];
    auto loss = F::cross_entropy(model->forward(x), y, F::CrossEntropyFuncOptions().label_smoothing(0.1));
    // OK(torch-grad-accumulation-unscaled): divided by the accumulation count.
    (loss / static_cast<double>(cfg.accum_steps)).backward();
    if ((i + 1) % cfg.accum_steps == 0 || i + 1 == scans.size()) {
      opt.step();
      opt.zero_grad();
    }
  }
}

double validate(nn::Sequential& model, const std::vector<Scan>& scans) {
  model->eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto& s : scans) {
    // OK(torch-eval-mode-missing): eval() at the top of validate().
    correct += model->forward(s.x).argmax(1).eq(s.y).sum().item<int64_t>();
    total += s.y.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

// Hard cases are few: several passes, one optimizer step per scan batch.
void finetune_hard_cases(nn::Sequential& model, const std::vector<Scan>& hard, const TrainConfig& cfg) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  for (int64_t pass = 0; pass < cfg.hard_case_passes; ++pass) {
    opt.zero_grad();
    for (const auto& s : hard) {
      // BUG(torch-eval-mode-missing): main() validated the test set right
      // before; batch norm and dropout stay in evaluation mode here.
      auto loss = F::cross_entropy(model->forward(s.x), s.y);
      loss.backward();
      // BUG(torch-missing-zero-grad): zero_grad() runs once per pass; each
      // step inside the pass re-applies the earlier batches' gradients.
      opt.step();
    }
  }
}

// Average of the softmax over the scan and its horizontal flip.
torch::Tensor predict_tta(nn::Sequential& model, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  model->eval();
  // OK(torch-eval-mode-missing): eval() right above.
  auto both = model->forward(torch::cat({x, x.flip({3})}));
  return both.softmax(1).view({2, x.size(0), kClasses}).mean(0);
}

std::optional<std::vector<Scan>> load_hard_cases(bool graders_done, torch::Device device) {
  if (!graders_done)
    return std::nullopt;
  return synth_scans(6, 8, device);
}

int main(int argc, char** argv) {
  torch::manual_seed(165);
  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available())
    device = torch::Device(torch::kCUDA);

  const std::string spec = argc > 1 ? argv[1] : "c32 b r p c64 b r p c128 b r p d0.2 c128 b r g";
  auto model = build_backbone(spec, 1);
  model->push_back("head", head_registry().at(argc > 2 ? argv[2] : "mlp")(128));
  model->to(device);

  auto train = synth_scans(80, 16, device), val = synth_scans(10, 32, device), test = synth_scans(10, 32, device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(kConfig.lr).weight_decay(1e-4));

  double best = 0;
  int64_t bad_epochs = 0;
  std::vector<std::function<bool(int64_t, double)>> on_epoch_end = {
      [](int64_t epoch, double acc) {
        std::cout << "epoch " << epoch << " val acc " << acc << '\n';
        return true;
      },
      [&](int64_t, double acc) {
        if (acc > best) {
          best = acc;
          bad_epochs = 0;
          torch::save(model, "oct_best.pt");
        } else {
          ++bad_epochs;
        }
        return bad_epochs < kConfig.patience;
      },
  };

  for (int64_t epoch = 0; epoch < kConfig.epochs; ++epoch) {
    train_one_epoch(model, train, opt, kConfig);
    const double acc = validate(model, val);
    bool keep_going = true;
    for (auto& cb : on_epoch_end)
      keep_going = cb(epoch, acc) && keep_going;
    if (!keep_going)
      break;
  }

  torch::load(model, "oct_best.pt");
  std::cout << "test acc " << validate(model, test) << '\n';
  if (auto hard = load_hard_cases(argc > 3, device))
    finetune_hard_cases(model, *hard, kConfig);
  auto probs = predict_tta(model, test.front().x);
  std::cout << "first scan probs " << probs[0] << '\n';
}
