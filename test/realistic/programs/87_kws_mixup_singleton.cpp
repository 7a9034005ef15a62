// Keyword spotting on log-mel frames with mixup. A process-wide Config
// singleton holds the device and the batch geometry; feature extraction
// happens on the host into std::vector buffers, which are uploaded either
// through a pinned staging tensor or directly. Streaming inference copies
// the per-window posteriors back asynchronously.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#define KWS_LOG(msg) (std::cerr << "[kws] " << msg << "\n")

class Config {
 public:
  static Config &get() {
    static Config instance;
    return instance;
  }
  torch::Device device{torch::kCPU};
  int64_t batch = 64, frames = 98, mels = 40, classes = 12;

 private:
  Config() {
    if (torch::cuda::is_available())
      device = torch::Device(torch::kCUDA);
  }
};

struct KwsNetImpl : torch::nn::Module {
  KwsNetImpl(int64_t mels, int64_t classes)
      : conv1(register_module("conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(mels, 128, 5).padding(2)))),
        conv2(register_module("conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(128, 128, 5).padding(2)))),
        head(register_module("head", torch::nn::Linear(128, classes))) {}
  torch::Tensor forward(const torch::Tensor &x) {  // x: [B, mels, frames]
    auto h = torch::relu(conv2->forward(torch::relu(conv1->forward(x))));
    return head->forward(h.mean(2));
  }
  torch::nn::Conv1d conv1, conv2;
  torch::nn::Linear head;
};
TORCH_MODULE(KwsNet);

void extract_features(std::vector<float> &buf, std::vector<int64_t> &labels, std::mt19937 &rng) {
  std::normal_distribution<float> n(0.f, 1.f);
  auto &c = Config::get();
  buf.resize(c.batch * c.mels * c.frames);
  labels.resize(c.batch);
  for (auto &v : buf)
    v = n(rng);
  for (auto &l : labels)
    l = static_cast<int64_t>(rng() % c.classes);
}

int main() {
  auto &cfg = Config::get();
  KwsNet net(cfg.mels, cfg.classes);
  net->to(cfg.device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-2));
  std::mt19937 rng(3);
  std::vector<float> feat;
  std::vector<int64_t> labels;
  auto staging = torch::empty({cfg.batch, cfg.mels, cfg.frames}, torch::TensorOptions().pinned_memory(cfg.device.is_cuda()));
  auto x_dev = torch::empty({cfg.batch, cfg.mels, cfg.frames}, torch::TensorOptions().device(cfg.device));

  for (int64_t step = 0; step < 30000; ++step) {
    extract_features(feat, labels, rng);
    staging.copy_(torch::from_blob(feat.data(), {cfg.batch, cfg.mels, cfg.frames}));
    // OK(torch-non-blocking-pageable): the staging tensor is pinned.
    x_dev.copy_(staging, /*non_blocking=*/true);
    auto y = torch::from_blob(labels.data(), {cfg.batch}, torch::kLong);
    // BUG(torch-non-blocking-pageable): the labels are a from_blob view of
    // a std::vector, pageable host memory.
    auto y_dev = y.to(cfg.device, /*non_blocking=*/true);

    const double lam = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    auto perm = torch::randperm(cfg.batch, torch::TensorOptions().device(cfg.device));
    auto mixed = lam * x_dev + (1 - lam) * x_dev.index_select(0, perm);
    opt.zero_grad();
    auto out = net->forward(mixed);
    auto loss = lam * torch::nn::functional::cross_entropy(out, y_dev) +
                (1 - lam) * torch::nn::functional::cross_entropy(out, y_dev.index_select(0, perm));
    loss.backward();
    opt.step();
    if (step % 250 == 0)
      // OK(torch-host-sync-in-loop): logged every 250 steps.
      KWS_LOG("step " << step << " loss " << loss.item<float>());
  }

  // Streaming inference over a long utterance: one window every 10 frames.
  net->eval();
  torch::NoGradGuard ng;
  auto utter = torch::randn({1, cfg.mels, 2000});
  // BUG(torch-tensor-to-discarded): contiguous() returns its result and
  // never changes `utter` in place.
  utter.contiguous();
  auto windows = utter.unfold(2, cfg.frames, 10).squeeze(0).permute({1, 0, 2});
  auto post = torch::softmax(net->forward(windows.to(cfg.device)), 1);
  auto post_host = post.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the accessor reads the host copy
  // before it is known to be complete.
  auto acc = post_host.accessor<float, 2>();
  int64_t hits = 0;
  for (int64_t w = 0; w < acc.size(0); ++w)
    if (acc[w][1] > 0.8f)
      ++hits;
  KWS_LOG("keyword windows " << hits);

  auto scores = post.max(1);
  auto best_host = std::get<0>(scores).to(torch::kCPU, /*non_blocking=*/true);
  if (cfg.device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised before the read.
  KWS_LOG("peak posterior " << best_host.max().item<float>());
  return 0;
}
