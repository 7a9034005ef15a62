// Draft findings for chest X-rays: a small CNN encodes the frontal view and a
// GRU decoder with dropout writes the report token by token. The radiology
// group trains it with gradient accumulation over studies (one study per
// micro-batch, reports vary in length), fine-tunes it in CUDA autocast
// (float16, its default), then mixes in scheduled sampling; the reporting
// service decodes greedily. One autocast switch, med::amp(bool), serves
// LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace med {
#if TORCH_VERSION_MAJOR >= 2
inline void amp(bool on) { at::autocast::set_autocast_enabled(at::kCUDA, on); }
#else
inline void amp(bool on) { at::autocast::set_enabled(on); }
#endif
}  // namespace med

constexpr int64_t kVocab = 3000, kHidden = 256, kPad = 0, kBos = 1, kEos = 2;

struct ReportConfig {
  double lr = 2e-4;
  int64_t studies_per_update = 8;
  double teacher_forcing = 0.75;
};

struct ReportModelImpl : nn::Module {
  ReportModelImpl()
      : encoder(register_module("encoder", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 4).stride(4)), nn::BatchNorm2d(32), nn::ReLU(),
                                                          nn::Conv2d(nn::Conv2dOptions(32, 64, 4).stride(4)), nn::BatchNorm2d(64), nn::ReLU(),
                                                          nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(64, kHidden)))),
        embed(register_module("embed", nn::Embedding(kVocab, kHidden))),
        gru(register_module("gru", nn::GRU(nn::GRUOptions(kHidden, kHidden).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.3))),
        out(register_module("out", nn::Linear(kHidden, kVocab))) {}
  // frontal view [B, 1, 256, 256] -> initial decoder state [1, B, H]
  torch::Tensor encode(const torch::Tensor& image) { return encoder->forward(image).unsqueeze(0); }
  // (state, tokens [B, L]) -> (logits [B, L, V], state)
  std::tuple<torch::Tensor, torch::Tensor> decode(const torch::Tensor& h, const torch::Tensor& tokens) {
    auto [seq, h_next] = gru->forward(embed->forward(tokens), h);
    return {out->forward(drop->forward(seq)), h_next};
  }
  nn::Sequential encoder;
  nn::Embedding embed;
  nn::GRU gru;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(ReportModel);

struct Study {
  torch::Tensor image, report;  // [1, 1, 256, 256], [1, L] token ids, BOS ... EOS PAD*
};

struct StepOutputs {
  torch::Tensor loss;    // mean token cross-entropy
  torch::Tensor tokens;  // non-pad target tokens
};

struct EpochLog {
  torch::Tensor token_nll, tokens;
};

namespace {
torch::Tensor token_xent(const torch::Tensor& logits, const torch::Tensor& target) {
  return F::cross_entropy(logits.reshape({-1, kVocab}), target.reshape(-1), F::CrossEntropyFuncOptions().ignore_index(kPad));
}
}  // namespace

class ReportTrainer {
 public:
  ReportTrainer(ReportModel model, const ReportConfig& cfg)
      : model_(std::move(model)), cfg_(cfg), opt_(model_->parameters(), torch::optim::AdamOptions(cfg.lr)) {}

  void train_epoch(const std::vector<Study>& studies, EpochLog& log) {
    model_->train();
    opt_.zero_grad();
    for (const auto& s : studies) {
      auto out = forward_step(s);
      // BUG(torch-grad-accumulation-unscaled): cfg_.studies_per_update studies
      // add up before each step; the mean token loss is not divided by it.
      out.loss.backward();
      // BUG(torch-loss-accumulation-graph): log is the caller's, outlives the
      // loop, and keeps every study's graph.
      log.token_nll += out.loss * out.tokens;
      // OK(torch-loss-accumulation-graph): a count from a comparison carries no graph.
      log.tokens += out.tokens;
      if (++in_update_ == cfg_.studies_per_update) {
        // OK(torch-missing-zero-grad): step and reset share the condition.
        opt_.step();
        opt_.zero_grad();
        in_update_ = 0;
      }
    }
  }

  void finetune_amp(const std::vector<Study>& studies) {
    model_->train();
    for (const auto& s : studies) {
      opt_.zero_grad();
      med::amp(true);
      StepOutputs out = forward_step(s);
      med::amp(false);
      // BUG(torch-autocast-region): out.loss was computed in the float16
      // region and reaches backward() with no loss scale.
      out.loss.backward();
      opt_.step();
    }
  }

  void scheduled_sampling(const std::vector<Study>& studies) {
    model_->train();
    std::mt19937 rng(343);
    std::bernoulli_distribution teacher(cfg_.teacher_forcing);
    for (const auto& s : studies) {
      torch::Tensor loss;
      if (teacher(rng)) {
        opt_.zero_grad();
        loss = forward_step(s).loss;
      } else {
        loss = free_running_loss(s);
      }
      loss.backward();
      // BUG(torch-missing-zero-grad): only the teacher-forced branch resets;
      // a free-running study adds to the previous step's gradients.
      opt_.step();
    }
  }

 private:
  StepOutputs forward_step(const Study& s) {
    const int64_t len = s.report.size(1);
    auto target = s.report.narrow(1, 1, len - 1);
    auto logits = std::get<0>(model_->decode(model_->encode(s.image), s.report.narrow(1, 0, len - 1)));
    return {token_xent(logits, target), (target != kPad).sum()};
  }

  // Feeds the model its own greedy tokens instead of the reference.
  torch::Tensor free_running_loss(const Study& s) {
    auto h = model_->encode(s.image);
    auto token = s.report.narrow(1, 0, 1);
    std::vector<torch::Tensor> steps;
    for (int64_t t = 1; t < s.report.size(1); ++t) {
      auto [logits, h_next] = model_->decode(h, token);
      // OK(torch-loss-accumulation-graph): the per-token logits build this
      // study's loss, which the caller backpropagates.
      steps.push_back(logits);
      h = h_next;
      token = logits.argmax(-1);
    }
    return token_xent(torch::cat(steps, 1), s.report.narrow(1, 1, s.report.size(1) - 1));
  }

  ReportModel model_;
  ReportConfig cfg_;
  torch::optim::Adam opt_;
  int64_t in_update_ = 0;
};

std::vector<int64_t> generate(ReportModel& model, const torch::Tensor& image, int64_t max_len) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> tokens{kBos};
  // BUG(torch-autocast-region): the EOS return inside the decode loop leaves
  // the reporting service's thread in autocast.
  med::amp(true);
  auto h = model->encode(image);
  auto token = torch::full({1, 1}, kBos, torch::TensorOptions().dtype(torch::kLong).device(image.device()));
  for (int64_t t = 0; t < max_len; ++t) {
    auto [logits, h_next] = model->decode(h, token);
    const int64_t next = logits.argmax(-1).item<int64_t>();
    if (next == kEos)
      return tokens;
    tokens.push_back(next);
    h = h_next;
    token.fill_(next);
  }
  med::amp(false);
  return tokens;
}

std::vector<Study> synth(int64_t n, torch::Device device) {
  auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<Study> out;
  for (int64_t i = 0; i < n; ++i) {
    auto report = torch::randint(3, kVocab, {1, 24 + i % 8}, longs);
    report.index_put_({0, 0}, kBos);
    report.index_put_({0, -1}, kEos);
    out.push_back({torch::rand({1, 1, 256, 256}, device), report});
  }
  return out;
}

int main() {
  torch::manual_seed(343);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  ReportConfig cfg;
  ReportModel model;
  model->to(device);
  ReportTrainer trainer(model, cfg);

  EpochLog log{torch::zeros({}, device), torch::zeros({}, device)};
  trainer.train_epoch(synth(32, device), log);
  std::cout << "token NLL " << (log.token_nll / log.tokens).item<double>() << '\n';
  trainer.finetune_amp(synth(16, device));
  trainer.scheduled_sampling(synth(16, device));

  auto draft = generate(model, torch::rand({1, 1, 256, 256}, device), 64);
  std::cout << "draft report: " << draft.size() << " tokens\n";
}
