// Image captioning with the CNN encoder on one GPU and the LSTM decoder on
// another (model parallelism for a large vocabulary), trained with teacher
// forcing. A small event bus of std::function callbacks handles logging
// and checkpoint hooks; greedy decoding runs at the end.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

constexpr int64_t kVocab = 20000, kEmb = 256, kHid = 512, kMaxLen = 20, kBos = 1;

struct EncoderImpl : torch::nn::Module {
  EncoderImpl() {
    cnn = register_module("cnn", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 7).stride(4)),
                                                       torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(),
                                                       torch::nn::Linear(64, kHid)));
  }
  torch::Tensor forward(const torch::Tensor &img) { return cnn->forward(img); }
  torch::nn::Sequential cnn{nullptr};
};
TORCH_MODULE(Encoder);

struct DecoderImpl : torch::nn::Module {
  DecoderImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, kEmb))),
        cell(register_module("cell", torch::nn::LSTMCell(kEmb, kHid))),
        out(register_module("out", torch::nn::Linear(kHid, kVocab))) {}
  // One step: token ids [B], state (h, c) -> logits [B, V], new state.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(const torch::Tensor &tok, const torch::Tensor &h,
                                                                   const torch::Tensor &c) {
    auto hc = cell->forward(emb->forward(tok), std::make_tuple(h, c));
    return {out->forward(std::get<0>(hc)), std::get<0>(hc), std::get<1>(hc)};
  }
  torch::nn::Embedding emb;
  torch::nn::LSTMCell cell;
  torch::nn::Linear out;
};
TORCH_MODULE(Decoder);

class EventBus {
 public:
  using Handler = std::function<void(int64_t, const torch::Tensor &)>;
  void on(const std::string &ev, Handler h) { handlers_[ev].push_back(std::move(h)); }
  void emit(const std::string &ev, int64_t step, const torch::Tensor &t) {
    for (auto &h : handlers_[ev])
      h(step, t);
  }

 private:
  std::map<std::string, std::vector<Handler>> handlers_;
};

class Captioner {
 public:
  Captioner(torch::Device enc_dev, torch::Device dec_dev) : enc_dev_(enc_dev), dec_dev_(dec_dev) {
    enc_->to(enc_dev_);
    dec_->to(dec_dev_);
  }
  // Teacher-forced loss over a caption batch [B, L].
  torch::Tensor loss(const torch::Tensor &images, const torch::Tensor &captions) {
    auto feat = enc_->forward(images.to(enc_dev_));
    // OK(torch-device-mismatch): the features cross to the decoder's GPU.
    auto h = feat.to(dec_dev_);
    auto c = torch::zeros_like(h);
    auto caps = captions.to(dec_dev_);
    torch::Tensor total = torch::zeros({}, dec_dev_);
    for (int64_t t = 0; t + 1 < caps.size(1); ++t) {
      auto [logits, h2, c2] = dec_->forward(caps.select(1, t), h, c);
      h = h2;
      c = c2;
      // OK(torch-loss-accumulation-graph): summed over time steps and
      // returned as this batch's loss.
      total = total + torch::nn::functional::cross_entropy(logits, caps.select(1, t + 1));
    }
    return total / (caps.size(1) - 1);
  }
  std::vector<int64_t> greedy(const torch::Tensor &image) {
    torch::NoGradGuard ng;
    auto feat = enc_->forward(image.to(enc_dev_));
    auto h = feat.to(dec_dev_);
    auto c = torch::zeros_like(h);
    auto tok = torch::full({1}, kBos, torch::TensorOptions().dtype(torch::kLong).device(dec_dev_));
    // Never emit the start token again.
    auto ban = torch::zeros({1, kVocab});
    ban.index_put_({0, kBos}, -1e9);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < kMaxLen; ++i) {
      // OK(torch-device-mismatch): the token and the state are on the
      // decoder's device.
      auto [logits, h2, c2] = dec_->forward(tok, h, c);
      h = h2;
      c = c2;
      // BUG(torch-device-mismatch): the ban mask was built on the host; the
      // logits are on the decoder's GPU.
      tok = (logits + ban).argmax(1);
      out.push_back(tok.item<int64_t>());
    }
    return out;
  }
  std::vector<torch::Tensor> parameters() {
    auto p = enc_->parameters();
    for (auto &q : dec_->parameters())
      p.push_back(q);
    return p;
  }

 private:
  torch::Device enc_dev_, dec_dev_;
  Encoder enc_;
  Decoder dec_;
};

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "needs CUDA\n";
    return 1;
  }
  const bool two = torch::cuda::device_count() >= 2;
  // OK(torch-device-index-unchecked, torch-cuda-unguarded): ordinal 1 only
  // when the device count says it exists; CUDA was checked above.
  torch::Device dec_dev = two ? torch::Device(torch::kCUDA, 1) : torch::Device(torch::kCUDA, 0);
  Captioner model(torch::Device(torch::kCUDA, 0), dec_dev);
  torch::optim::Adam opt(model.parameters(), 3e-4);

  EventBus bus;
  double smoothed = 0.0;
  bus.on("step", [&](int64_t step, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the step handler runs after every
    // optimizer step and reads the CUDA loss.
    smoothed = 0.99 * smoothed + 0.01 * loss.item<double>();
    if (step % 200 == 0)
      std::cout << "step " << step << " loss " << smoothed << "\n";
  });

  std::vector<torch::Tensor> epoch_losses;
  for (int64_t step = 0; step < 50000; ++step) {
    auto images = torch::randn({32, 3, 224, 224});
    auto captions = torch::randint(0, kVocab, {32, kMaxLen});
    opt.zero_grad();
    auto loss = model.loss(images, captions);
    loss.backward();
    opt.step();
    bus.emit("step", step, loss);
    // BUG(torch-loss-accumulation-graph): every step's graph, across two
    // GPUs, is kept in the vector.
    epoch_losses.push_back(loss);
  }
  std::cout << "mean loss " << torch::stack(epoch_losses).mean().item<double>() << "\n";
  auto words = model.greedy(torch::randn({1, 3, 224, 224}));
  std::cout << "caption length " << words.size() << "\n";
  return 0;
}
