// Few-shot classification with prototypical networks: each episode draws N
// classes with K support and Q query examples, the prototypes are the mean
// support embeddings, and queries are scored by negative squared distance.
// Devices and episode sizes live in static members of a Settings class; a
// second GPU, when present, hosts a frozen reference encoder.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

namespace fewshot {

struct Settings {
  static torch::Device device;
  static int64_t way, shot, query;
  static void init() {
    device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  }
};
torch::Device Settings::device = torch::kCPU;
int64_t Settings::way = 5;
int64_t Settings::shot = 5;
int64_t Settings::query = 15;

struct Episode {
  torch::Tensor support;  // [way*shot, 1, 28, 28]
  torch::Tensor query;    // [way*query, 1, 28, 28]
  torch::Tensor labels;   // [way*query]
};

struct ConvEncoderImpl : torch::nn::Module {
  ConvEncoderImpl() {
    for (int i = 0; i < 3; ++i) {
      body->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(i == 0 ? 1 : 64, 64, 3).padding(1)));
      body->push_back(torch::nn::ReLU());
      body->push_back(torch::nn::MaxPool2d(2));
    }
    register_module("body", body);
  }
  torch::Tensor forward(const torch::Tensor &x) { return body->forward(x).flatten(1); }
  torch::nn::Sequential body;
};
TORCH_MODULE(ConvEncoder);

Episode sample_episode(std::mt19937 &rng) {
  const auto n_s = Settings::way * Settings::shot, n_q = Settings::way * Settings::query;
  Episode e;
  e.support = torch::randn({n_s, 1, 28, 28});
  e.query = torch::randn({n_q, 1, 28, 28});
  e.labels = torch::arange(Settings::way).repeat_interleave(Settings::query);
  (void)rng;
  return e;
}

torch::Tensor prototypes(ConvEncoder &enc, const torch::Tensor &support) {
  auto emb = enc->forward(support);
  return emb.view({Settings::way, Settings::shot, -1}).mean(1);
}

torch::Tensor logits(const torch::Tensor &protos, const torch::Tensor &q_emb) {
  return -(q_emb.unsqueeze(1) - protos.unsqueeze(0)).pow(2).sum(-1);
}

}  // namespace fewshot

using fewshot::Settings;

int main() {
  Settings::init();
  fewshot::ConvEncoder enc;
  enc->to(Settings::device);
  torch::optim::Adam opt(enc->parameters(), 1e-3);
  std::mt19937 rng(7);

  std::vector<double> acc_history;
  for (int64_t ep = 0; ep < 20000; ++ep) {
    auto e = fewshot::sample_episode(rng);
    auto support = e.support.to(Settings::device);
    auto protos = fewshot::prototypes(enc, support);
    // BUG(torch-device-mismatch): the query images were never moved; the
    // encoder is on Settings::device.
    auto q_emb = enc->forward(e.query);
    auto lg = fewshot::logits(protos, q_emb);
    // OK(torch-device-mismatch): labels on the logits' device.
    auto loss = torch::nn::functional::cross_entropy(lg, e.labels.to(Settings::device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (ep % 100 == 0) {
      // OK(torch-host-sync-in-loop): every 100 episodes.
      auto acc = (lg.argmax(1).cpu() == e.labels).to(torch::kFloat).mean().item<double>();
      acc_history.push_back(acc);
    }
  }

  enc->eval();
  // Reference encoder pinned to the second GPU for a side-by-side check.
  if (torch::cuda::is_available()) {
    // BUG(torch-device-index-unchecked): ordinal 1 without comparing the
    // device count; a one-GPU node throws here.
    torch::Device ref_dev(torch::kCUDA, 1);
    auto ref = std::dynamic_pointer_cast<fewshot::ConvEncoderImpl>(enc->clone(ref_dev));
    ref->eval();
    torch::NoGradGuard ng;
    std::mt19937 eval_rng(11);
    double agree = 0.0;
    for (int i = 0; i < 100; ++i) {
      auto e = fewshot::sample_episode(eval_rng);
      // OK(torch-inference-without-no-grad): NoGradGuard is held.
      auto a = enc->forward(e.query.to(Settings::device));
      auto b = ref->forward(e.query.to(ref_dev));
      // OK(torch-device-mismatch): b is moved back before comparing.
      agree += (a.argmax(1) == b.to(Settings::device).argmax(1)).to(torch::kFloat).mean().item<double>();
    }
    std::cout << "agreement " << agree / 100 << "\n";
  }

  // Final few-shot accuracy on fresh episodes.
  double acc = 0.0;
  std::mt19937 test_rng(99);
  for (int i = 0; i < 600; ++i) {
    auto e = fewshot::sample_episode(test_rng);
    // BUG(torch-inference-without-no-grad): test episodes outside the
    // guard's scope; no backward in this loop.
    auto s_emb = enc->forward(e.support.to(Settings::device));
    auto protos = s_emb.view({Settings::way, Settings::shot, -1}).mean(1);
    // The query pass records a graph too; the check reports one forward
    // per loop (the first).
    auto q = enc->forward(e.query.to(Settings::device));
    acc += (fewshot::logits(protos, q).argmax(1).cpu() == e.labels).to(torch::kFloat).mean().item<double>();
  }
  std::cout << "test acc " << acc / 600 << "\n";
  return 0;
}
