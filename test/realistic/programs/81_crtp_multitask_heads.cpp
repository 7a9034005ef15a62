// Multi-task dense prediction on a shared backbone: semantic segmentation,
// monocular depth and surface normals. Each task head derives from a CRTP
// base that owns the head's layers and its loss weight and calls the
// derived class's own loss; the heads are held in a std::tuple and visited
// with std::apply. Per-task running losses live in an unordered_map keyed by
// task name, for the uncertainty-weighting report at the end of training.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

constexpr int64_t kFeat = 64;
constexpr int64_t kSegClasses = 13;
constexpr int64_t kDepthBins = 1;

struct BackboneImpl : torch::nn::Module {
  BackboneImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, kFeat, 3).padding(1)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return torch::relu(c2->forward(torch::relu(c1->forward(x)))); }
  torch::nn::Conv2d c1, c2;
};
TORCH_MODULE(Backbone);

template <typename Derived>
class TaskHead {
 public:
  TaskHead(std::string name, int64_t out, double weight, torch::Device device)
      : name_(std::move(name)), weight_(weight), conv_(torch::nn::Conv2dOptions(kFeat, out, 1)) {
    conv_->to(device);
  }
  torch::Tensor predict(const torch::Tensor &feat) { return conv_->forward(feat); }
  torch::Tensor weighted_loss(const torch::Tensor &feat, const torch::Tensor &target) {
    return weight_ * static_cast<Derived &>(*this).loss(predict(feat), target);
  }
  std::vector<torch::Tensor> parameters() const { return conv_->parameters(); }
  const std::string &name() const { return name_; }

 protected:
  std::string name_;
  double weight_;
  torch::nn::Conv2d conv_;
};

struct SegHead : TaskHead<SegHead> {
  explicit SegHead(torch::Device d) : TaskHead("seg", kSegClasses, 1.0, d) {}
  torch::Tensor loss(const torch::Tensor &logits, const torch::Tensor &target) {
    return torch::nn::functional::cross_entropy(logits, target);
  }
};

struct DepthHead : TaskHead<DepthHead> {
  explicit DepthHead(torch::Device d) : TaskHead("depth", kDepthBins, 0.5, d) {}
  torch::Tensor loss(const torch::Tensor &pred, const torch::Tensor &target) {
    // Log-depth error, with depth given in metres up to a 10 m range.
    return torch::l1_loss(torch::log1p(pred.relu() * 10.0), torch::log1p(target));
  }
};

struct NormalHead : TaskHead<NormalHead> {
  explicit NormalHead(torch::Device d) : TaskHead("normal", 3, 0.25, d) {}
  torch::Tensor loss(const torch::Tensor &pred, const torch::Tensor &target) {
    auto n = torch::nn::functional::normalize(pred, torch::nn::functional::NormalizeFuncOptions().dim(1));
    return (1.0 - (n * target).sum(1)).mean();
  }
  // Unit normals in the camera convention of the renderer (y and z flipped).
  torch::Tensor camera_normals(const torch::Tensor &feat) {
    auto n = torch::nn::functional::normalize(conv_->forward(feat),
                                              torch::nn::functional::NormalizeFuncOptions().dim(1));
    // BUG(torch-device-mismatch): the axis flip is a host tensor of shape
    // [1, 3, 1, 1]; the head's output is on its device.
    return n * flip_;
  }
  torch::Tensor flip_ = torch::tensor({1.0f, -1.0f, -1.0f}).view({1, 3, 1, 1});
};

struct Targets {
  torch::Tensor seg, depth, normal;
};

template <typename Batch>
void prefetch(Batch &batch) {
  // BUG(torch-tensor-to-discarded): the dense NCHW copy is thrown away; the
  // batch keeps its strided view of the NHWC decode buffer.
  batch.image.contiguous();
  // OK(torch-tensor-to-discarded): assigned back.
  batch.targets.seg = batch.targets.seg.contiguous();
}

struct HostBatch {
  torch::Tensor image;
  Targets targets;
};

HostBatch synthetic_batch(int64_t bs) {
  return {torch::rand({bs, 64, 64, 3}).permute({0, 3, 1, 2}),
          {torch::randint(0, kSegClasses, {bs, 64, 64}, torch::kLong), torch::rand({bs, 1, 64, 64}) * 10.0,
           torch::nn::functional::normalize(torch::randn({bs, 3, 64, 64}),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1))}};
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Backbone backbone;
  backbone->to(device);
  std::tuple<SegHead, DepthHead, NormalHead> heads{SegHead(device), DepthHead(device), NormalHead(device)};

  std::vector<torch::Tensor> params = backbone->parameters();
  auto add = [&](const std::vector<torch::Tensor> &ps) { params.insert(params.end(), ps.begin(), ps.end()); };
  std::apply([&](auto &...h) { (add(h.parameters()), ...); }, heads);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));

  std::unordered_map<std::string, torch::Tensor> task_totals{{"seg", torch::zeros({}, device)},
                                                             {"depth", torch::zeros({}, device)}};
  auto total = torch::zeros({}, device);
  for (int64_t step = 0; step < 3000; ++step) {
    auto batch = synthetic_batch(8);
    prefetch(batch);
    auto feat = backbone->forward(batch.image.to(device));
    auto &[seg_head, depth_head, normal_head] = heads;
    // OK(torch-device-mismatch): the target was moved to the device.
    auto seg = seg_head.weighted_loss(feat, batch.targets.seg.to(device));
    auto depth = depth_head.weighted_loss(feat, batch.targets.depth.to(device));
    auto normal = normal_head.weighted_loss(feat, batch.targets.normal.to(device));
    auto loss = seg + depth + normal;
    opt.zero_grad();
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph): detached before it is kept.
    total += loss.detach();
    // BUG(torch-loss-accumulation-graph): the per-task total lives in a map
    // declared before the loop and chains every step's graph.
    task_totals.at("seg") += seg;
    // OK(torch-loss-accumulation-graph): detached.
    task_totals.at("depth") += depth.detach();
    // BUG(torch-host-sync-in-loop): printing the device total copies it to
    // the host on every step.
    std::cout << "\rrunning total " << total << std::flush;
  }
  {
    torch::NoGradGuard no_grad;
    auto probe = synthetic_batch(1);
    auto feat = backbone->forward(probe.image.to(device));
    auto normals = std::get<NormalHead>(heads).camera_normals(feat);
    torch::save(normals.cpu(), "normals_probe.pt");
  }
  std::cout << "\nseg " << task_totals.at("seg").item<double>() << " depth "
            << task_totals.at("depth").item<double>() << "\n";
  return 0;
}
