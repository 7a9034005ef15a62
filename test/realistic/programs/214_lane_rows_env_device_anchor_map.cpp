// Lane detection for a dash-cam ADAS prototype: an Ultra-Fast-Lane-Detection
// style row-anchor classifier. For each of kRows row anchors and kLanes lane
// slots the head picks one of kCells horizontal cells, or "absent". Frames are
// synthetic: straight lanes of random slope painted on noisy asphalt.
// The device comes from LANE_DEVICE through device_from_env(). RowAnchorTable
// keeps the decoding priors in an unordered_map member; FrameStager owns host
// buffers made by two factory helpers and uploads them from another method;
// readback_lanes() hands decoded lanes back to the host as a pair.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace F = torch::nn::functional;
using torch::indexing::Slice;

constexpr int64_t kH = 144, kW = 256, kRows = 18, kLanes = 4, kCells = 50, kBatch = 16;

torch::Device device_from_env() {
  if (!torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  const char *spec = std::getenv("LANE_DEVICE");
  // BUG(torch-device-index-unchecked): the default names the second GPU and
  // only is_available() was checked; a one-GPU node cannot open "cuda:1".
  return torch::Device(spec != nullptr ? spec : "cuda:1");
}

// Four stride-2 conv/BN/ReLU stages: 144x256 -> 9x16.
torch::nn::Sequential make_backbone() {
  torch::nn::Sequential seq;
  const int64_t widths[] = {3, 32, 64, 128, 128};
  for (int i = 0; i < 4; ++i) {
    seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(widths[i], widths[i + 1], 3).stride(2).padding(1).bias(false)));
    seq->push_back(torch::nn::BatchNorm2d(widths[i + 1]));
    seq->push_back(torch::nn::ReLU());
  }
  return seq;
}

struct LaneNetImpl : torch::nn::Module {
  LaneNetImpl()
      : backbone(register_module("backbone", make_backbone())),
        squeeze(register_module("squeeze", torch::nn::Conv2d(torch::nn::Conv2dOptions(128, 8, 1)))),
        head(register_module("head", torch::nn::Sequential(torch::nn::Linear(8 * 9 * 16, 512), torch::nn::ReLU(),
                                                           torch::nn::Dropout(0.2),
                                                           torch::nn::Linear(512, (kCells + 1) * kRows * kLanes)))) {}

  // [N,3,144,256] -> logits [N, kCells+1, kRows, kLanes]
  torch::Tensor forward(const torch::Tensor &x) {
    auto feat = squeeze->forward(backbone->forward(x)).flatten(1);
    return head->forward(feat).view({-1, kCells + 1, kRows, kLanes});
  }

  torch::nn::Sequential backbone;
  torch::nn::Conv2d squeeze;
  torch::nn::Sequential head;
};
TORCH_MODULE(LaneNet);

// Fills images [N,3,H,W] and cell labels [N,kRows,kLanes] (kCells = no lane).
void render_roads(torch::Tensor &images, torch::Tensor &cells) {
  const int64_t n = images.size(0);
  auto row_y = torch::linspace(kH * 0.4, kH - 1, kRows);
  auto base = torch::rand({n, 1, kLanes}) * kW;
  auto slope = (torch::rand({n, 1, kLanes}) - 0.5) * 3.0;
  auto xs = base + slope * (row_y.view({1, kRows, 1}) - (kH - 1));  // [n, rows, lanes]
  auto c = (xs / kW * kCells).floor().to(torch::kLong);
  cells.copy_(c.masked_fill((c < 0) | (c >= kCells), kCells));
  auto cols = torch::arange(kW, torch::kFloat).view({1, 1, 1, kW});
  auto band = ((cols - xs.unsqueeze(-1)).abs() < 2.0).any(2).to(torch::kFloat);  // [n, rows, W]
  images.copy_(0.3 + 0.05 * torch::randn({n, 3, kH, kW}));
  auto rows = row_y.to(torch::kLong);
  images.index_put_({Slice(), Slice(), rows}, torch::max(images.index({Slice(), Slice(), rows}), band.unsqueeze(1)));
}

// Decoding priors: the pixel row of each anchor and the centre x of each cell.
class RowAnchorTable {
 public:
  RowAnchorTable() {
    priors_["row_y"] = torch::linspace(kH * 0.4, kH - 1, kRows).view({1, kRows, 1});
    priors_["cell_x"] = ((torch::arange(kCells, torch::kFloat) + 0.5) * (double(kW) / kCells)).view({1, kCells, 1, 1});
  }

  void to(torch::Device device) {
    for (auto &entry : priors_)
      // BUG(torch-tensor-to-discarded): Tensor::to returns the moved copy; the
      // map still holds the CPU priors afterwards.
      entry.second.to(device);
  }

  const torch::Tensor &get(const std::string &name) const { return priors_.at(name); }

 private:
  std::unordered_map<std::string, torch::Tensor> priors_;
};

struct FrameStaging {
  torch::Tensor images;  // [B,3,H,W] float
  torch::Tensor cells;   // [B,kRows,kLanes] long
};

torch::Tensor make_image_buffer(int64_t batch) { return torch::empty({batch, 3, kH, kW}).pin_memory(); }
torch::Tensor make_label_buffer(int64_t batch) { return torch::empty({batch, kRows, kLanes}, torch::kLong); }

class FrameStager {
 public:
  FrameStager(torch::Device device, int64_t batch)
      : device_(device), host_{make_image_buffer(batch), make_label_buffer(batch)} {}

  std::pair<torch::Tensor, torch::Tensor> next() {
    render_roads(host_.images, host_.cells);
    // OK(torch-non-blocking-pageable): make_image_buffer() pins the frames.
    auto images = host_.images.to(device_, /*non_blocking=*/true);
    // BUG(torch-non-blocking-pageable): make_label_buffer() never pins, so
    // this copy is synchronous despite the flag.
    auto cells = host_.cells.to(device_, /*non_blocking=*/true);
    return {images, cells};
  }

 private:
  torch::Device device_;
  FrameStaging host_;
};

class LaneAccuracy {
 public:
  void update(const torch::Tensor &logits, const torch::Tensor &cells) {
    auto hit = logits.argmax(1).eq(cells).to(torch::kFloat).mean();
    // BUG(torch-host-sync-in-loop): train() calls update() after every step;
    // item() stalls the host until that step has run on the GPU.
    hits_ += hit.item<double>();
    ++count_;
  }
  double value() const { return count_ ? hits_ / count_ : 0.0; }
  void reset() { hits_ = 0.0; count_ = 0; }

 private:
  double hits_ = 0.0;
  int64_t count_ = 0;
};

class LossTrend {
 public:
  void push(const torch::Tensor &loss) {
    running_ = running_.defined() ? running_ * 0.98 + loss.detach() * 0.02 : loss.detach();
  }
  // OK(torch-host-sync-in-loop): read only when train() logs, every 100 steps.
  double value() const { return running_.item<double>(); }

 private:
  torch::Tensor running_;
};

std::pair<torch::Tensor, torch::Tensor> readback_lanes(const torch::Tensor &lane_x, const torch::Tensor &present) {
  return {lane_x.to(torch::kCPU, /*non_blocking=*/true), present.to(torch::kCPU, /*non_blocking=*/true)};
}

void train(LaneNet &net, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(4e-4).weight_decay(1e-4));
  FrameStager stager(device, kBatch);
  LaneAccuracy acc;
  LossTrend trend;
  net->train();
  for (int64_t step = 1; step <= steps; ++step) {
    auto [images, cells] = stager.next();
    auto logits = net->forward(images);
    auto loss = F::cross_entropy(logits, cells);
    opt.zero_grad();
    loss.backward();
    opt.step();
    acc.update(logits.detach(), cells);
    trend.push(loss);
    if (step % 100 == 0) {
      std::cout << "step " << step << " loss " << trend.value() << " cell acc " << acc.value() << "\n";
      acc.reset();
    }
  }
}

void evaluate(LaneNet &net, const RowAnchorTable &anchors, torch::Device device, int64_t batches) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto images = torch::empty({kBatch, 3, kH, kW});
  auto cells = torch::empty({kBatch, kRows, kLanes}, torch::kLong);
  double abs_err = 0.0;
  int64_t matched = 0;
  for (int64_t b = 0; b < batches; ++b) {
    render_roads(images, cells);
    auto logits = net->forward(images.to(device));
    auto probs = logits.narrow(1, 0, kCells).softmax(1);
    // BUG(torch-device-mismatch): the anchor table's to() dropped its result,
    // so cell_x is still on the CPU while probs is on `device`.
    auto lane_x = (probs * anchors.get("cell_x")).sum(1);  // [N, rows, lanes] in pixels
    auto present = logits.argmax(1).ne(kCells);
    auto [host_x, host_present] = readback_lanes(lane_x, present);
    // BUG(torch-non-blocking-d2h-race): nothing waited for readback_lanes'
    // copies; the accessor reads buffers the GPU may still be writing.
    auto px = host_x.accessor<float, 3>();
    // BUG(torch-non-blocking-d2h-race): the presence mask is a second pending
    // copy from the same helper, read just as early.
    auto on = host_present.accessor<bool, 3>();
    auto gt = cells.accessor<int64_t, 3>();
    for (int64_t i = 0; i < kBatch; ++i)
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t l = 0; l < kLanes; ++l)
          if (on[i][r][l] && gt[i][r][l] < kCells) {
            abs_err += std::abs(px[i][r][l] - (gt[i][r][l] + 0.5) * double(kW) / kCells);
            ++matched;
          }
  }
  net->train();
  std::cout << "mean |dx| " << (matched ? abs_err / matched : 0.0) << " px over " << matched << " points\n";
}

void write_preview(LaneNet &net, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto images = torch::empty({1, 3, kH, kW});
  auto cells = torch::empty({1, kRows, kLanes}, torch::kLong);
  render_roads(images, cells);
  auto logits = net->forward(images.to(device));
  std::tuple<torch::Tensor, torch::Tensor> host{logits.argmax(1).to(torch::kCPU, /*non_blocking=*/true),
                                                logits.softmax(1).amax(1).to(torch::kCPU, /*non_blocking=*/true)};
  if (device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): the device was synchronised above.
  std::cout << "preview cells\n" << std::get<0>(host)[0] << "\nconfidence " << std::get<1>(host).mean().item<float>()
            << "\n";
  net->train();
}

int main() {
  torch::manual_seed(214);
  const torch::Device device = device_from_env();
  LaneNet net;
  net->to(device);
  RowAnchorTable anchors;
  anchors.to(device);
  train(net, device, 3000);
  evaluate(net, anchors, device, 20);
  write_preview(net, device);
  torch::save(net, "lane_rows.pt");
  return 0;
}
