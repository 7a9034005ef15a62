// A GRU encoder-decoder for toy translation: teacher-forced training with a
// per-timestep loss, a loss curve for plotting, and greedy decoding.
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <tuple>
#include <vector>

constexpr int64_t kBos = 1;
constexpr int64_t kEos = 2;

struct NmtConfig {
  int64_t vocab = 1000;
  int64_t hidden = 256;
  int64_t src_len = 20;
  int64_t tgt_len = 22;
  int64_t batch = 32;
  int64_t max_decode = 40;
  bool verbose = false;
};

struct EncoderImpl : torch::nn::Module {
  EncoderImpl(int64_t vocab, int64_t hidden)
      : emb(register_module("emb", torch::nn::Embedding(vocab, hidden))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(hidden, hidden).batch_first(true)))) {}
  torch::Tensor forward(torch::Tensor src) { return std::get<1>(gru->forward(emb(src))); }
  torch::nn::Embedding emb;
  torch::nn::GRU gru;
};
TORCH_MODULE(Encoder);

struct DecoderImpl : torch::nn::Module {
  DecoderImpl(int64_t vocab, int64_t hidden)
      : emb(register_module("emb", torch::nn::Embedding(vocab, hidden))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(hidden, hidden).batch_first(true)))),
        out(register_module("out", torch::nn::Linear(hidden, vocab))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor tokens, torch::Tensor hidden) {
    auto result = gru->forward(emb(tokens), hidden);
    return {out(std::get<0>(result).squeeze(1)), std::get<1>(result)};
  }
  torch::nn::Embedding emb;
  torch::nn::GRU gru;
  torch::nn::Linear out;
};
TORCH_MODULE(Decoder);

class Translator {
 public:
  Translator(const NmtConfig &cfg, torch::Device device)
      : cfg_(cfg), device_(device), encoder_(cfg.vocab, cfg.hidden), decoder_(cfg.vocab, cfg.hidden) {
    encoder_->to(device_);
    decoder_->to(device_);
    std::vector<torch::Tensor> params = encoder_->parameters();
    for (auto &p : decoder_->parameters())
      params.push_back(p);
    optimizer_ = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(5e-4));
  }

  void train_steps(int64_t steps) {
    for (int64_t step = 0; step < steps; ++step) {
      auto src = torch::randint(3, cfg_.vocab, {cfg_.batch, cfg_.src_len}, torch::TensorOptions().dtype(torch::kLong).device(device_));
      auto tgt = torch::randint(3, cfg_.vocab, {cfg_.batch, cfg_.tgt_len}, torch::TensorOptions().dtype(torch::kLong).device(device_));
      auto hidden = encoder_->forward(src);
      auto loss = torch::zeros({}, device_);
      for (int64_t t = 0; t + 1 < cfg_.tgt_len; ++t) {
        // OK(torch-inference-without-no-grad): the per-step losses reach backward() below.
        auto [logits, next] = decoder_->forward(tgt.slice(1, t, t + 1), hidden);
        hidden = next;
        // OK(torch-loss-accumulation-graph): backward() runs through the sum.
        loss = loss + torch::nn::functional::cross_entropy(logits, tgt.select(1, t + 1));
      }
      loss = loss / static_cast<double>(cfg_.tgt_len - 1);
      optimizer_->zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(encoder_->parameters(), 1.0);
      optimizer_->step();
      // BUG(torch-loss-accumulation-graph): the member curve keeps every
      // step's graph alive until the CSV is written.
      loss_curve_.push_back(loss);
      // OK(torch-host-sync-in-loop): printing only in verbose runs.
      if (cfg_.verbose)
        std::cout << "step " << step << " loss " << loss << '\n';
    }
  }

  std::vector<int64_t> translate(const torch::Tensor &src) {
    auto hidden = encoder_->forward(src.to(device_).unsqueeze(0));
    auto tok = torch::full({1, 1}, kBos, torch::TensorOptions().dtype(torch::kLong).device(device_));
    std::vector<int64_t> out;
    for (int64_t t = 0; t < cfg_.max_decode; ++t) {
      // BUG(torch-inference-without-no-grad): greedy decoding records a
      // graph per token; nothing here calls backward().
      auto [logits, next] = decoder_->forward(tok, hidden);
      hidden = next;
      int64_t id = logits.argmax(-1).item<int64_t>();
      if (id == kEos)
        break;
      out.push_back(id);
      tok.fill_(id);
    }
    return out;
  }

  void write_curve(const std::string &path) const {
    std::ofstream csv(path);
    for (size_t i = 0; i < loss_curve_.size(); ++i)
      csv << i << ',' << loss_curve_[i].item<double>() << '\n';
  }

 private:
  NmtConfig cfg_;
  torch::Device device_;
  Encoder encoder_;
  Decoder decoder_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  std::vector<torch::Tensor> loss_curve_;
};

int main() {
  NmtConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Translator model(cfg, device);
  model.train_steps(200);
  model.write_curve("loss.csv");
  auto src = torch::randint(3, cfg.vocab, {cfg.src_len}, torch::kLong);
  for (auto id : model.translate(src))
    std::cout << id << ' ';
  std::cout << '\n';
  return 0;
}
