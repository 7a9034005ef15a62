// Dense optical flow for a warehouse robot's forward camera: a FlowNetS-style
// encoder-decoder regresses the flow between two 96x128 frames rendered from
// shifted random textures (a cheap stand-in for FlyingChairs). An argv parser
// returns the RunConfig, device included. A FramePairPrefetcher owns two host
// staging slots built from TensorOptions chains kept as members: while a step
// runs, it renders into the idle slot and starts that slot's upload. EpeMeter
// objects track end-point error; a PlateauWatch keeps the loss history.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <deque>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;
using torch::indexing::Slice;

constexpr int64_t kH = 96, kW = 128, kPad = 8;

struct RunConfig {
  torch::Device device{torch::kCPU};
  int64_t steps = 3000, batch = 8, log_every = 100;
  double lr = 1e-4;
};

RunConfig parse_args(int argc, char **argv) {
  RunConfig cfg;
  bool want_gpu = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--cpu") want_gpu = false;
    else if (arg == "--steps" && has_value) cfg.steps = std::stoll(argv[++i]);
    else if (arg == "--batch" && has_value) cfg.batch = std::stoll(argv[++i]);
    else if (arg == "--lr" && has_value) cfg.lr = std::stod(argv[++i]);
  }
  if (want_gpu && torch::cuda::is_available())
    cfg.device = torch::Device(torch::kCUDA);
  return cfg;
}

torch::nn::Sequential down(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(2).padding(1)),
                               torch::nn::BatchNorm2d(out),
                               torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.1)));
}

struct FlowNetImpl : torch::nn::Module {
  FlowNetImpl()
      : enc1(register_module("enc1", down(6, 32))),
        enc2(register_module("enc2", down(32, 64))),
        enc3(register_module("enc3", down(64, 128))),
        up2(register_module("up2", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1)))),
        up1(register_module("up1", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(128, 32, 4).stride(2).padding(1)))),
        predict(register_module("predict", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 2, 3).padding(1)))) {}

  torch::Tensor forward(const torch::Tensor &first, const torch::Tensor &second) {
    auto e1 = enc1->forward(torch::cat({first, second}, 1));  // 1/2
    auto e2 = enc2->forward(e1);                               // 1/4
    auto e3 = enc3->forward(e2);                               // 1/8
    auto d2 = torch::leaky_relu(up2->forward(e3), 0.1);
    auto d1 = torch::leaky_relu(up1->forward(torch::cat({d2, e2}, 1)), 0.1);
    auto flow = predict->forward(torch::cat({d1, e1}, 1));
    auto opts = F::InterpolateFuncOptions().size(std::vector<int64_t>{kH, kW}).mode(torch::kBilinear);
    return F::interpolate(flow, opts.align_corners(false)) * 2.0;  // half-resolution flow, in full-res pixels
  }

  torch::nn::Sequential enc1, enc2, enc3;
  torch::nn::ConvTranspose2d up2, up1;
  torch::nn::Conv2d predict;
};
TORCH_MODULE(FlowNet);

struct FlowSample {
  torch::Tensor first, second, flow;  // [N,3,H,W], [N,3,H,W], [N,2,H,W]
};

FlowSample render_pairs(int64_t n) {
  auto texture = torch::rand({n, 3, kH + 2 * kPad, kW + 2 * kPad});
  auto motion = torch::randint(-kPad, kPad + 1, {n, 2}, torch::kLong);  // (dy, dx)
  auto m = motion.accessor<int64_t, 2>();
  std::vector<torch::Tensor> seconds;
  for (int64_t i = 0; i < n; ++i)
    seconds.push_back(texture[i].index({Slice(), Slice(kPad + m[i][0], kPad + m[i][0] + kH),
                                        Slice(kPad + m[i][1], kPad + m[i][1] + kW)}));
  FlowSample s;
  s.first = texture.index({Slice(), Slice(), Slice(kPad, kPad + kH), Slice(kPad, kPad + kW)}).contiguous();
  s.second = torch::stack(seconds);
  s.flow = motion.flip(1).to(torch::kFloat).view({n, 2, 1, 1}).expand({n, 2, kH, kW}).contiguous();
  return s;
}

class FramePairPrefetcher {
 public:
  explicit FramePairPrefetcher(const RunConfig &cfg)
      : device_(cfg.device),
        batch_(cfg.batch),
        frame_opts_(torch::TensorOptions().dtype(torch::kFloat).pinned_memory(cfg.device.is_cuda())),
        flow_opts_(torch::TensorOptions().dtype(torch::kFloat)) {
    for (auto &slot : slots_) {
      slot.frames = torch::empty({batch_, 6, kH, kW}, frame_opts_);
      slot.flow = torch::empty({batch_, 2, kH, kW}, flow_opts_);
    }
  }

  void start() { fill(0); pending_ = upload(0); }
  // Hands out the batch uploaded on the previous call and starts the next.
  std::pair<torch::Tensor, torch::Tensor> next() {
    auto ready = pending_;
    cursor_ ^= 1;
    fill(cursor_);
    pending_ = upload(cursor_);
    return ready;
  }

 private:
  struct Slot {
    torch::Tensor frames, flow;
  };

  void fill(size_t s) {
    auto sample = render_pairs(batch_);
    slots_[s].frames.copy_(torch::cat({sample.first, sample.second}, 1));
    slots_[s].flow.copy_(sample.flow);
  }

  std::pair<torch::Tensor, torch::Tensor> upload(size_t s) {
    // OK(torch-non-blocking-pageable): the frame slots use frame_opts_, which
    // pins them whenever the device is a GPU.
    auto frames = slots_[s].frames.to(device_, /*non_blocking=*/true);
    // BUG(torch-non-blocking-pageable): flow_opts_ has no pinned_memory(true),
    // so the flow slots are pageable and this upload blocks the host.
    auto flow = slots_[s].flow.to(device_, /*non_blocking=*/true);
    return {frames, flow};
  }

  torch::Device device_;
  int64_t batch_;
  torch::TensorOptions frame_opts_, flow_opts_;
  std::array<Slot, 2> slots_;
  size_t cursor_ = 0;
  std::pair<torch::Tensor, torch::Tensor> pending_;
};

class EpeMeter {
 public:
  void update(const torch::Tensor &pred, const torch::Tensor &gt) {
    auto epe = (pred - gt).pow(2).sum(1).sqrt();
    auto within_1px = (epe < 1.0).to(torch::kFloat).mean();
    // BUG(torch-host-sync-in-loop): train() updates the meter after every
    // step, and this copy to the host waits for the step to finish.
    auto stats = torch::stack({epe.mean(), within_1px}).cpu();
    sum_epe_ += stats[0].item<double>();
    sum_1px_ += stats[1].item<double>();
    ++count_;
  }
  double epe() const { return count_ ? sum_epe_ / count_ : 0.0; }
  double px1() const { return count_ ? sum_1px_ / count_ : 0.0; }
  void reset() { sum_epe_ = sum_1px_ = 0.0; count_ = 0; }

 private:
  double sum_epe_ = 0.0, sum_1px_ = 0.0;
  int64_t count_ = 0;
};

class PlateauWatch {
 public:
  void observe(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the history holds every step's
    // loss together with its autograd graph for the whole run.
    history_.push_back(loss);
  }

  // The last `window` steps are not 1% below the window before them.
  bool plateaued(size_t window) const {
    if (history_.size() < 2 * window)
      return false;
    std::vector<torch::Tensor> recent(history_.end() - window, history_.end());
    std::vector<torch::Tensor> before(history_.end() - 2 * window, history_.end() - window);
    return torch::stack(recent).mean().item<double>() > 0.99 * torch::stack(before).mean().item<double>();
  }

 private:
  std::deque<torch::Tensor> history_;
};

void train(FlowNet &net, const RunConfig &cfg, PlateauWatch &watch) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(cfg.lr));
  FramePairPrefetcher prefetcher(cfg);
  EpeMeter train_epe;
  double lr = cfg.lr;
  net->train();
  prefetcher.start();
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    auto [frames, flow_gt] = prefetcher.next();
    auto pred = net->forward(frames.narrow(1, 0, 3), frames.narrow(1, 3, 3));
    auto loss = (pred - flow_gt).pow(2).sum(1).add(1e-6).sqrt().mean();
    opt.zero_grad();
    loss.backward();
    opt.step();

    train_epe.update(pred.detach(), flow_gt);
    watch.observe(loss);
    if (step % cfg.log_every == 0) {
      // OK(torch-host-sync-in-loop): once every log_every steps.
      std::cout << "step " << step << " loss " << loss.item<float>() << " epe " << train_epe.epe() << " <1px "
                << train_epe.px1() << "\n";
      train_epe.reset();
    }
    if (step % 1000 == 0 && watch.plateaued(500)) {
      lr *= 0.5;
      for (auto &group : opt.param_groups())
        static_cast<torch::optim::AdamOptions &>(group.options()).lr(lr);
      std::cout << "plateau, lr -> " << lr << "\n";
    }
  }
}

double validate(FlowNet &net, const RunConfig &cfg, int64_t batches) {
  torch::NoGradGuard no_grad;
  net->eval();
  EpeMeter meter;
  for (int64_t i = 0; i < batches; ++i) {
    auto sample = render_pairs(cfg.batch);
    auto first = sample.first.to(cfg.device);
    auto second = sample.second.to(cfg.device);
    // OK(torch-inference-without-no-grad): the NoGradGuard covers the loop.
    auto pred = net->forward(first, second);
    // BUG(torch-device-mismatch): only the frames were moved; the ground-truth
    // flow is still on the CPU when the meter subtracts it from 'pred'.
    meter.update(pred, sample.flow);
  }
  net->train();
  return meter.epe();
}

int main(int argc, char **argv) {
  torch::manual_seed(199);
  const RunConfig cfg = parse_args(argc, argv);
  FlowNet net;
  net->to(cfg.device);
  PlateauWatch watch;
  train(net, cfg, watch);
  std::cout << "validation EPE " << validate(net, cfg, 25) << " px\n";
  torch::save(net, "flownet_s_lite.pt");
  return 0;
}
