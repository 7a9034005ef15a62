// County-level crop yield regression (t/ha) from a season of Sentinel-2
// indices (NDVI, EVI, NDWI, red edge; 24 ten-day composites) and six soil
// properties: a temporal conv encoder with batch norm and dropout, trained by
// a trainer whose base class hook clears the gradients, fed through a pool of
// pinned staging buffers. Yields are then reported per growing region.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace agro {

constexpr int64_t kBands = 4, kSteps = 24, kSoil = 6;

struct FieldBatch {
  torch::Tensor indices;  // [B, 4, 24]
  torch::Tensor soil;     // [B, 6]
  torch::Tensor yield;    // [B]
  std::string crop;       // "maize", "wheat", "soy"

  static FieldBatch synth(int64_t n, const std::string &crop, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    auto season = torch::sin(torch::linspace(0, 3.14159, kSteps)).view({1, 1, kSteps});
    auto indices = season * torch::rand({n, kBands, 1}, gen) + 0.05 * torch::randn({n, kBands, kSteps}, gen);
    auto soil = torch::randn({n, kSoil}, gen);
    auto yield = 6.0 + 2.0 * indices.select(1, 0).mean(1) + 0.3 * soil.select(1, 2);
    return {indices, soil, yield, crop};
  }
};

struct YieldNetImpl : nn::Module {
  YieldNetImpl()
      : temporal(register_module("temporal", nn::Sequential(nn::Conv1d(nn::Conv1dOptions(kBands, 32, 3).padding(1)),
                                                             nn::BatchNorm1d(32), nn::ReLU(),
                                                             nn::Conv1d(nn::Conv1dOptions(32, 32, 3).padding(1)),
                                                             nn::ReLU()))),
        drop(register_module("drop", nn::Dropout(0.2))),
        head(register_module("head", nn::Linear(32 + kSoil, 1))) {}
  torch::Tensor forward(const torch::Tensor &indices, const torch::Tensor &soil) {
    auto h = temporal->forward(indices).mean(2);
    return head->forward(drop->forward(torch::cat({h, soil}, 1))).squeeze(1);
  }
  nn::Sequential temporal;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(YieldNet);

// Soil-only reference regression; Monte Carlo dropout is an opt-in for
// uncertainty studies.
struct SoilBaselineImpl : nn::Module {
  explicit SoilBaselineImpl(bool mc_dropout) : fc(register_module("fc", nn::Linear(kSoil, 1))) {
    if (mc_dropout)
      drop = register_module("drop", nn::Dropout(0.5));
  }
  torch::Tensor forward(const torch::Tensor &soil) {
    return fc->forward(drop ? drop->forward(soil) : soil).squeeze(1);
  }
  nn::Linear fc;
  nn::Dropout drop{nullptr};
};
TORCH_MODULE(SoilBaseline);

// Fixed set of page-locked staging buffers, handed out round robin.
class PinnedPool {
 public:
  PinnedPool(int64_t slots, torch::IntArrayRef shape) {
    for (int64_t i = 0; i < slots; ++i)
      slots_.push_back(torch::empty(shape, torch::TensorOptions().pinned_memory(true)));
  }
  torch::Tensor acquire() { return slots_[next_++ % slots_.size()]; }
 private:
  std::vector<torch::Tensor> slots_;
  size_t next_ = 0;
};

void wait_for(const torch::Device &device) {
  if (device.is_cuda())
    torch::cuda::synchronize();
}

void freeze_for_eval(YieldNet &net) { net->eval(); }

int visible_gpus() { return static_cast<int>(torch::cuda::device_count()); }

struct CropStats { torch::Tensor loss_sum; int64_t batches = 0; };

}  // namespace agro

using namespace agro;

class TrainerBase {
 public:
  explicit TrainerBase(std::unique_ptr<torch::optim::Optimizer> opt) : opt_(std::move(opt)) {}
  virtual ~TrainerBase() = default;

 protected:
  virtual void before_step() { opt_->zero_grad(); }
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

class YieldTrainer : public TrainerBase {
 public:
  YieldTrainer(YieldNet net, torch::Device device)
      : TrainerBase(std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(2e-3))),
        net_(std::move(net)), device_(device), pool_(2, {64, kBands, kSteps}) {}

  YieldNet model() const { return net_; }

  void fit(const std::vector<FieldBatch> &train, const std::vector<FieldBatch> &val, int epochs) {
    for (int epoch = 0; epoch < epochs; ++epoch) {
      if (epoch > 0 && epoch % 3 == 0)
        std::cout << "epoch " << epoch << " val rmse " << validate(val) << '\n';
      net_->train();
      for (const auto &b : train) {
        auto staged = pool_.acquire().narrow(0, 0, b.indices.size(0));
        staged.copy_(b.indices);
        // OK(torch-non-blocking-pageable): the staging slot comes from the pinned pool.
        auto indices = staged.to(device_, /*non_blocking=*/true);
        // BUG(torch-non-blocking-pageable): the soil features were made by
        // torch::randn() in FieldBatch::synth, pageable memory.
        auto soil = b.soil.to(device_, /*non_blocking=*/true);
        before_step();
        auto loss = F::mse_loss(net_->forward(indices, soil), b.yield.to(device_));
        loss.backward();
        // OK(torch-missing-zero-grad): before_step() in the base class resets the gradients.
        opt_->step();
        // OK(torch-loss-accumulation-graph): detached before it is kept in the member.
        epoch_loss_ += loss.detach();
        // BUG(torch-loss-accumulation-graph): the per-crop sum keeps every
        // batch's graph alive through the map's struct field.
        per_crop_[b.crop].loss_sum += loss;
        ++per_crop_[b.crop].batches;
        maybe_log(++step_, loss);
      }
    }
  }

  // Root mean squared error on the validation counties.
  double validate(const std::vector<FieldBatch> &val) {
    freeze_for_eval(net_);
    torch::NoGradGuard no_grad;
    double sq = 0.0;
    int64_t n = 0;
    for (const auto &b : val) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): freeze_for_eval() and the guard above.
      auto pred = net_->forward(b.indices.to(device_), b.soil.to(device_));
      // OK(torch-host-sync-in-loop): fit() runs validate() every third epoch only.
      sq += (pred.cpu() - b.yield).pow(2).sum().item<double>();
      n += b.yield.size(0);
    }
    return std::sqrt(sq / static_cast<double>(n));
  }

  void reset_stats(const std::vector<std::string> &crops) {
    epoch_loss_ = torch::zeros({}, torch::TensorOptions().device(device_));
    per_crop_.clear();
    for (const auto &c : crops)
      per_crop_[c] = CropStats{torch::zeros({}, torch::TensorOptions().device(device_)), 0};
  }
 private:
  void maybe_log(int64_t step, const torch::Tensor &loss) {
    if (step % 50 == 0)
      // OK(torch-host-sync-in-loop): only every 50th step.
      std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
  }

  YieldNet net_;
  torch::Device device_;
  PinnedPool pool_;
  torch::Tensor epoch_loss_ = torch::zeros({});
  std::map<std::string, CropStats> per_crop_;
  int64_t step_ = 0;
};

// Drought scenario on the auxiliary card: vegetation indices scaled down.
torch::Tensor drought_scenario(YieldNet net, const FieldBatch &b, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  auto stressed = (b.indices * 0.7).to(device);
  // OK(torch-device-mismatch): both inputs go to the same device the caller loaded the copy on.
  return net->forward(stressed, b.soil.to(device));
}

int main() {
  torch::manual_seed(280);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const std::vector<std::string> crops = {"maize", "wheat", "soy"};
  std::vector<FieldBatch> train, val;
  for (uint64_t i = 0; i < 30; ++i)
    train.push_back(FieldBatch::synth(64, crops[i % 3], i));
  for (uint64_t i = 0; i < 6; ++i)
    val.push_back(FieldBatch::synth(64, crops[i % 3], 500 + i));

  YieldNet net;
  net->to(device);
  YieldTrainer trainer(net, device);
  trainer.reset_stats(crops);
  trainer.fit(train, val, 9);

  std::map<std::string, std::vector<FieldBatch>> by_region;  // held-out counties
  for (uint64_t i = 0; i < 4; ++i) {
    by_region["corn_belt"].push_back(FieldBatch::synth(32, "maize", 900 + i));
    by_region["great_plains"].push_back(FieldBatch::synth(32, "wheat", 950 + i));
  }
  auto model = trainer.model();
  {
    torch::NoGradGuard no_grad;
    for (const auto &kv : by_region) {
      double total = 0.0;
      for (const auto &b : kv.second) {
        // BUG(torch-eval-mode-missing): fit() ends every epoch in train(); the
        // handle from model() names the same module, still in training mode.
        auto pred = model->forward(b.indices.to(device), b.soil.to(device));
        total += pred.mean().item<double>();
      }
      std::cout << kv.first << " mean yield " << total / static_cast<double>(kv.second.size()) << " t/ha\n";
    }
  }
  SoilBaseline baseline(/*mc_dropout=*/false);
  baseline->to(device);
  torch::optim::SGD sgd(baseline->parameters(), torch::optim::SGDOptions(1e-2));
  for (const auto &b : train) {
    sgd.zero_grad();
    F::mse_loss(baseline->forward(b.soil.to(device)), b.yield.to(device)).backward();
    sgd.step();
  }
  {
    torch::NoGradGuard no_grad;
    double sq = 0.0;
    for (const auto &b : val)
      // OK(torch-eval-mode-missing): built without MC dropout, the baseline has no mode-dependent layer.
      sq += (baseline->forward(b.soil.to(device)).cpu() - b.yield).pow(2).mean().item<double>();
    std::cout << "soil baseline rmse " << std::sqrt(sq / static_cast<double>(val.size())) << '\n';
  }
  trainer.validate(val);
  torch::save(model, "yield_net.pt");
  // OK(torch-cuda-unguarded, torch-device-index-unchecked): visible_gpus() returns device_count().
  const torch::Device aux = visible_gpus() > 1 ? torch::Device(torch::kCUDA, 1) : device;
  YieldNet aux_net;
  torch::load(aux_net, "yield_net.pt");
  aux_net->to(aux);
  aux_net->eval();
  auto stressed = drought_scenario(aux_net, val.front(), aux);
  auto host = stressed.to(torch::kCPU, /*non_blocking=*/true);
  wait_for(aux);
  // OK(torch-non-blocking-d2h-race): wait_for() synchronised before the host reads it.
  std::cout << "drought yield " << host.mean().item<double>() << " t/ha\n";
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): validate() above left the trained model in eval().
  auto check = model->forward(val.back().indices.to(device), val.back().soil.to(device));
  std::cout << "check " << check.mean().item<double>() << '\n';
}
