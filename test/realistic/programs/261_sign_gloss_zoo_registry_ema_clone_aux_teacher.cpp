// Isolated sign-language recognition: each clip is 32 frames of 42 hand and
// upper-body keypoints (x, y), classified into one of 20 glosses by a
// temporal convolution network whose blocks (dilated conv, batch norm,
// dropout) are stacked in a Sequential. A small zoo of widths is trained and
// ranked; a compact student is then distilled from the widest model, with the
// handshape expert of the zoo as an auxiliary teacher passed in as a
// callable, and an EMA shadow of the student (a clone()) is what ships.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kCoords = 84, kFrames = 32, kGlosses = 20, kDepth = 3;

struct Clip {
  torch::Tensor pose;   // [B, 84, 32]
  torch::Tensor gloss;  // [B]
};

Clip synth_clip(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto gloss = torch::randint(kGlosses, {n}, gen, torch::kLong);
  auto t = torch::linspace(0, 6.28, kFrames).view({1, 1, kFrames});
  auto freq = (gloss.to(torch::kFloat) + 1).view({n, 1, 1}) / 4.0;
  auto joint = torch::arange(kCoords).to(torch::kFloat).view({1, kCoords, 1});
  return {torch::sin(t * freq + joint / 7.0) + 0.1 * torch::randn({n, kCoords, kFrames}, gen), gloss};
}

struct TemporalBlockImpl : nn::Cloneable<TemporalBlockImpl> {
  TemporalBlockImpl(int64_t width, int64_t dilation) : width_(width), dilation_(dilation) { reset(); }
  void reset() override {
    conv = register_module(
        "conv", nn::Conv1d(nn::Conv1dOptions(width_, width_, 3).padding(dilation_).dilation(dilation_)));
    bn = register_module("bn", nn::BatchNorm1d(width_));
    drop = register_module("drop", nn::Dropout(0.2));
  }
  torch::Tensor forward(const torch::Tensor &x) { return x + drop->forward(torch::relu(bn->forward(conv->forward(x)))); }
  int64_t width_, dilation_;
  nn::Conv1d conv{nullptr};
  nn::BatchNorm1d bn{nullptr};
  nn::Dropout drop{nullptr};
};
TORCH_MODULE(TemporalBlock);

struct SignNetImpl : nn::Cloneable<SignNetImpl> {
  explicit SignNetImpl(int64_t width) : width_(width) { reset(); }
  void reset() override {
    stem = register_module("stem", nn::Conv1d(nn::Conv1dOptions(kCoords, width_, 1)));
    tcn = register_module("tcn", nn::Sequential());
    for (int64_t level = 0; level < kDepth; ++level)
      tcn->push_back(TemporalBlock(width_, int64_t{1} << level));
    head = register_module("head", nn::Linear(width_, kGlosses));
  }
  torch::Tensor forward(const torch::Tensor &pose) { return head->forward(tcn->forward(stem->forward(pose)).mean(2)); }
  int64_t width_;
  nn::Conv1d stem{nullptr};
  nn::Sequential tcn{nullptr};
  nn::Linear head{nullptr};
};
TORCH_MODULE(SignNet);

using Zoo = std::unordered_map<std::string, std::shared_ptr<SignNetImpl>>;

std::shared_ptr<SignNetImpl> lookup(const Zoo &zoo, const std::string &name) {
  auto it = zoo.find(name);
  if (it == zoo.end())
    throw std::out_of_range("no model named " + name);
  return it->second;
}

void train_net(SignNetImpl &net, const std::vector<Clip> &clips, int epochs) {
  net.train();
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(2e-3));
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (const auto &clip : clips) {
      opt.zero_grad();
      auto loss = F::cross_entropy(net.forward(clip.pose), clip.gloss);
      loss.backward();
      // OK(torch-host-sync-in-loop): every tensor here is on the CPU, so
      // reading the loss back waits for no device.
      if (!std::isfinite(loss.item<double>()))
        throw std::runtime_error("loss diverged");
      opt.step();
    }
}

// Validation accuracy of every model in the zoo, best first in the log.
std::string rank_zoo(const Zoo &zoo, const std::vector<Clip> &val) {
  torch::NoGradGuard no_grad;
  std::string best;
  double best_acc = -1.0;
  for (const auto &[name, net] : zoo) {
    int64_t correct = 0;
    for (const auto &clip : val)
      // BUG(torch-eval-mode-missing): every entry comes straight from
      // train_net(), which left it in train().
      correct += net->forward(clip.pose).argmax(1).eq(clip.gloss).sum().item<int64_t>();
    const double acc = static_cast<double>(correct) / static_cast<double>(val.size() * 16);
    std::cout << name << " accuracy " << acc << '\n';
    if (acc > best_acc)
      best_acc = acc, best = name;
  }
  return best;
}

// Exponential moving average of a live network's weights.
struct Ema {
  Ema(const SignNet &live, double decay)
      : shadow(std::dynamic_pointer_cast<SignNetImpl>(live->clone())), decay(decay) {}
  void update(SignNetImpl &live) {
    torch::NoGradGuard no_grad;
    auto src = live.parameters();
    auto dst = shadow->parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].mul_(decay).add_(src[i], 1.0 - decay);
  }
  std::shared_ptr<SignNetImpl> shadow;
  double decay;
};

class PoseDistiller {
 public:
  using SoftTargets = std::function<torch::Tensor(const torch::Tensor &)>;
  PoseDistiller(SignNet teacher, SignNet student, SoftTargets aux, double temperature)
      : teacher_(std::move(teacher)), student_(std::move(student)), aux_(std::move(aux)), t_(temperature),
        opt_(student_->parameters(), torch::optim::AdamOptions(1e-3)), ema_(student_, 0.995) {
    teacher_->eval();
  }

  void run(const std::vector<Clip> &clips, int epochs) {
    student_->train();
    int64_t step = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (const auto &clip : clips) {
        torch::Tensor soft, hand;
        {
          torch::NoGradGuard no_grad;
          // OK(torch-eval-mode-missing): the constructor put the teacher in eval().
          soft = torch::softmax(teacher_->forward(clip.pose) / t_, 1);
          hand = aux_(clip.pose);
        }
        auto logits = student_->forward(clip.pose);
        auto log_p = torch::log_softmax(logits / t_, 1);
        auto kd = F::kl_div(log_p, soft, F::KLDivFuncOptions().reduction(torch::kBatchMean)) * t_ * t_;
        auto aux_kd = F::kl_div(torch::log_softmax(logits, 1), hand, F::KLDivFuncOptions().reduction(torch::kBatchMean));
        auto loss = kd + 0.3 * aux_kd + 0.5 * F::cross_entropy(logits, clip.gloss);
        opt_.zero_grad();
        loss.backward();
        opt_.step();
        ema_.update(*student_);
        // BUG(torch-loss-accumulation-graph): the distillation term keeps
        // its graph in a member that outlives the step.
        kd_sum_ += kd;
        // OK(torch-host-sync-in-loop): logged every 50 steps only.
        if (++step % 50 == 0)
          std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
      }
    }
  }

  std::shared_ptr<SignNetImpl> averaged() const { return ema_.shadow; }
  double mean_kd(int64_t steps) const { return kd_sum_.item<double>() / static_cast<double>(steps); }

 private:
  SignNet teacher_, student_;
  SoftTargets aux_;
  double t_;
  torch::optim::Adam opt_;
  Ema ema_;
  torch::Tensor kd_sum_ = torch::zeros({});
};

template <typename Net>
double accuracy(Net &net, const std::vector<Clip> &clips) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto &clip : clips) {
    // BUG(torch-eval-mode-missing): the EMA shadow is a clone() of the
    // student taken while it trained, and nothing switched the copy to eval().
    correct += net.forward(clip.pose).argmax(1).eq(clip.gloss).sum().template item<int64_t>();
    total += clip.gloss.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

int main() {
  torch::manual_seed(261);
  std::vector<Clip> train, val, test;
  for (uint64_t i = 0; i < 30; ++i)
    train.push_back(synth_clip(16, i));
  for (uint64_t i = 0; i < 5; ++i) {
    val.push_back(synth_clip(16, 500 + i));
    test.push_back(synth_clip(16, 900 + i));
  }

  Zoo zoo;
  zoo.emplace("tcn-32", std::make_shared<SignNetImpl>(32));
  zoo.emplace("tcn-64", std::make_shared<SignNetImpl>(64));
  zoo.emplace("tcn-128", std::make_shared<SignNetImpl>(128));
  zoo.emplace("handshape-64", std::make_shared<SignNetImpl>(64));
  for (auto &[name, net] : zoo)
    train_net(*net, train, name == "tcn-128" ? 6 : 3);
  const std::string best = rank_zoo(zoo, val);

  for (auto &entry : zoo)
    entry.second->eval();
  {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): the loop above switched every entry to eval().
    auto probs = torch::softmax(lookup(zoo, best)->forward(test.front().pose), 1);
    std::cout << best << " mean confidence " << std::get<0>(probs.max(1)).mean().item<double>() << '\n';
  }

  SignNet teacher(lookup(zoo, "tcn-128"));
  auto expert = lookup(zoo, "handshape-64");
  expert->train();  // the expert gets a refresher epoch on the latest clips
  train_net(*expert, val, 1);
  PoseDistiller distiller(teacher, SignNet(32), [&expert](const torch::Tensor &pose) {
    // BUG(torch-eval-mode-missing): run() calls this under its no-grad guard
    // while the expert is still in train() from its refresher epoch.
    return torch::softmax(expert->forward(pose), 1);
  }, 4.0);
  distiller.run(train, 4);
  std::cout << "mean KD " << distiller.mean_kd(4 * static_cast<int64_t>(train.size())) << '\n';

  auto shipped = distiller.averaged();
  std::cout << "EMA student accuracy " << accuracy(*shipped, test) << '\n';
  torch::save(SignNet(shipped), "sign_student_ema.pt");
}
