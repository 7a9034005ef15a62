// Offline signature verification with a Siamese CNN trained on genuine /
// forged pairs with a contrastive margin loss. After training, a decision
// threshold is calibrated on a validation set of pairs by embedding them
// all at once; the run configuration is a struct with device fields filled
// from the command line.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

struct RunConfig {
  torch::Device train_device{torch::kCPU};
  int64_t batch = 64;
  int64_t steps = 8000;
  double margin = 1.0;
  bool profile = false;
};

struct SigNetImpl : torch::nn::Module {
  SigNetImpl() {
    features = register_module(
        "features", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 5).stride(2)), torch::nn::ReLU(),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2)), torch::nn::ReLU(),
                                          torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten()));
    proj = register_module("proj", torch::nn::Linear(64, 32));
  }
  torch::Tensor forward(const torch::Tensor &x) { return torch::nn::functional::normalize(proj->forward(features->forward(x))); }
  torch::nn::Sequential features{nullptr};
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(SigNet);

struct PairBatch {
  torch::Tensor a, b, same;
};

PairBatch make_pairs(int64_t n) {
  return {torch::rand({n, 1, 96, 192}), torch::rand({n, 1, 96, 192}), torch::randint(0, 2, {n}).to(torch::kFloat)};
}

torch::Tensor contrastive(const torch::Tensor &ea, const torch::Tensor &eb, const torch::Tensor &same, double margin) {
  auto d = torch::pairwise_distance(ea, eb);
  return (same * d.pow(2) + (1 - same) * torch::clamp_min(margin - d, 0).pow(2)).mean();
}

// Embeds every validation pair in one pass; called once after training.
torch::Tensor embed_distances(SigNet net, const PairBatch &val, torch::Device dev) {
  torch::NoGradGuard ng;
  try {
    return torch::pairwise_distance(net->forward(val.a.to(dev)), net->forward(val.b.to(dev)));
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the allocator already released its
    // cache before raising; the same full-size pass runs again.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return torch::pairwise_distance(net->forward(val.a.to(dev)), net->forward(val.b.to(dev)));
  }
}

double calibrate_threshold(const torch::Tensor &dist, const std::vector<float> &labels) {
  auto truth = torch::from_blob(const_cast<float *>(labels.data()), {static_cast<int64_t>(labels.size())}).clone();
  double best_thr = 0.0, best_acc = 0.0;
  for (double thr = 0.05; thr < 2.0; thr += 0.05) {
    // The distances come from the caller; the labels are rebuilt here on
    // the host.
    auto acc = ((dist < thr).to(torch::kFloat) == truth).to(torch::kFloat).mean().item<double>();
    if (acc > best_acc) {
      best_acc = acc;
      best_thr = thr;
    }
  }
  std::cout << "val acc " << best_acc << "\n";
  return best_thr;
}

int main(int argc, char **argv) {
  RunConfig cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gpu")
      // BUG(torch-cuda-unguarded): --gpu selects CUDA without checking that
      // a GPU is usable.
      cfg.train_device = torch::Device(torch::kCUDA);
    else if (arg == "--profile")
      cfg.profile = true;
  }

  SigNet net;
  net->to(cfg.train_device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  double running = 0.0;
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto p = make_pairs(cfg.batch);
    auto ea = net->forward(p.a.to(cfg.train_device));
    auto eb = net->forward(p.b.to(cfg.train_device));
    // OK(torch-device-mismatch): the pair labels follow the embeddings.
    auto loss = contrastive(ea, eb, p.same.to(cfg.train_device), cfg.margin);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (cfg.profile && cfg.train_device.is_cuda() && step % 100 == 0) {
      // OK(torch-host-sync-in-loop): timing sync every 100 steps when
      // profiling.
      torch::cuda::synchronize();
      std::cout << "step " << step << "\n";
    }
    // BUG(torch-host-sync-in-loop): reading the loss every step stalls the
    // queue of kernels.
    running = 0.98 * running + 0.02 * loss.item<double>();
  }
  std::cout << "smoothed loss " << running << "\n";

  net->eval();
  auto val = make_pairs(512);
  std::vector<float> labels(val.same.data_ptr<float>(), val.same.data_ptr<float>() + 512);
  auto dist = embed_distances(net, val, cfg.train_device);
  // BUG(torch-device-mismatch): the helper compares these distances (on
  // the training device) with labels it builds on the host.
  const double thr = calibrate_threshold(dist, labels);
  std::cout << "threshold " << thr << "\n";
  return 0;
}
