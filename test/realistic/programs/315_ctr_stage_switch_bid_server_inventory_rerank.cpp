// Click-through-rate prediction for a display-ad exchange: eight hashed categorical
// fields and six dense counters predict a click. The model trains on daily log
// shards with gradient accumulation, a new campaign gets a Platt calibration head,
// and a bid server scores single requests and re-ranks the ad inventory offline.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace ctr {

constexpr int64_t kFields = 8, kHashBuckets = 20000, kDense = 6, kEmb = 16;

enum class Stage { Train, Validate, Serve };

// One switch for the whole pipeline: only training runs dropout and batch statistics.
void enter(Stage stage, nn::Module &model) {
  switch (stage) {
    case Stage::Train: model.train(); break;
    case Stage::Validate:
    case Stage::Serve: model.eval(); break;
  }
}

struct Batch {
  torch::Tensor cats;   // [B, 8] hashed ids
  torch::Tensor dense;  // [B, 6] log1p counters
  torch::Tensor click;  // [B, 1]
};

Batch synth_batch(int64_t n) {
  auto cats = torch::randint(0, kHashBuckets, {n, kFields}, torch::kLong);
  auto dense = torch::rand({n, kDense}).log1p();
  auto logit = dense.sum(1, true) - 2.5 + (cats.select(1, 0) % 7 == 0).to(torch::kFloat).unsqueeze(1);
  return {cats, dense, torch::bernoulli(torch::sigmoid(logit))};
}
struct CtrNetImpl : nn::Module {
  CtrNetImpl()
      : emb(register_module("emb", nn::Embedding(kHashBuckets, kEmb))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(kFields * kEmb + kDense, 128), nn::BatchNorm1d(128),
                                                  nn::ReLU(), nn::Dropout(0.2), nn::Linear(128, 1)))) {}
  torch::Tensor forward(const torch::Tensor &cats, const torch::Tensor &dense) {
    return mlp->forward(torch::cat({emb->forward(cats).flatten(1), dense}, 1));
  }
  nn::Embedding emb;
  nn::Sequential mlp;
};
TORCH_MODULE(CtrNet);
// Platt scaling for one campaign: a * logit + b.
struct CalibrationImpl : nn::Module {
  CalibrationImpl() : ab(register_parameter("ab", torch::tensor({1.0f, 0.0f}))) {}
  torch::Tensor forward(const torch::Tensor &logit) { return logit * ab[0] + ab[1]; }
  torch::Tensor ab;
};
TORCH_MODULE(Calibration);
// Moves a request's tensors to the serving device.
template <typename B>
void stage(B &b, const torch::Device &device) {
  b.cats = b.cats.to(device);
  // BUG(torch-tensor-to-discarded): the copy of the dense counters is thrown away.
  b.dense.to(device);
}

struct EvalSums { torch::Tensor logloss, clicks, predicted; };
// One validation batch into the sums, returning its size; validate() holds the no-grad guard.
int64_t add_batch(CtrNet &model, const Batch &b, const torch::Device &device, EvalSums &sums) {
  auto cats = b.cats.to(device), dense = b.dense.to(device), y = b.click.to(device);
  // OK(torch-eval-mode-missing, torch-inference-without-no-grad): enter(Stage::Validate) and the guard in validate().
  auto logits = model->forward(cats, dense);
  auto sum_opts = F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum);
  // OK(torch-loss-accumulation-graph): computed with autograd off in the caller.
  sums.logloss.add_(F::binary_cross_entropy_with_logits(logits, y, sum_opts));
  sums.clicks.add_(y.sum());
  sums.predicted.add_(torch::sigmoid(logits).sum());
  return b.click.size(0);
}

double validate(CtrNet &model, const std::vector<Batch> &val, const torch::Device &device) {
  enter(Stage::Validate, *model);
  torch::NoGradGuard no_grad;
  EvalSums sums{torch::zeros({}, device), torch::zeros({}, device), torch::zeros({}, device)};
  int64_t n = 0;
  for (const auto &b : val)
    n += add_batch(model, b, device, sums);
  enter(Stage::Train, *model);
  std::cout << "  predicted/observed clicks " << (sums.predicted / sums.clicks).item<double>() << '\n';
  return sums.logloss.item<double>() / static_cast<double>(n);
}

// Fits a new campaign's calibration on its first impressions; the base model is frozen.
Calibration fit_calibration(CtrNet &base, const std::vector<Batch> &first_imps, const torch::Device &device) {
  Calibration calib;
  calib->to(device);
  torch::optim::SGD opt(calib->parameters(), torch::optim::SGDOptions(0.05));
  enter(Stage::Serve, *base);
  opt.zero_grad();
  for (int epoch = 0; epoch < 3; ++epoch)
    for (const auto &b : first_imps) {
      auto base_logit = [&] {
        torch::NoGradGuard no_grad;
        // OK(torch-eval-mode-missing, torch-inference-without-no-grad): Stage::Serve; frozen, under no-grad.
        return base->forward(b.cats.to(device), b.dense.to(device));
      }();
      auto loss = F::binary_cross_entropy_with_logits(calib->forward(base_logit), b.click.to(device));
      loss.backward();
      // BUG(torch-missing-zero-grad): the only reset is before the loops: each step applies all earlier gradients.
      opt.step();
    }
  return calib;
}

}  // namespace ctr
using ctr::Batch;
using ctr::Stage;

class ShardTrainer {
 public:
  ShardTrainer(ctr::CtrNet model, torch::Device device, int64_t accum)
      : model_(std::move(model)), device_(device), accum_(accum),
        opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)) {
    loss_fn_ = [this](const torch::Tensor &logits, const torch::Tensor &y) {
      return F::binary_cross_entropy_with_logits(logits, y) * (1.0 / static_cast<double>(accum_));
    };
    note_ = [this](const torch::Tensor &loss) {
      // OK(torch-loss-accumulation-graph): only detached losses are kept.
      recent_.push_back(loss.detach());
      if (recent_.size() > 500) recent_.pop_front();
    };
  }

  void fit_shard(const std::vector<Batch> &shard) {
    ctr::enter(Stage::Train, *model_);
    for (const auto &b : shard) {
      auto cats = b.cats.to(device_), dense = b.dense.to(device_), y = b.click.to(device_);
      // OK(torch-eval-mode-missing): enter(Stage::Train) above.
      auto loss = loss_fn_(model_->forward(cats, dense), y);
      // OK(torch-grad-accumulation-unscaled): loss_fn_ multiplies by 1 / accum_.
      loss.backward();
      note_(loss);
      if (++micro_ % accum_ == 0) {
        // OK(torch-missing-zero-grad): the reset goes with the step.
        opt_.step();
        opt_.zero_grad();
      }
    }
  }
  double recent_logloss() const {
    return torch::stack(std::vector<torch::Tensor>(recent_.begin(), recent_.end())).mean().item<double>() * accum_;
  }

 private:
  ctr::CtrNet model_;
  torch::Device device_;
  int64_t accum_, micro_ = 0;
  torch::optim::Adam opt_;
  std::function<torch::Tensor(const torch::Tensor &, const torch::Tensor &)> loss_fn_;
  std::function<void(const torch::Tensor &)> note_;
  std::deque<torch::Tensor> recent_;
};

void fence(const torch::Device &device) {
  if (device.is_cuda())
    torch::cuda::synchronize();
}
class BidServer {
 public:
  BidServer(ctr::CtrNet model, ctr::Calibration calib, torch::Device device)
      : model_(std::move(model)), calib_(std::move(calib)), device_(device) {
    model_->to(device_), calib_->to(device_);
    ctr::enter(Stage::Serve, *model_);
  }
  double p_click(Batch req) {
    torch::NoGradGuard no_grad;
    ctr::stage(req, device_);
    // OK(torch-eval-mode-missing): the constructor entered Stage::Serve.
    // BUG(torch-device-mismatch): stage() dropped the dense counters' copy;
    // the model on device_ gets them from the host.
    auto logit = calib_->forward(model_->forward(req.cats, req.dense));
    return torch::sigmoid(logit).item<double>();
  }
  std::vector<float> score_inventory(const Batch &inventory, int64_t chunk) {
    torch::NoGradGuard no_grad;
    std::vector<float> out;
    for (int64_t s = 0; s < inventory.cats.size(0); s += chunk) {
      auto cats = inventory.cats.slice(0, s, s + chunk).to(device_);
      auto dense_host = inventory.dense.slice(0, s, s + chunk);
      torch::Tensor dense = dense_host;
      if (device_.is_cuda()) {
        auto pinned = torch::empty(dense_host.sizes(), dense_host.options().pinned_memory(true));
        pinned.copy_(dense_host);
        // OK(torch-non-blocking-pageable): copied out of a pinned staging buffer.
        dense = pinned.to(device_, /*non_blocking=*/true);
      }
      // OK(torch-device-mismatch, torch-eval-mode-missing, torch-inference-without-no-grad): dense is on device_
      // or device_ is the CPU; Stage::Serve; no-grad above.
      auto p = torch::sigmoid(calib_->forward(model_->forward(cats, dense))).flatten();
      auto host = p.to(torch::kCPU, /*non_blocking=*/true);
      fence(device_);
      // OK(torch-non-blocking-d2h-race): fence() synchronised after the copy.
      auto acc = host.accessor<float, 1>();
      for (int64_t i = 0; i < acc.size(0); ++i) out.push_back(acc[i]);
    }
    return out;
  }

 private:
  ctr::CtrNet model_;
  ctr::Calibration calib_;
  torch::Device device_;
};

std::vector<float> rerank(BidServer &server, const Batch &inventory) {
  int64_t chunk = int64_t{1} << 16;
  std::vector<float> scores;
  try {
    scores = server.score_inventory(inventory, chunk);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry below runs at half the chunk.
    c10::cuda::CUDACachingAllocator::emptyCache();
    chunk /= 2;
    scores = server.score_inventory(inventory, chunk);
  }
  return scores;
}

int main() {
  torch::manual_seed(315);
  // OK(torch-cuda-unguarded, torch-device-index-unchecked): guarded, and ordinal 0.
  const torch::Device device =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  std::vector<std::vector<Batch>> days(3);
  for (auto &day : days)
    for (int i = 0; i < 50; ++i) day.push_back(ctr::synth_batch(512));
  std::vector<Batch> val, first_imps;
  for (int i = 0; i < 8; ++i)
    val.push_back(ctr::synth_batch(2048)), first_imps.push_back(ctr::synth_batch(256));

  ctr::CtrNet net;
  net->to(device);
  ShardTrainer trainer(net, device, 4);
  for (size_t d = 0; d < days.size(); ++d) {
    trainer.fit_shard(days[d]);
    // OK(torch-host-sync-in-loop): one read per day of logs.
    std::cout << "day " << d << " recent " << trainer.recent_logloss() << " val " << ctr::validate(net, val, device)
              << '\n';
  }
  auto calib = ctr::fit_calibration(net, first_imps, device);
  BidServer server(net, calib, device);
  std::cout << "p(click) " << server.p_click(ctr::synth_batch(1)) << '\n';
  auto scores = rerank(server, ctr::synth_batch(100000));
  std::cout << "best ad score " << *std::max_element(scores.begin(), scores.end()) << '\n';
}
