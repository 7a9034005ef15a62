// Card-transaction fraud scoring on tabular rows (amount, merchant bucket,
// hour of day, velocity features). A CRTP TrainerBase owns the step loop and
// calls the derived trainer's `train_step` and `on_step_end` hooks; an
// Uploader class template takes a staging policy that decides how its host
// buffer is allocated. A canary replica on the serving box's second GPU is
// compared with the candidate before a release, and the nightly report scores
// a whole day of transactions in one go.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <utility>

constexpr int64_t kFeat = 24, kRows = 512;

struct FraudNetImpl : torch::nn::Cloneable<FraudNetImpl> {
  FraudNetImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(kFeat, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 64));
    out = register_module("out", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(const torch::Tensor &x) {
    return out(torch::relu(fc2(torch::relu(fc1(x))))).squeeze(-1);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
};
TORCH_MODULE(FraudNet);

// About 2% of the rows are fraud; fraud rows have large amounts at night.
std::pair<torch::Tensor, torch::Tensor> sample_transactions(int64_t n) {
  auto x = torch::randn({n, kFeat});
  auto y = (torch::rand({n}) < 0.02).to(torch::kFloat);
  x.select(1, 0).add_(y * 3.0);
  x.select(1, 1).add_(y * -2.0);
  return {x, y};
}

// Staging policies: where the uploader's host buffer lives.
struct PinnedRows {
  static torch::Tensor alloc(int64_t n) { return torch::empty({n, kFeat}, torch::TensorOptions().pinned_memory(true)); }
};
struct PlainRows {
  static torch::Tensor alloc(int64_t n) { return torch::empty({n, kFeat}); }
};

template <class Rows> class Uploader {
 public:
  Uploader(int64_t rows, torch::Device device) : host_(Rows::alloc(rows)), device_(device) {}
  torch::Tensor upload(const torch::Tensor &rows) {
    host_.copy_(rows);
    // BUG(torch-non-blocking-pageable): in the Uploader<PlainRows>
    // instantiation the staging buffer is ordinary pageable memory, so the
    // "asynchronous" upload is synchronous.
    return host_.to(device_, /*non_blocking=*/true);
  }

 private:
  torch::Tensor host_;
  torch::Device device_;
};

template <class Derived> class TrainerBase {
 public:
  void run(int steps) {
    for (int s = 0; s < steps; ++s) {
      auto loss = self().train_step();
      self().on_step_end(s, loss);
    }
  }

 private:
  Derived &self() { return static_cast<Derived &>(*this); }
};

class FraudTrainer : public TrainerBase<FraudTrainer> {
 public:
  FraudTrainer(FraudNet net, torch::Device device)
      : net_(std::move(net)), device_(device), uploader_(kRows, device),
        opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  torch::Tensor train_step() {
    auto [x, y] = sample_transactions(kRows);
    auto logits = net_->forward(uploader_.upload(x));
    auto loss = torch::binary_cross_entropy_with_logits(logits, y.to(device_));
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    return loss.detach();
  }

  void on_step_end(int step, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): run() calls this hook after every
    // training step, and the loss lives on the trainer's device.
    ema_ = 0.98 * ema_ + 0.02 * loss.item<double>();
    if (step % 200 == 0)
      std::cout << "step " << step << " loss(ema) " << ema_ << "\n";
  }

 private:
  FraudNet net_;
  torch::Device device_;
  Uploader<PlainRows> uploader_;
  torch::optim::Adam opt_;
  double ema_ = 0.0;
};

// The canary replica always lives on the serving box's second GPU.
double canary_agreement(FraudNet &candidate, const torch::Tensor &rows) {
  torch::NoGradGuard no_grad;
  // BUG(torch-device-index-unchecked): a job that is given one GPU sees
  // only ordinal 0; nothing compares the count with 2.
  const torch::Device canary_device("cuda:1");
  auto replica = std::dynamic_pointer_cast<FraudNetImpl>(candidate->clone(canary_device));
  auto a = candidate->forward(rows.to(candidate->fc1->weight.device())).gt(0).cpu();
  auto b = replica->forward(rows.to(canary_device)).gt(0).cpu();
  return a.eq(b).to(torch::kFloat).mean().item<double>();
}

// A second opinion on a spare GPU when the machine has one.
torch::Device shadow_device() {
  // OK(torch-device-index-unchecked, torch-cuda-unguarded): ordinal 1 only
  // when two devices are visible.
  return torch::cuda::device_count() >= 2 ? torch::Device(torch::kCUDA, 1) : torch::Device(torch::kCPU);
}

// Scores the whole day's transactions for the nightly report.
torch::Tensor score_day(FraudNet &net, const torch::Tensor &day, torch::Device device) {
  torch::NoGradGuard no_grad;
  torch::Tensor scores;
  bool done = false;
  int attempts = 0;
  do {
    try {
      scores = torch::sigmoid(net->forward(day.to(device)));
      done = true;
    } catch (const c10::OutOfMemoryError &) {
      // BUG(torch-empty-cache-oom-retry): the do-while runs the same day at
      // the same size again; the allocator emptied its cache before raising.
      // BUG(torch-empty-cache-in-loop): and the call itself sits in the
      // do-while, once per failed attempt.
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
  } while (!done && ++attempts < 3);
  return scores.cpu();
}

int main() {
  torch::manual_seed(5);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  FraudNet net;
  net->to(device);

  FraudTrainer trainer(net, device);
  trainer.run(3000);

  {
    torch::NoGradGuard no_grad;
    Uploader<PinnedRows> pinned(kRows, device);
    auto [x, y] = sample_transactions(kRows);
    auto probs = torch::sigmoid(net->forward(pinned.upload(x)));
    auto flagged = probs.gt(0.5).to(torch::kFloat);
    auto tp = (flagged * y.to(device)).sum();
    std::cout << "precision@0.5 " << (tp / flagged.sum().clamp_min(1)).item<double>() << "\n";

    const torch::Device shadow = shadow_device();
    FraudNet second;
    second->to(shadow);
    // OK(torch-device-mismatch): the rows follow the shadow model's device.
    auto second_opinion = second->forward(x.to(shadow));
    std::cout << "shadow mean score " << torch::sigmoid(second_opinion).mean().item<double>() << "\n";
  }

  if (torch::cuda::is_available())
    std::cout << "canary agreement " << canary_agreement(net, sample_transactions(kRows).first) << "\n";

  auto day = sample_transactions(200000).first;
  auto scores = score_day(net, day, device);
  std::cout << "alerts today: " << scores.gt(0.9).sum().item<int64_t>() << "\n";
  return 0;
}
