// Deformable registration of brain MR volumes onto an atlas, VoxelMorph style:
// a small 3D conv net predicts a displacement field that warps the moving scan
// through grid_sample. It is pretrained on synthetic deformations with
// gradient accumulation, fitted unsupervised (NCC inside the brain mask plus a
// smoothness penalty) under a bfloat16 autocast scope, scored by atlas Dice,
// and its fields are exported for the NIfTI writer. LibTorch 1.13/2.x.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace reg {

constexpr int64_t kD = 32;

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): falls back to the CPU.
  return torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
}

struct RegNetImpl : nn::Module {
  RegNetImpl()
      : enc(register_module("enc", nn::Sequential(nn::Conv3d(nn::Conv3dOptions(2, 16, 3).stride(2).padding(1)), nn::BatchNorm3d(16),
                                                  nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
                                                  nn::Conv3d(nn::Conv3dOptions(16, 32, 3).stride(2).padding(1)), nn::BatchNorm3d(32),
                                                  nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))))),
        up(register_module("up", nn::Upsample(nn::UpsampleOptions().scale_factor(std::vector<double>{4, 4, 4}).mode(torch::kTrilinear).align_corners(false)))),
        flow(register_module("flow", nn::Conv3d(nn::Conv3dOptions(32, 3, 3).padding(1)))) {}
  torch::Tensor forward(const torch::Tensor &pair) { return 0.1 * flow->forward(up->forward(enc->forward(pair))); }  // B x 3 x D x H x W
  nn::Sequential enc;
  nn::Upsample up;
  nn::Conv3d flow;
};
TORCH_MODULE(RegNet);

namespace ops {
torch::Tensor identity_grid(const torch::Tensor &like) {
  auto axis = torch::linspace(-1.0, 1.0, like.size(2), like.options());
  auto g = torch::meshgrid({axis, axis, axis}, "ij");
  return torch::stack({g[2], g[1], g[0]}, -1).unsqueeze(0);  // 1 x D x H x W x 3, (x, y, z)
}
torch::Tensor warp(const torch::Tensor &moving, const torch::Tensor &flow, bool nearest = false) {
  // OK(torch-device-mismatch): the identity grid is built with the moving volume's options.
  auto grid = identity_grid(moving) + flow.permute({0, 2, 3, 4, 1});
  auto opts = F::GridSampleFuncOptions().padding_mode(torch::kBorder).align_corners(true);
  return F::grid_sample(moving, grid, nearest ? opts.mode(torch::kNearest) : opts.mode(torch::kBilinear));
}
torch::Tensor ncc_loss(const torch::Tensor &a, const torch::Tensor &b) {
  auto am = a - a.mean({2, 3, 4}, true), bm = b - b.mean({2, 3, 4}, true);
  auto num = (am * bm).sum({2, 3, 4});
  return -(num / torch::sqrt((am * am).sum({2, 3, 4}) * (bm * bm).sum({2, 3, 4}) + 1e-5)).mean();
}
torch::Tensor smoothness(const torch::Tensor &flow) {
  auto d = [&](int64_t dim) { return (flow.narrow(dim, 1, kD - 1) - flow.narrow(dim, 0, kD - 1)).pow(2).mean(); };
  return d(2) + d(3) + d(4);
}
torch::Tensor supervised_loss(const torch::Tensor &flow, const torch::Tensor &truth) { return F::mse_loss(flow, truth); }
torch::Tensor dice(const torch::Tensor &a, const torch::Tensor &b) { return 2.0 * (a * b).sum() / (a.sum() + b.sum() + 1e-6); }
}  // namespace ops

class AtlasBank {
 public:
  AtlasBank()
      : image_(F::avg_pool3d(torch::randn({1, 1, kD, kD, kD}), F::AvgPool3dFuncOptions(5).stride(1).padding(2))),
        mask_((image_.abs() > 0.05).to(torch::kFloat)), seg_((image_ > 0.1).to(torch::kFloat)) {}
  const torch::Tensor &image() const { return image_; }
  const torch::Tensor &mask() const { return mask_; }
  const torch::Tensor &seg() const { return seg_; }

 private:
  torch::Tensor image_, mask_, seg_;
};

struct VolumePair {
  torch::Tensor moving, fixed, true_flow;
};
VolumePair to_device(VolumePair p, torch::Device d) { return {p.moving.to(d), p.fixed.to(d), p.true_flow.to(d)}; }

struct Labeled { torch::Tensor image, seg; };
struct FieldExport {
  torch::Tensor flow_host, jacobian_host;
};
struct RunConfig {
  int64_t accum_steps = 4, log_every = 20;
  double smooth_weight = 0.5;
};

// Scanner volumes arrive as int16; the intensity step lives in a config.
struct Preprocess {
  std::function<torch::Tensor(torch::Tensor)> intensity;
};
Preprocess make_preprocess(double clip_frac) {
  return {[clip_frac](torch::Tensor v) {
    // BUG(torch-tensor-to-discarded): the float copy is dropped; v stays int16.
    v.to(torch::kFloat);
    auto hi = v.max().item<double>() * clip_frac;
    return v.clamp(0.0, hi) / hi;
  }};
}

class RegistrationRunner {
 public:
  explicit RegistrationRunner(torch::Device device) : device_(device) { net_->to(device_); }

 protected:
  void enter_eval() { net_->eval(); }
  void enter_train() { net_->train(); }
  RegNet net_;
  torch::Device device_;
};

class Bf16Scope {
 public:
  Bf16Scope() : was_on_(at::autocast::is_enabled()), old_dtype_(at::autocast::get_autocast_gpu_dtype()) {
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  }
  ~Bf16Scope() {
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(old_dtype_);
    at::autocast::clear_cache();
  }

 private:
  bool was_on_;
  at::ScalarType old_dtype_;
};

class AtlasRegistrar : public RegistrationRunner {
 public:
  AtlasRegistrar(torch::Device device, AtlasBank atlas, RunConfig cfg)
      : RegistrationRunner(device), atlas_(std::move(atlas)), cfg_(cfg), opt_(net_->parameters(), torch::optim::AdamOptions(1e-4)) {}

  void pretrain(const std::vector<VolumePair> &pairs) {
    int64_t micro = 0;
    opt_.zero_grad();
    for (size_t i = 0; i < pairs.size(); ++i) {
      auto p = to_device(pairs[i], device_);
      // OK(torch-device-mismatch): to_device() returned the pair with every volume on device_.
      auto flow = net_->forward(torch::cat({p.moving, p.fixed}, 1));
      auto loss = ops::supervised_loss(flow, p.true_flow);
      // BUG(torch-grad-accumulation-unscaled): the mean loss is summed over accum_steps micro-batches undivided.
      loss.backward();
      if (++micro % cfg_.accum_steps == 0) {
        // OK(torch-missing-zero-grad): step and reset share the accumulation condition.
        opt_.step();
        opt_.zero_grad();
      }
      // OK(torch-host-sync-in-loop): logged every cfg_.log_every micro-batches.
      if (i % static_cast<size_t>(cfg_.log_every) == 0) std::cout << "pretrain " << i << " mse " << loss.item<double>() << '\n';
    }
  }

  void fit(const std::vector<torch::Tensor> &scans, int epochs) {
    auto fixed = atlas_.image().to(device_);
    for (int e = 0; e < epochs; ++e) {
      for (const auto &scan : scans) {
        auto moving = scan.to(device_);
        torch::Tensor loss;
        {
          Bf16Scope amp;
          auto flow = net_->forward(torch::cat({moving, fixed}, 1));
          auto warped = ops::warp(moving, flow);
          // BUG(torch-device-mismatch): the brain mask is still the atlas' host tensor.
          auto sim = ops::ncc_loss(warped * atlas_.mask(), fixed * atlas_.mask().to(device_));
          loss = sim + cfg_.smooth_weight * ops::smoothness(flow);
        }
        opt_.zero_grad();
        // OK(torch-autocast-region): the scope's destructor closed the bfloat16 region before backward.
        loss.backward();
        opt_.step();
      }
    }
  }

  double evaluate(const std::vector<Labeled> &val) {
    enter_eval();
    torch::NoGradGuard no_grad;
    auto fixed = atlas_.image().to(device_);
    auto atlas_seg = atlas_.seg().to(device_);
    double total = 0.0;
    for (const auto &v : val) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): enter_eval() of the base and the guard above.
      auto flow = net_->forward(torch::cat({v.image.to(device_), fixed}, 1));
      total += ops::dice(ops::warp(v.seg.to(device_), flow, /*nearest=*/true), atlas_seg).item<double>();
    }
    enter_train();
    return total / static_cast<double>(val.size());
  }

  FieldExport start_export(const torch::Tensor &scan) {
    torch::NoGradGuard no_grad;
    enter_eval();
    auto flow = net_->forward(torch::cat({scan.to(device_), atlas_.image().to(device_)}, 1));
    enter_train();
    auto jac = 1.0 + (flow.narrow(2, 1, kD - 1) - flow.narrow(2, 0, kD - 1)).select(1, 0);
    return {flow.to(torch::kCPU, /*non_blocking=*/true), jac.to(torch::kCPU, /*non_blocking=*/true)};
  }

 private:
  AtlasBank atlas_;
  RunConfig cfg_;
  torch::optim::Adam opt_;
};

void write_raw(const std::string &path, const torch::Tensor &host) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(host.data_ptr<float>()), static_cast<std::streamsize>(host.numel() * sizeof(float)));
}
void wait_for(const torch::Device &d) { if (d.is_cuda()) torch::cuda::synchronize(); }

}  // namespace reg

int main() {
  using namespace reg;
  torch::manual_seed(377);
  const torch::Device device = pick_device();
  Preprocess pre = make_preprocess(0.995);
  auto load_scan = [&pre](int) { return pre.intensity(torch::randint(0, 4000, {1, 1, kD, kD, kD}, torch::kShort)); };

  std::vector<VolumePair> synthetic;
  for (int i = 0; i < 64; ++i) {
    auto truth = 0.05 * F::avg_pool3d(torch::randn({1, 3, kD, kD, kD}), F::AvgPool3dFuncOptions(7).stride(1).padding(3));
    auto fixed = load_scan(i);
    synthetic.push_back({ops::warp(fixed, truth), fixed, truth});
  }
  AtlasRegistrar registrar(device, AtlasBank(), RunConfig{});
  registrar.pretrain(synthetic);
  // OK(torch-empty-cache-in-loop): once, between the two phases.
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();

  std::vector<torch::Tensor> scans;
  for (int i = 0; i < 40; ++i) scans.push_back(load_scan(i));
  registrar.fit(scans, 2);
  std::vector<Labeled> val;
  for (int i = 0; i < 8; ++i) {
    auto img = load_scan(100 + i);
    val.push_back({img, (img > 0.3).to(torch::kFloat)});
  }
  std::cout << "atlas dice " << registrar.evaluate(val) << '\n';

  auto exported = registrar.start_export(scans.front());
  // BUG(torch-non-blocking-d2h-race): the writer reads the field before its copy to the host has landed.
  write_raw("flow.raw", exported.flow_host);
  wait_for(device);
  // OK(torch-non-blocking-d2h-race): wait_for() synchronised the device after both copies.
  write_raw("jacobian.raw", exported.jacobian_host);
  return 0;
}
