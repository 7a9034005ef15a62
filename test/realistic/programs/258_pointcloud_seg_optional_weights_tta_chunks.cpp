// Semantic segmentation of indoor LiDAR scans with a PointNet-style network:
// a baseline mIoU of the pretrained network, class-balanced fine-tuning on a
// new building, then labelling a whole scene in chunks with test-time
// rotation averaging. Chunks go to the GPU through a pinned staging buffer;
// an out-of-memory error on a large scene is retried once.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kClasses = 13, kPoints = 4096;

struct PointSegImpl : torch::nn::Module {
  PointSegImpl()
      : c1(register_module("c1", torch::nn::Conv1d(3, 64, 1))),
        c2(register_module("c2", torch::nn::Conv1d(64, 128, 1))),
        c3(register_module("c3", torch::nn::Conv1d(128, 512, 1))),
        bn1(register_module("bn1", torch::nn::BatchNorm1d(64))),
        bn2(register_module("bn2", torch::nn::BatchNorm1d(128))),
        bn3(register_module("bn3", torch::nn::BatchNorm1d(512))),
        head(register_module("head", torch::nn::Sequential(torch::nn::Conv1d(512 + 64, 128, 1), torch::nn::BatchNorm1d(128),
                                                           torch::nn::ReLU(), torch::nn::Dropout(0.3),
                                                           torch::nn::Conv1d(128, kClasses, 1)))) {}
  // points [B, 3, N] -> logits [B, kClasses, N]
  torch::Tensor forward(const torch::Tensor &pts) {
    auto local = torch::relu(bn1->forward(c1->forward(pts)));
    auto g = torch::relu(bn3->forward(c3->forward(torch::relu(bn2->forward(c2->forward(local))))));
    auto global = std::get<0>(g.max(2, /*keepdim=*/true)).expand({-1, -1, pts.size(2)});
    return head->forward(torch::cat({local, global}, 1));
  }
  torch::nn::Conv1d c1, c2, c3;
  torch::nn::BatchNorm1d bn1, bn2, bn3;
  torch::nn::Sequential head;
};
TORCH_MODULE(PointSeg);

struct CloudBatch {
  torch::Tensor points;  // [B, N, 3]
  torch::Tensor labels;  // [B, N]
};

class ScanLoader {
 public:
  explicit ScanLoader(int64_t batch) : batch_(batch) {}
  CloudBatch next() { return {torch::randn({batch_, kPoints, 3}), torch::randint(0, kClasses, {batch_, kPoints}, torch::kLong)}; }

 private:
  int64_t batch_;
};

torch::Tensor pinned(const torch::Tensor &t) { return t.pin_memory(); }

class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(torch::Device device) : counts_(torch::zeros({kClasses * kClasses}, torch::TensorOptions().dtype(torch::kLong).device(device))) {}
  void update(const torch::Tensor &pred, const torch::Tensor &truth) {
    counts_ += torch::bincount((truth * kClasses + pred).flatten(), {}, kClasses * kClasses);
  }
  double miou() const {
    auto host = counts_.view({kClasses, kClasses}).to(torch::kCPU, /*non_blocking=*/true);
    torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised before the accessor.
    auto cm = host.accessor<int64_t, 2>();
    double sum = 0.0;
    for (int64_t c = 0; c < kClasses; ++c) {
      int64_t row = 0, col = 0;
      for (int64_t k = 0; k < kClasses; ++k) row += cm[c][k], col += cm[k][c];
      sum += static_cast<double>(cm[c][c]) / static_cast<double>(std::max<int64_t>(row + col - cm[c][c], 1));
    }
    return sum / kClasses;
  }

 private:
  torch::Tensor counts_;
};

namespace seg {
double evaluate_miou(PointSeg &net, ScanLoader &loader, int64_t batches, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  ConfusionMatrix cm(device);
  for (int64_t i = 0; i < batches; ++i) {
    auto b = loader.next();
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and a NoGradGuard above.
    auto logits = net->forward(b.points.to(device).transpose(1, 2));
    cm.update(logits.argmax(1), b.labels.to(device));
  }
  return cm.miou();
}
}  // namespace seg

// Inverse-sqrt class frequencies of the new building's labels.
torch::Tensor inverse_frequency(ScanLoader &loader, int64_t batches) {
  auto counts = torch::zeros({kClasses});
  for (int64_t i = 0; i < batches; ++i) counts += torch::bincount(loader.next().labels.flatten(), {}, kClasses).to(torch::kFloat);
  auto w = (counts.sum() / (counts + 1.0)).sqrt();
  return w / w.mean();
}

struct FinetuneConfig {
  int64_t steps = 2000;
  int64_t log_every = 100;
  double lr = 1e-3;
  std::optional<torch::Tensor> class_weights;
};

void finetune(PointSeg &net, ScanLoader &loader, const FinetuneConfig &cfg, torch::Device device) {
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  ConfusionMatrix cm(device);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto batch = loader.next();
    // BUG(torch-tensor-to-discarded): pinned() returns a pinned copy; the
    // batch keeps its pageable points.
    pinned(batch.points);
    // BUG(torch-non-blocking-pageable): batch.points is still the loader's
    // pageable tensor.
    auto pts = batch.points.to(device, /*non_blocking=*/true).transpose(1, 2);
    auto labels = batch.labels.to(device);
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): the baseline evaluation left the network
    // in eval mode; fine-tuning never calls train(), so BatchNorm is frozen
    // and dropout is off.
    auto logits = net->forward(pts);
    auto logp = F::log_softmax(logits, F::LogSoftmaxFuncOptions(1));
    if (cfg.class_weights)
      // BUG(torch-device-mismatch): the class weights were computed on the
      // host; the log-probabilities are on the fine-tuning device.
      logp = logp * cfg.class_weights->view({1, kClasses, 1});
    auto loss = F::nll_loss(logp, labels);
    loss.backward();
    // OK(torch-missing-zero-grad): zero_grad() before each forward.
    opt.step();
    // OK(torch-loss-accumulation-graph): argmax indices carry no graph.
    cm.update(logits.argmax(1), labels);
    if (step % cfg.log_every == 0)
      // OK(torch-host-sync-in-loop): only on logging steps.
      std::cout << "step " << step << " nll " << loss.item<float>() << "\n";
  }
  std::cout << "fine-tune train mIoU " << cm.miou() << "\n";
}

// Rotation about the up axis, on the chunk's device.
torch::Tensor rotation_z(double a, const torch::TensorOptions &opts) {
  const double c = std::cos(a), s = std::sin(a);
  return torch::tensor({{c, -s, 0.0}, {s, c, 0.0}, {0.0, 0.0, 1.0}}, opts);
}

template <class Net>
torch::Tensor tta_logits(Net &net, const torch::Tensor &chunk, const std::vector<double> &angles) {
  auto sum = torch::zeros({1, kClasses, chunk.size(0)}, chunk.options());
  for (double a : angles) {
    // OK(torch-device-mismatch): the rotation is built with the chunk's options.
    auto pts = torch::matmul(chunk, rotation_z(a, chunk.options())).t().unsqueeze(0);
    // BUG(torch-inference-without-no-grad): scene labelling never
    // backpropagates, yet every rotation's activations are recorded.
    // OK(torch-eval-mode-missing): evaluate_miou() left the net in eval mode.
    auto logits = net->forward(pts);
    // OK(torch-loss-accumulation-graph): the sum is this chunk's result,
    // returned, and nothing trains here.
    sum = sum + logits;
  }
  return sum / static_cast<double>(angles.size());
}

class PinnedStaging {
 public:
  explicit PinnedStaging(int64_t max_points)
      : host_(torch::empty({max_points, 3}, torch::TensorOptions().pinned_memory(true))) {}
  torch::Tensor upload(const torch::Tensor &chunk, torch::Device device) {
    auto slot = host_.narrow(0, 0, chunk.size(0));
    slot.copy_(chunk);
    // OK(torch-non-blocking-pageable): a view of the pinned staging buffer.
    return slot.to(device, /*non_blocking=*/true);
  }

 private:
  torch::Tensor host_;
};

struct ChunkOptions {
  int64_t chunk_points = 65536;
  std::vector<double> angles = {0.0, M_PI / 2, M_PI, 3 * M_PI / 2};
};

torch::Tensor run_chunks(PointSeg &net, const torch::Tensor &scene, const ChunkOptions &opts, torch::Device device,
                         PinnedStaging &staging) {
  std::vector<torch::Tensor> labels;
  for (int64_t start = 0; start < scene.size(0); start += opts.chunk_points) {
    const int64_t n = std::min(opts.chunk_points, scene.size(0) - start);
    auto chunk = staging.upload(scene.narrow(0, start, n), device);
    auto logits = tta_logits(net, chunk, opts.angles);
    // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): labels
    // only, read back per chunk of an inference pass.
    labels.push_back(logits.argmax(1).squeeze(0).cpu());
  }
  return torch::cat(labels);
}

torch::Tensor segment_scene(PointSeg &net, const torch::Tensor &scene, const ChunkOptions &opts, torch::Device device) {
  PinnedStaging staging(opts.chunk_points);
  try {
    return run_chunks(net, scene, opts, device, staging);
  } catch (const c10::OutOfMemoryError &e) {
    std::cerr << "out of memory on a scene of " << scene.size(0) << " points, retrying\n";
    // BUG(torch-empty-cache-oom-retry): the allocator already emptied its
    // cache before raising; the same chunks fail again.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  return run_chunks(net, scene, opts, device, staging);
}

int main() {
  torch::manual_seed(258);
  if (!torch::cuda::is_available()) {
    std::cerr << "scene labelling needs a GPU\n";
    return 1;
  }
  // OK(torch-cuda-unguarded): returned above without CUDA.
  const torch::Device device(torch::kCUDA);
  PointSeg net;
  net->to(device);
  ScanLoader val(8), train(16);
  std::cout << "baseline mIoU " << seg::evaluate_miou(net, val, 10, device) << "\n";

  FinetuneConfig cfg;
  cfg.class_weights = inverse_frequency(train, 50);
  finetune(net, train, cfg, device);
  std::cout << "fine-tuned mIoU " << seg::evaluate_miou(net, val, 10, device) << "\n";

  auto scene = torch::randn({1000000, 3});
  auto labels = segment_scene(net, scene, ChunkOptions{}, device);
  std::cout << "labelled " << labels.size(0) << " points, " << (labels == 0).sum().item<int64_t>() << " ceiling\n";
  return 0;
}
