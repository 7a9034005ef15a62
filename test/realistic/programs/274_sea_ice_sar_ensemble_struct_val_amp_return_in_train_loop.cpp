// Sea-ice charting from Sentinel-1 SAR (HH/HV backscatter): per-pixel
// classes open water / new ice / first-year ice / multi-year ice. Tiles are
// large, so the trainer runs micro-batches with gradient accumulation and
// validates every few optimizer steps; validation runs under CUDA autocast.
// Three members trained from different seeds form an Ensemble whose mean
// prediction draws the chart; the charting pass skips land tiles and stops
// when the downlink budget of the ice service is used up.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define ICE_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, on)
#else
#define ICE_AUTOCAST(on) at::autocast::set_enabled(on)
#endif

constexpr int64_t kTile = 64, kClasses = 4;

struct Tile {
  torch::Tensor sar, chart;  // [2, kTile, kTile] float, [kTile, kTile] long
  double land_fraction = 0.0;
  bool calibration_failed = false;
};

struct SegConfig {
  int64_t micro = 4, accum = 4, val_every = 25;
  int epochs = 3;
  double lr = 1e-3;
};

struct IceNetImpl : nn::Module {
  explicit IceNetImpl(int64_t w)
      : enc(register_module("enc", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, w, 3).padding(1)),
                                                  nn::BatchNorm2d(w), nn::ReLU(), nn::MaxPool2d(2),
                                                  nn::Conv2d(nn::Conv2dOptions(w, 2 * w, 3).padding(1)),
                                                  nn::BatchNorm2d(2 * w), nn::ReLU()))),
        drop(register_module("drop", nn::Dropout2d(0.2))),
        dec(register_module(
            "dec", nn::Sequential(nn::Upsample(nn::UpsampleOptions()
                                                   .scale_factor(std::vector<double>({2.0, 2.0}))
                                                   .mode(torch::kNearest)),
                                  nn::Conv2d(nn::Conv2dOptions(2 * w, w, 3).padding(1)), nn::BatchNorm2d(w),
                                  nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(w, kClasses, 1))))) {}
  torch::Tensor forward(const torch::Tensor& sar) { return dec->forward(drop(enc->forward(sar))); }
  nn::Sequential enc;
  nn::Dropout2d drop;
  nn::Sequential dec;
};
TORCH_MODULE(IceNet);

// Tiles as the SAR pre-processor writes them (host memory, not pinned).
std::vector<Tile> load_tiles(int64_t n, int64_t first_id) {
  std::vector<Tile> tiles;
  for (int64_t i = 0; i < n; ++i) {
    auto coarse = torch::randint(kClasses, {kTile / 8, kTile / 8}, torch::kLong);
    auto chart = coarse.repeat_interleave(8, 0).repeat_interleave(8, 1);
    auto sar = 0.3 * chart.to(torch::kFloat).unsqueeze(0).expand({2, kTile, kTile}) +
               0.5 * torch::randn({2, kTile, kTile});
    const int64_t id = first_id + i;
    tiles.push_back({sar, chart, static_cast<double>(id % 7) / 10.0, id % 97 == 96});
  }
  return tiles;
}

std::pair<torch::Tensor, torch::Tensor> stack_tiles(const std::vector<Tile>& tiles, size_t first, int64_t n) {
  std::vector<torch::Tensor> sar, chart;
  for (size_t i = first; i < first + static_cast<size_t>(n); ++i) {
    sar.push_back(tiles[i].sar);
    chart.push_back(tiles[i].chart);
  }
  return {torch::stack(sar), torch::stack(chart)};
}

// Mean intersection-over-union over the ice classes, in float16 autocast.
template <typename Net>
double validate(Net& net, const std::vector<Tile>& val, torch::Device device) {
  net->eval();
  torch::NoGradGuard no_grad;
  double inter = 0.0, uni = 0.0;
  // BUG(torch-autocast-region): a tile whose calibration failed returns the
  // sentinel with autocast still on, and the training loop goes on in it.
  ICE_AUTOCAST(true);
  for (const auto& t : val) {
    if (t.calibration_failed)
      return -1.0;
    // OK(torch-eval-mode-missing): eval() above.
    torch::Tensor pred = net->forward(t.sar.unsqueeze(0).to(device)).argmax(1).squeeze(0);
    auto ice_pred = pred > 0, ice_true = t.chart.to(device) > 0;
    // OK(torch-host-sync-in-loop): fit_member() validates every val_every steps only.
    inter += (ice_pred & ice_true).sum().item<double>();
    uni += (ice_pred | ice_true).sum().item<double>();
  }
  ICE_AUTOCAST(false);
  return uni > 0.0 ? inter / uni : 1.0;
}

template <typename Net>
void fit_member(Net& net, const std::vector<Tile>& train, const std::vector<Tile>& val, const SegConfig& cfg,
                torch::Device device) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-4));
  opt.zero_grad();
  int64_t micro_steps = 0;
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    for (size_t i = 0; i + static_cast<size_t>(cfg.micro) <= train.size(); i += static_cast<size_t>(cfg.micro)) {
      auto [sar, chart] = stack_tiles(train, i, cfg.micro);
      // BUG(torch-non-blocking-pageable): the stacked tiles are fresh
      // pageable host memory; the copy cannot overlap anything.
      sar = sar.to(device, /*non_blocking=*/true);
      chart = chart.to(device);
      // OK(torch-eval-mode-missing): validate() switches to eval(), and the
      // train() right after it restores the mode before the next forward.
      auto loss = F::cross_entropy(net->forward(sar), chart);
      // BUG(torch-grad-accumulation-unscaled): a mean loss, and cfg.accum
      // micro-batches add up before each step.
      // BUG(torch-autocast-region): after validate() returned early the
      // thread is still in autocast: this backward runs inside the region.
      loss.backward();
      if (++micro_steps % cfg.accum == 0) {
        opt.step();
        opt.zero_grad();
        if (micro_steps % (cfg.accum * cfg.val_every) == 0) {
          std::cout << "  step " << micro_steps / cfg.accum << " val ice IoU " << validate(net, val, device) << '\n';
          net->train();
        }
      }
    }
  }
}

struct Ensemble {
  std::vector<IceNet> members;

  // Class probabilities [N, kClasses, H, W] averaged over the members.
  torch::Tensor predict(const torch::Tensor& sar) {
    torch::NoGradGuard no_grad;
    torch::Tensor sum;
    for (auto& m : members) {
      // BUG(torch-eval-mode-missing): fit_member() leaves every member in
      // train() and nothing here or in chart_scene() switches them.
      auto p = torch::softmax(m->forward(sar).to(torch::kFloat), 1);
      sum = sum.defined() ? sum + p : p;
    }
    return sum / static_cast<double>(members.size());
  }

  // Per-pixel disagreement: variance of the members' ice probability.
  torch::Tensor disagreement(const torch::Tensor& sar) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> ice;
    for (auto& m : members) {
      m->eval();
      // OK(torch-eval-mode-missing): eval() on this member just above.
      ice.push_back(1.0 - torch::softmax(m->forward(sar), 1).select(1, 0));
    }
    return torch::stack(ice).var(0);
  }
};

// Charts the sea tiles of a scene until the downlink budget is used up.
std::vector<torch::Tensor> chart_scene(Ensemble& ens, const std::vector<Tile>& scene, torch::Device device,
                                       size_t budget) {
  std::vector<torch::Tensor> charts;
  // OK(torch-autocast-region): continue and break stay in the loop, and the
  // region is closed right after it; no backward() in charting.
  ICE_AUTOCAST(true);
  for (const auto& t : scene) {
    if (t.land_fraction > 0.5)
      continue;
    if (charts.size() == budget)
      break;
    charts.push_back(ens.predict(t.sar.unsqueeze(0).to(device)).argmax(1).to(torch::kByte).cpu());
  }
  ICE_AUTOCAST(false);
  return charts;
}

int main() {
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const SegConfig cfg;
  const auto train = load_tiles(400, 0), val = load_tiles(40, 400), scene = load_tiles(60, 440);

  Ensemble ens;
  for (uint64_t seed : {2741u, 2742u, 2743u}) {
    torch::manual_seed(seed);
    IceNet net(16);
    net->to(device);
    fit_member(net, train, val, cfg, device);
    ens.members.push_back(net);
  }

  const auto charts = chart_scene(ens, scene, device, 24);
  std::cout << "charted " << charts.size() << " tiles of " << scene.size() << '\n';
  auto spread = ens.disagreement(scene.front().sar.unsqueeze(0).to(device));
  std::cout << "max member disagreement on tile 0: " << spread.max().item<double>() << '\n';
}
