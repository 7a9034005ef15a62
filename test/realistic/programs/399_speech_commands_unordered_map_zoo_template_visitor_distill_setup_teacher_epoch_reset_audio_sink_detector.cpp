// Speech commands (35 words, 1 s clips as 40 MFCC x 98 frames). A zoo of
// three widths of one conv net lives in an unordered_map keyed by name and is
// driven by small free function templates: train every model, benchmark the
// zoo, export it. The widest model then teaches a tiny student for the
// microcontroller build, the "base" model is fine-tuned on noisy far-field
// clips, and the student runs as a streaming detector behind an audio source
// callback.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace speech {

constexpr int64_t kMfcc = 40, kFrames = 98, kWords = 35;

struct KwsNetImpl : nn::Module {
  explicit KwsNetImpl(int64_t width)
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, width, 3).padding(1)))),
        bn1(register_module("bn1", nn::BatchNorm2d(width))),
        conv2(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(width, 2 * width, 3).stride(2).padding(1)))),
        bn2(register_module("bn2", nn::BatchNorm2d(2 * width))),
        drop(register_module("drop", nn::Dropout(0.2))),
        fc(register_module("fc", nn::Linear(2 * width, kWords))) {}
  torch::Tensor forward(const torch::Tensor &x) {  // B x 1 x 40 x 98
    auto h = torch::relu(bn1->forward(conv1->forward(x)));
    h = torch::relu(bn2->forward(conv2->forward(h)));
    return fc->forward(drop->forward(h.mean({2, 3})));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Dropout drop;
  nn::Linear fc;
};
TORCH_MODULE(KwsNet);

struct Batch {
  torch::Tensor mfcc, words;
};

struct CommandSet {
  explicit CommandSet(int64_t n)
      : mfcc(torch::randn({n, 1, kMfcc, kFrames})), words(torch::randint(0, kWords, {n}, torch::kLong)) {}
  int64_t size() const { return mfcc.size(0); }
  Batch batch(int64_t i, int64_t bs) const {
    const int64_t n = std::min(bs, size() - i);
    return {mfcc.narrow(0, i, n), words.narrow(0, i, n)};
  }
  torch::Tensor mfcc, words;
};

using Zoo = std::unordered_map<std::string, KwsNet>;

template <typename ZooT, typename Fn>
void for_each_model(ZooT &zoo, Fn &&fn) {
  for (auto &entry : zoo) fn(entry.first, entry.second);
}

void train_one(KwsNet &net, const CommandSet &data, int epochs) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = 0; i + 128 <= data.size(); i += 128) {
      const Batch b = data.batch(i, 128);
      opt.zero_grad();
      // OK(torch-eval-mode-missing): train() above.
      auto loss = F::cross_entropy(net->forward(b.mfcc), b.words);
      loss.backward();
      opt.step();
    }
  }
}

template <typename ZooT>
std::map<std::string, double> benchmark(ZooT &zoo, const CommandSet &test) {
  torch::NoGradGuard no_grad;
  std::map<std::string, double> acc;
  for (auto &[name, net] : zoo) {
    int64_t correct = 0;
    for (int64_t i = 0; i < test.size(); i += 512) {
      const Batch b = test.batch(i, 512);
      // BUG(torch-eval-mode-missing): train_one() left every net of the zoo in training mode; nothing switched them.
      correct += net->forward(b.mfcc).argmax(1).eq(b.words).sum().template item<int64_t>();
    }
    acc[name] = static_cast<double>(correct) / static_cast<double>(test.size());
  }
  return acc;
}

template <typename ZooT>
void export_zoo(ZooT &zoo, const torch::Tensor &example) {
  torch::NoGradGuard no_grad;
  for (auto &entry : zoo) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): main switched the zoo to eval first; guard above.
    const auto out = entry.second->forward(example);
    TORCH_CHECK(out.size(1) == kWords, "bad head on ", entry.first);
    torch::save(entry.second, "kws_" + entry.first + ".pt");
  }
}

struct DistillSetup {
  KwsNet teacher;
  double temperature;
  double alpha;
};

class Distiller {
 public:
  Distiller(KwsNet student, DistillSetup setup)
      : student_(std::move(student)), setup_(std::move(setup)), opt_(student_->parameters(), torch::optim::AdamOptions(2e-3)) {}

  void fit(const CommandSet &data, int epochs) {
    student_->train();
    const double t = setup_.temperature;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      begin_epoch();
      for (int64_t i = 0; i + 64 <= data.size(); i += 64) {
        const Batch b = data.batch(i, 64);
        torch::Tensor soft;
        {
          torch::NoGradGuard no_grad;
          // BUG(torch-eval-mode-missing): the teacher comes from the zoo in training mode; dropout perturbs the soft targets.
          soft = torch::softmax(setup_.teacher->forward(b.mfcc) / t, 1);
        }
        // OK(torch-eval-mode-missing): the student trains, in training mode.
        auto logits = student_->forward(b.mfcc);
        auto kd = F::kl_div(torch::log_softmax(logits / t, 1), soft, F::KLDivFuncOptions().reduction(torch::kBatchMean));
        update(setup_.alpha * t * t * kd + (1.0 - setup_.alpha) * F::cross_entropy(logits, b.words));
      }
    }
  }

 private:
  void begin_epoch() { opt_.zero_grad(); }
  void update(const torch::Tensor &loss) {
    loss.backward();
    // BUG(torch-missing-zero-grad): begin_epoch() is the only reset; every batch of an epoch adds to the earlier ones.
    opt_.step();
  }

  KwsNet student_;
  DistillSetup setup_;
  torch::optim::Adam opt_;
};

// Far-field clips: reverberant and noisy, a couple of epochs adapt the features.
void finetune_noisy(KwsNet &net, const CommandSet &noisy, int epochs) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = 0; i + 64 <= noisy.size(); i += 64) {
      const Batch b = noisy.batch(i, 64);
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): the export switched the whole zoo to eval; fine-tuning never calls train().
      auto logits = net->forward(b.mfcc + 0.1 * torch::randn_like(b.mfcc));
      F::cross_entropy(logits, b.words).backward();
      opt.step();
    }
  }
}

class StreamingDetector {
 public:
  StreamingDetector(KwsNet net, int64_t hop) : net_(std::move(net)), hop_(hop) { net_->eval(); }
  // One 10 ms MFCC frame in; a keyword id out when the last second is confident.
  std::optional<int64_t> push(const torch::Tensor &frame) {
    window_.push_back(frame);
    if (static_cast<int64_t>(window_.size()) > kFrames) window_.pop_front();
    if (static_cast<int64_t>(window_.size()) < kFrames || ++since_ < hop_) return std::nullopt;
    since_ = 0;
    const auto x = torch::stack(std::vector<torch::Tensor>(window_.begin(), window_.end()), 1).unsqueeze(0).unsqueeze(0);
    // BUG(torch-inference-without-no-grad): AudioSource::run calls this for every frame with autograd on.
    const auto post = torch::softmax(net_->forward(x), 1).squeeze(0);
    const auto best = post.argmax().item<int64_t>();
    if (post[best].item<double>() < 0.9) return std::nullopt;
    return best;
  }

 private:
  KwsNet net_;
  std::deque<torch::Tensor> window_;
  int64_t hop_;
  int64_t since_ = 0;
};

class AudioSource {
 public:
  explicit AudioSource(torch::Tensor mfcc_stream) : stream_(std::move(mfcc_stream)) {}
  void run(const std::function<void(const torch::Tensor &)> &sink) const {
    for (int64_t t = 0; t < stream_.size(1); ++t) sink(stream_.select(1, t));
  }

 private:
  torch::Tensor stream_;  // 40 x T
};

}  // namespace speech

int main() {
  using namespace speech;
  torch::manual_seed(399);
  const CommandSet train(12000), test(3000), noisy(2000);

  Zoo zoo;
  zoo.emplace("tiny", KwsNet(16));
  zoo.emplace("base", KwsNet(32));
  zoo.emplace("wide", KwsNet(64));
  for_each_model(zoo, [&](const std::string &name, KwsNet &net) {
    train_one(net, train, name == "wide" ? 20 : 12);
  });
  for (const auto &[name, acc] : benchmark(zoo, test)) std::cout << name << " acc " << acc << '\n';

  KwsNet student(8);
  Distiller distiller(student, DistillSetup{zoo.at("wide"), 4.0, 0.7});
  distiller.fit(train, 10);

  for_each_model(zoo, [](const std::string &, KwsNet &net) { net->eval(); });
  export_zoo(zoo, torch::randn({1, 1, kMfcc, kFrames}));
  finetune_noisy(zoo.at("base"), noisy, 2);

  StreamingDetector detector(student, /*hop=*/10);
  AudioSource mic(torch::randn({kMfcc, 6000}));
  int64_t hits = 0;
  mic.run([&](const torch::Tensor &frame) {
    if (detector.push(frame)) ++hits;
  });
  std::cout << "keywords heard: " << hits << '\n';
  return 0;
}
