// Crop-type mapping from Sentinel-2 time series: each parcel is 10 spectral
// bands over 24 acquisition dates, classified into 6 crops. Experiments live
// in an std::unordered_map<std::string, Experiment>, each holding its model
// as std::shared_ptr<torch::nn::Module> built from an architecture name, and
// the training and scoring code downcasts with std::dynamic_pointer_cast. The
// TempCNN is scored on the hold-out region and then updated with the labels
// of the new season.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kBands = 10, kDates = 24, kCrops = 6;

struct TempCnnImpl : nn::Module {
  TempCnnImpl()
      : conv1(register_module("conv1", nn::Conv1d(nn::Conv1dOptions(kBands, 64, 5).padding(2)))),
        bn1(register_module("bn1", nn::BatchNorm1d(64))),
        conv2(register_module("conv2", nn::Conv1d(nn::Conv1dOptions(64, 64, 5).padding(2)))),
        bn2(register_module("bn2", nn::BatchNorm1d(64))),
        drop(register_module("drop", nn::Dropout(0.2))),
        head(register_module("head", nn::Linear(64 * kDates, kCrops))) {}
  torch::Tensor forward(const torch::Tensor &x) {  // x: [B, kBands, kDates]
    auto h = drop->forward(torch::relu(bn1->forward(conv1->forward(x))));
    h = drop->forward(torch::relu(bn2->forward(conv2->forward(h))));
    return head->forward(h.flatten(1));
  }
  nn::Conv1d conv1;
  nn::BatchNorm1d bn1;
  nn::Conv1d conv2;
  nn::BatchNorm1d bn2;
  nn::Dropout drop;
  nn::Linear head;
};

// Per-date spectra flattened into one vector; no mode-dependent layer.
struct PixelMlpImpl : nn::Module {
  PixelMlpImpl()
      : fc1(register_module("fc1", nn::Linear(kBands * kDates, 128))),
        fc2(register_module("fc2", nn::Linear(128, kCrops))) {}
  torch::Tensor forward(const torch::Tensor &x) { return fc2->forward(torch::relu(fc1->forward(x.flatten(1)))); }
  nn::Linear fc1, fc2;
};

std::shared_ptr<nn::Module> build_model(const std::string &arch) {
  if (arch == "tempcnn") return std::make_shared<TempCnnImpl>();
  if (arch == "mlp") return std::make_shared<PixelMlpImpl>();
  throw std::invalid_argument("unknown architecture " + arch);
}

struct Experiment {
  std::string arch;
  std::shared_ptr<nn::Module> model;
  double lr;
  std::vector<torch::Tensor> curve;
};
using Registry = std::unordered_map<std::string, Experiment>;

template <typename Net>
std::shared_ptr<Net> as(const Experiment &exp) {
  auto net = std::dynamic_pointer_cast<Net>(exp.model);
  if (!net) throw std::logic_error("experiment '" + exp.arch + "' holds another architecture");
  return net;
}

struct Tile {
  torch::Tensor pixels;  // [B, kBands, kDates], surface reflectance
  torch::Tensor labels;  // [B]
};

std::vector<Tile> load_tiles(int64_t count, int64_t parcels, bool pin) {
  std::vector<Tile> tiles;
  for (int64_t i = 0; i < count; ++i) {
    auto labels = torch::randint(kCrops, {parcels}, torch::kLong);
    auto phenology = torch::sin(torch::linspace(0, 3.14159, kDates)).view({1, 1, kDates});
    auto pixels = 0.1 * torch::randn({parcels, kBands, kDates}) +
                  labels.to(torch::kFloat).view({parcels, 1, 1}) / kCrops * phenology;
    if (pin && torch::cuda::is_available()) pixels = pixels.pin_memory();
    tiles.push_back({pixels, labels});
  }
  return tiles;
}

void release_cached_blocks() {
  // BUG(torch-empty-cache-in-loop): main() calls this after every experiment
  // of its loop; each call syncs and hands blocks back to the driver.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void train_tempcnn(Experiment &exp, const std::vector<Tile> &tiles, torch::Device device, int epochs) {
  auto net = as<TempCnnImpl>(exp);
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(exp.lr));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto &tile : tiles) {
      // BUG(torch-non-blocking-pageable): the training tiles are loaded
      // without pinning; the copy is synchronous despite the flag.
      auto x = tile.pixels.to(device, /*non_blocking=*/true);
      auto y = tile.labels.to(device);
      opt.zero_grad();
      // OK(torch-eval-mode-missing): train() above.
      auto loss = F::cross_entropy(net->forward(x), y);
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the experiment's curve keeps
      // every step's graph alive.
      exp.curve.push_back(loss);
    }
  }
}

void train_mlp(Experiment &exp, const std::vector<Tile> &tiles, torch::Device device, int epochs) {
  auto net = as<PixelMlpImpl>(exp);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(exp.lr).momentum(0.9));
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (const auto &tile : tiles) {
      opt.zero_grad();
      auto loss = F::cross_entropy(net->forward(tile.pixels.to(device)), tile.labels.to(device));
      loss.backward();
      opt.step();
      // OK(torch-loss-accumulation-graph): detached before it is kept.
      exp.curve.push_back(loss.detach());
    }
}

template <typename Net>
double macro_f1(const Experiment &exp, const std::vector<Tile> &tiles, torch::Device device) {
  auto net = as<Net>(exp);
  torch::NoGradGuard no_grad;
  auto confusion = torch::zeros({kCrops, kCrops}, torch::kLong);
  for (const auto &tile : tiles) {
    // BUG(torch-eval-mode-missing): nothing switched the TempCNN held by the
    // registry out of training mode; the MLP instantiation has no dropout or
    // batch norm and is fine.
    auto pred = net->forward(tile.pixels.to(device)).argmax(1).cpu();
    confusion.index_put_({tile.labels, pred}, torch::ones_like(pred), /*accumulate=*/true);
  }
  auto tp = confusion.diag().to(torch::kDouble);
  auto f1 = 2 * tp / (confusion.sum(0) + confusion.sum(1)).to(torch::kDouble).clamp_min(1);
  return f1.mean().item<double>();
}

double score_holdout(Experiment &exp, const std::vector<Tile> &region, torch::Device device) {
  exp.model->eval();
  torch::NoGradGuard no_grad;
  auto net = as<TempCnnImpl>(exp);
  int64_t correct = 0, total = 0;
  for (const auto &tile : region) {
    // OK(torch-eval-mode-missing): eval() through the registry's base pointer.
    auto pred = net->forward(tile.pixels.to(device)).argmax(1);
    correct += pred.eq(tile.labels.to(device)).sum().item<int64_t>();
    total += tile.labels.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

void seasonal_update(Experiment &exp, const std::vector<Tile> &season, torch::Device device) {
  auto net = as<TempCnnImpl>(exp);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(exp.lr * 0.1));
  for (const auto &tile : season) {
    // OK(torch-non-blocking-pageable): pinned when CUDA is there to copy to.
    auto x = tile.pixels.to(device, /*non_blocking=*/true);
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): score_holdout() left the TempCNN in
    // eval(); the update trains with dropout off and frozen statistics.
    auto logits = net->forward(x);
    // BUG(torch-device-mismatch): the season's labels stay on the CPU while
    // the logits are on `device`.
    auto loss = F::cross_entropy(logits, tile.labels);
    loss.backward();
    opt.step();
  }
}

int main() {
  torch::manual_seed(349);
  // OK(torch-cuda-unguarded): is_available() decides.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  auto train = load_tiles(16, 64, /*pin=*/false);
  auto val = load_tiles(4, 64, /*pin=*/false);
  auto holdout = load_tiles(4, 64, /*pin=*/false);
  auto season = load_tiles(6, 64, /*pin=*/true);

  Registry experiments;
  experiments.emplace("tempcnn", Experiment{"tempcnn", build_model("tempcnn"), 1e-3, {}});
  experiments.emplace("mlp", Experiment{"mlp", build_model("mlp"), 5e-3, {}});

  for (auto &[name, exp] : experiments) {
    exp.model->to(device);
    if (exp.arch == "tempcnn")
      train_tempcnn(exp, train, device, 3);
    else
      train_mlp(exp, train, device, 3);
    std::cout << name << " trained, " << exp.curve.size() << " steps\n";
    release_cached_blocks();
  }

  Experiment &tcnn = experiments.at("tempcnn");
  Experiment &mlp = experiments.at("mlp");
  std::cout << "tempcnn val F1 " << macro_f1<TempCnnImpl>(tcnn, val, device) << '\n';
  // OK(torch-eval-mode-missing): the MLP has no mode-dependent layer.
  std::cout << "mlp val F1 " << macro_f1<PixelMlpImpl>(mlp, val, device) << '\n';

  std::cout << "hold-out accuracy " << score_holdout(tcnn, holdout, device) << '\n';
  seasonal_update(tcnn, season, device);
  std::cout << "updated on " << season.size() << " tiles of the new season\n";
}
