// Offline semantic-segmentation inference over a directory of camera frames.
// Frames are decoded on the host into a reusable staging buffer, uploaded,
// segmented, and the class masks come back through a small ring of readback
// slots so that the copy of frame i overlaps the forward of frame i+1. Each
// mask feeds a per-class pixel histogram and a run-length encoder that
// writes the result file.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

constexpr int64_t kClasses = 8;
constexpr int64_t kH = 128;
constexpr int64_t kW = 160;

struct SegNetImpl : torch::nn::Module {
  SegNetImpl()
      : enc1(register_module("enc1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        enc2(register_module("enc2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, kClasses, 1)))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(enc1->forward(x));
    x = torch::relu(enc2->forward(x));
    return head->forward(x);
  }
  torch::nn::Conv2d enc1, enc2, head;
};
TORCH_MODULE(SegNet);

// Pretend JPEG decoder: fills an HWC byte buffer.
void decode_frame(const std::string &path, std::vector<uint8_t> &hwc) {
  hwc.assign(kH * kW * 3, static_cast<uint8_t>(path.size() % 251));
}

// Wraps the decoded bytes as a float CHW image (a view of the vector first).
torch::Tensor to_chw(std::vector<uint8_t> &hwc) {
  auto bytes = torch::from_blob(hwc.data(), {kH, kW, 3}, torch::kUInt8);
  return bytes.permute({2, 0, 1}).to(torch::kFloat).div_(255.0).unsqueeze(0);
}

// Run-length encodes one mask row by row (reads the host buffer).
std::string rle(const torch::Tensor &mask) {
  auto m = mask.accessor<int64_t, 2>();
  std::string out;
  for (int64_t y = 0; y < m.size(0); ++y) {
    int64_t run = 1;
    for (int64_t x = 1; x <= m.size(1); ++x) {
      if (x < m.size(1) && m[y][x] == m[y][x - 1]) {
        ++run;
        continue;
      }
      out += std::to_string(m[y][x - 1]) + ":" + std::to_string(run) + " ";
      run = 1;
    }
    out += "\n";
  }
  return out;
}

struct ReadbackSlot {
  torch::Tensor host;
  std::string name;
};

class MaskWriter {
 public:
  explicit MaskWriter(const std::string &path) : out_(path) {}
  void write(const std::string &name, const torch::Tensor &mask) { out_ << name << "\n" << rle(mask); }

 private:
  std::ofstream out_;
};

// Per-class pixel counts, kept on the host.
class ClassHistogram {
 public:
  ClassHistogram() : counts_(torch::zeros({kClasses}, torch::kLong)) {}
  void add(const torch::Tensor &mask) { counts_ += torch::bincount(mask.flatten(), {}, kClasses); }
  void print() const { std::cout << "class pixels: " << counts_ << "\n"; }

 private:
  torch::Tensor counts_;
};

std::vector<std::string> list_frames(int64_t n) {
  std::vector<std::string> frames;
  for (int64_t i = 0; i < n; ++i)
    frames.push_back("frames/" + std::to_string(i) + ".jpg");
  return frames;
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "this tool needs a GPU\n";
    return 1;
  }
  torch::Device device(torch::kCUDA);
  SegNet net;
  torch::load(net, "segnet.pt");
  net->to(device);
  net->eval();
  torch::NoGradGuard no_grad;

  MaskWriter writer("masks.rle");
  ClassHistogram hist;
  std::array<ReadbackSlot, 2> ring;
  std::vector<uint8_t> hwc;
  auto staging = torch::empty({1, 3, kH, kW}, torch::TensorOptions().pinned_memory(true));

  const auto frames = list_frames(256);
  for (size_t i = 0; i < frames.size(); ++i) {
    decode_frame(frames[i], hwc);
    staging.copy_(to_chw(hwc));
    // OK(torch-non-blocking-pageable): the staging buffer is pinned.
    auto input = staging.to(device, /*non_blocking=*/true);
    // OK(torch-inference-without-no-grad): main() holds a NoGradGuard.
    auto mask = net->forward(input).argmax(1).squeeze(0);

    auto &slot = ring[i % ring.size()];
    if (slot.host.defined()) {
      // BUG(torch-non-blocking-d2h-race): the previous frame's copy into this
      // slot was never waited for; the writer reads a half-filled mask.
      writer.write(slot.name, slot.host);
    }
    slot.host = mask.to(torch::kCPU, /*non_blocking=*/true);
    slot.name = frames[i];
  }
  torch::cuda::synchronize();
  for (auto &slot : ring) {
    if (!slot.host.defined())
      continue;
    // OK(torch-non-blocking-d2h-race): synchronised after the last copy.
    writer.write(slot.name, slot.host);
  }

  // A second, small pass computes the class histogram of a few frames at a
  // lower latency budget: the frame is uploaded straight from the decoder.
  std::vector<torch::Tensor> pending;
  for (size_t i = 0; i < 16 && i < frames.size(); ++i) {
    decode_frame(frames[i], hwc);
    // BUG(torch-non-blocking-pageable): to_chw() returns a tensor made from
    // pageable host memory; the upload stays synchronous.
    auto input = to_chw(hwc).to(device, /*non_blocking=*/true);
    pending.push_back(net->forward(input).argmax(1).squeeze(0).to(torch::kCPU, /*non_blocking=*/true));
  }
  for (const auto &mask : pending) {
    // BUG(torch-non-blocking-d2h-race): every element of 'pending' is an
    // asynchronous copy that nothing has waited for.
    hist.add(mask);
  }
  hist.print();
  return 0;
}
