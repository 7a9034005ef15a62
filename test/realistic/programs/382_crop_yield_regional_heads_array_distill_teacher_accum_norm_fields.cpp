// County-level crop-yield regression (t/ha) from 24 features per field: soil
// properties, season weather aggregates and satellite NDVI percentiles. Three
// regional MLPs (plains, river valley, highlands) are trained on their own
// counties and kept in a std::array; their average is then distilled into a
// compact student that runs on the agronomists' tablets, with gradient
// accumulation over micro-batches of counties.
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace yield {

constexpr int64_t kFeat = 24;
constexpr size_t kRegions = 3;
const std::array<const char *, kRegions> kRegionNames = {"plains", "valley", "highlands"};

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): guarded by is_available().
  return torch::Device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
}

struct YieldMlpImpl : nn::Module {
  explicit YieldMlpImpl(int64_t hidden)
      : body(register_module("body", nn::Sequential(nn::Linear(kFeat, hidden), nn::BatchNorm1d(hidden), nn::ReLU(),
                                                    nn::Dropout(0.2), nn::Linear(hidden, hidden), nn::ReLU(),
                                                    nn::Dropout(0.2), nn::Linear(hidden, 1)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return body->forward(x).squeeze(1); }
  nn::Sequential body;
};
TORCH_MODULE(YieldMlp);

struct Fields {
  torch::Tensor x;  // N x kFeat
  torch::Tensor y;  // N
  int64_t size() const { return x.size(0); }
};

Fields synth_fields(int64_t n, double region_shift) {
  auto x = torch::randn({n, kFeat}) * 2.0 + region_shift;
  auto y = 6.0 + 0.3 * x.narrow(1, 0, 4).sum(1) - 0.1 * x.narrow(1, 8, 4).pow(2).sum(1) + 0.2 * torch::randn({n});
  return {x, y};
}

struct Normalizer {
  torch::Tensor mean, std;
};
Normalizer fit_normalizer(const std::vector<Fields> &sets) {
  std::vector<torch::Tensor> xs;
  for (const auto &s : sets) xs.push_back(s.x);
  auto all = torch::cat(xs);
  return {all.mean(0), all.std(0) + 1e-6};
}

void train_region(YieldMlp &net, const Fields &data, const Normalizer &norm, torch::Device device) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-3));
  auto x_all = ((data.x - norm.mean) / norm.std).to(device);
  auto y_all = data.y.to(device);
  for (int epoch = 0; epoch < 30; ++epoch) {
    auto order = torch::randperm(data.size(), torch::TensorOptions().dtype(torch::kLong).device(device));
    for (int64_t b = 0; b + 32 <= data.size(); b += 32) {
      auto idx = order.narrow(0, b, 32);
      // OK(torch-eval-mode-missing): the regional nets train in the mode they were built in.
      auto loss = F::mse_loss(net->forward(x_all.index_select(0, idx)), y_all.index_select(0, idx));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
}

void report_regions(std::array<YieldMlp, kRegions> &regions, const std::array<Fields, kRegions> &val,
                    const Normalizer &norm, torch::Device device) {
  torch::NoGradGuard no_grad;
  size_t r = 0;
  for (auto &net : regions) {
    auto x = ((val[r].x - norm.mean) / norm.std).to(device);
    // BUG(torch-eval-mode-missing): no head of the array was switched to eval(); dropout and BatchNorm still train.
    auto pred = net->forward(x);
    const double rmse = torch::sqrt(F::mse_loss(pred, val[r].y.to(device))).item<double>();
    std::cout << kRegionNames[r++] << " rmse " << rmse << " t/ha\n";
  }
}

class Distiller {
 public:
  Distiller(std::array<YieldMlp, kRegions> teachers, YieldMlp student, Normalizer norm, torch::Device device,
            int64_t accum)
      : teachers_(std::move(teachers)), student_(std::move(student)), norm_(std::move(norm)), device_(device),
        accum_(accum), opt_(student_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  double fit(const Fields &pool, int epochs) {
    auto kd_total = torch::zeros({}, device_);
    int64_t micro = 0;
    opt_.zero_grad();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (int64_t b = 0; b + 16 <= pool.size(); b += 16) {
        // BUG(torch-device-mismatch): the normaliser's statistics were computed on the host and never moved.
        auto x = (pool.x.narrow(0, b, 16).to(device_) - norm_.mean) / norm_.std;
        auto y = pool.y.narrow(0, b, 16).to(device_);
        torch::Tensor soft;
        {
          torch::NoGradGuard no_grad;
          soft = torch::zeros({16}, device_);
          for (auto &t : teachers_) {
            // BUG(torch-eval-mode-missing): the teachers left train_region() in training mode; nothing switches them.
            auto out = t->forward(x);
            // OK(torch-loss-accumulation-graph): summed under the no-grad guard, there is no graph to keep.
            soft = soft + out;
          }
          soft = soft / static_cast<double>(kRegions);
        }
        auto pred = student_->forward(x);
        auto kd = F::mse_loss(pred, soft);
        auto loss = kd + F::smooth_l1_loss(pred, y);
        // BUG(torch-grad-accumulation-unscaled): the mean loss of each micro-batch is never divided by accum_.
        loss.backward();
        if (++micro % accum_ == 0) {
          // OK(torch-missing-zero-grad): step and reset share the accumulation condition.
          opt_.step();
          opt_.zero_grad();
        }
        // BUG(torch-loss-accumulation-graph): kd still holds the student's graph.
        kd_total = kd_total + kd;
      }
    }
    return micro ? kd_total.item<double>() / static_cast<double>(micro) : 0.0;
  }

 private:
  std::array<YieldMlp, kRegions> teachers_;
  YieldMlp student_;
  Normalizer norm_;
  torch::Device device_;
  int64_t accum_;
  torch::optim::Adam opt_;
};

double ensemble_rmse(std::array<YieldMlp, kRegions> &regions, const Fields &test, const Normalizer &norm,
                     torch::Device device) {
  for (auto &net : regions) net->eval();
  double se = 0.0;
  for (int64_t b = 0; b + 64 <= test.size(); b += 64) {
    auto x = ((test.x.narrow(0, b, 64) - norm.mean) / norm.std).to(device);
    // BUG(torch-inference-without-no-grad): eval() was called above but autograd still records every county batch.
    // OK(torch-eval-mode-missing): the range-for above switched every head to eval().
    auto mean = (regions[0]->forward(x) + regions[1]->forward(x) + regions[2]->forward(x)) / static_cast<double>(kRegions);
    se += (mean - test.y.narrow(0, b, 64).to(device)).pow(2).sum().item<double>();
  }
  return std::sqrt(se / static_cast<double>(test.size() / 64 * 64));
}

double student_rmse(YieldMlp &student, const Fields &test, const Normalizer &norm, torch::Device device) {
  student->eval();
  torch::NoGradGuard no_grad;
  auto x = ((test.x - norm.mean) / norm.std).to(device);
  // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above; no loop.
  return torch::sqrt(F::mse_loss(student->forward(x), test.y.to(device))).item<double>();
}

}  // namespace yield

int main() {
  using namespace yield;
  torch::manual_seed(382);
  const torch::Device device = pick_device();

  std::array<Fields, kRegions> train{synth_fields(1200, -0.5), synth_fields(800, 0.0), synth_fields(600, 0.7)};
  std::array<Fields, kRegions> val{synth_fields(200, -0.5), synth_fields(150, 0.0), synth_fields(120, 0.7)};
  const Normalizer norm = fit_normalizer({train[0], train[1], train[2]});

  std::array<YieldMlp, kRegions> regions{YieldMlp(128), YieldMlp(128), YieldMlp(96)};
  for (size_t r = 0; r < kRegions; ++r) {
    regions[r]->to(device);
    train_region(regions[r], train[r], norm, device);
  }
  report_regions(regions, val, norm, device);

  YieldMlp student(32);
  student->to(device);
  Distiller distiller(regions, student, norm, device, /*accum=*/4);
  const Fields pool = synth_fields(3000, 0.0);
  std::cout << "distillation kd " << distiller.fit(pool, 5) << '\n';

  const Fields test = synth_fields(640, 0.1);
  std::cout << "ensemble rmse " << ensemble_rmse(regions, test, norm, device) << " t/ha\n";
  std::cout << "student rmse " << student_rmse(student, test, norm, device) << " t/ha\n";
  return 0;
}
