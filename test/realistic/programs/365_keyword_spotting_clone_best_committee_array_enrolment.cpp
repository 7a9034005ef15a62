// Keyword spotting on one-second clips (12 commands) from 40-band log-mel
// frames. A small conv net is trained with early stopping; the weights of the
// best epoch are kept as a clone() and scored on the test split at the end. A
// committee of three nets, one per speaker fold, votes on the sliding window
// of a microphone buffer, and member 0 is fine-tuned on a new user's
// enrolment clips before the committee's final test.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <vector>

namespace kws {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kSamples = 16000, kWin = 400, kHop = 160, kBins = kWin / 2 + 1, kMels = 40, kKeywords = 12;

struct Config {
  int64_t epochs = 20, patience = 3, member_epochs = 4, enrol_epochs = 2;
  double lr = 1e-3;
};

struct Clips {
  torch::Tensor audio;   // [B, 16000] on the CPU
  torch::Tensor labels;  // [B]
};

std::vector<Clips> synth_clips(int64_t batches, int64_t batch_size, double speaker_pitch) {
  std::vector<Clips> out;
  auto t = torch::arange(kSamples).to(torch::kFloat) / kSamples;
  for (int64_t i = 0; i < batches; ++i) {
    auto labels = torch::randint(0, kKeywords, {batch_size}, torch::kLong);
    auto freq = (labels.to(torch::kFloat) + 2.0) * 40.0 * speaker_pitch;
    out.push_back({torch::sin(6.2832 * freq.unsqueeze(1) * t) + 0.3 * torch::randn({batch_size, kSamples}), labels});
  }
  return out;
}

// Framing, Hann window, power spectrum and a mel projection.
class LogMel {
 public:
  explicit LogMel(torch::Device device)
      : device_(device), window_(torch::hann_window(kWin)),
        mel_(torch::rand({kBins, kMels}, torch::TensorOptions().device(device)) / kBins) {}

  torch::Tensor operator()(const torch::Tensor &audio) const {
    auto frames = audio.unfold(1, kWin, kHop).to(device_);  // [B, 98, 400]
    // BUG(torch-device-mismatch): window_ was built on the CPU in the constructor while the frames were moved to device_.
    auto power = torch::fft::rfft(frames * window_, kWin, -1).abs().pow(2);
    // OK(torch-device-mismatch): the mel matrix was created on device_.
    return torch::log(torch::matmul(power, mel_) + 1e-6);  // [B, 98, 40]
  }

 private:
  torch::Device device_;
  torch::Tensor window_, mel_;
};

struct KwsNetImpl : nn::Cloneable<KwsNetImpl> {
  explicit KwsNetImpl(int64_t channels = 64) : channels_(channels) { reset(); }
  void reset() override {
    conv1 = register_module("conv1", nn::Conv1d(nn::Conv1dOptions(kMels, channels_, 5).padding(2)));
    bn1 = register_module("bn1", nn::BatchNorm1d(channels_));
    conv2 = register_module("conv2", nn::Conv1d(nn::Conv1dOptions(channels_, channels_, 5).padding(4).dilation(2)));
    bn2 = register_module("bn2", nn::BatchNorm1d(channels_));
    drop = register_module("drop", nn::Dropout(0.25));
    fc = register_module("fc", nn::Linear(channels_, kKeywords));
  }
  torch::Tensor forward(torch::Tensor mel) {  // [B, frames, mels]
    auto x = torch::relu(bn1->forward(conv1->forward(mel.transpose(1, 2))));
    x = torch::relu(bn2->forward(conv2->forward(x)));
    return fc->forward(drop->forward(x.mean(2)));
  }
  int64_t channels_;
  nn::Conv1d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm1d bn1{nullptr}, bn2{nullptr};
  nn::Dropout drop{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(KwsNet);

double validate(KwsNet &net, const LogMel &mel, const std::vector<Clips> &val, torch::Device device) {
  net->eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto &c : val) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and a guard right above.
    auto pred = net->forward(mel(c.audio)).argmax(1);
    correct += pred.eq(c.labels.to(device)).sum().item<int64_t>();
    total += c.labels.size(0);
  }
  net->train();  // back to training for the next epoch
  return static_cast<double>(correct) / static_cast<double>(total);
}

// Trains until validation accuracy stops improving; returns the best epoch's weights.
KwsNet fit_with_early_stopping(const LogMel &mel, const std::vector<Clips> &train, const std::vector<Clips> &val,
                               torch::Device device, const Config &cfg) {
  KwsNet net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(cfg.lr));
  KwsNet best{nullptr};
  double best_acc = -1.0;
  int64_t stale = 0;
  std::deque<torch::Tensor> recent;  // last 20 losses for the progress line
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    net->train();
    for (const auto &c : train) {
      opt.zero_grad();
      auto loss = F::cross_entropy(net->forward(mel(c.audio)), c.labels.to(device));
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the smoothing window outlives the step and holds the live losses with their graphs.
      recent.push_back(loss);
      if (recent.size() > 20) recent.pop_front();
    }
    std::cout << "epoch " << epoch << " smoothed loss " << torch::stack(std::vector<torch::Tensor>(recent.begin(), recent.end())).mean().item<double>() << '\n';
    const double acc = validate(net, mel, val, device);
    if (acc > best_acc) {
      best_acc = acc;
      stale = 0;
      best = KwsNet(std::dynamic_pointer_cast<KwsNetImpl>(net->clone()));
    } else if (++stale >= cfg.patience) {
      break;
    }
  }
  return best;
}

double test_accuracy(KwsNet &net, const LogMel &mel, const std::vector<Clips> &test, torch::Device device) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto &c : test) {
    // BUG(torch-eval-mode-missing): 'best' was cloned after validate() had restored train(); clone() copies the training flag.
    auto pred = net->forward(mel(c.audio)).argmax(1);
    correct += pred.eq(c.labels.to(device)).sum().item<int64_t>();
    total += c.labels.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

using Committee = std::array<KwsNet, 3>;

void fit_member(KwsNet &member, const LogMel &mel, const std::vector<Clips> &fold, torch::Device device, int64_t epochs) {
  member->to(device);
  member->train();
  torch::optim::SGD opt(member->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  int64_t step = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    for (const auto &c : fold) {
      opt.zero_grad();
      auto loss = F::cross_entropy(member->forward(mel(c.audio)), c.labels.to(device));
      loss.backward();
      opt.step();
      // OK(torch-host-sync-in-loop): only every 50th step.
      if (++step % 50 == 0) std::cout << "  member step " << step << " loss " << loss.item<double>() << '\n';
    }
  }
}

// Average of the members' probabilities for one window; the winning keyword.
int64_t committee_vote(Committee &committee, const torch::Tensor &feats) {
  torch::Tensor probs;
  for (auto &member : committee) {
    // BUG(torch-inference-without-no-grad): the microphone loop in main calls this for every hop and nothing holds a guard.
    auto p = torch::softmax(member->forward(feats), 1);
    probs = probs.defined() ? probs + p : p;
  }
  return probs.argmax(1).item<int64_t>();
}

double committee_accuracy(Committee &committee, const LogMel &mel, const std::vector<Clips> &test, torch::Device device) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto &c : test) {
    auto feats = mel(c.audio);
    auto probs = torch::zeros({c.labels.size(0), kKeywords}, feats.options());
    for (auto &member : committee)
      // BUG(torch-eval-mode-missing): member 0 comes back from the enrolment fine-tune (fit_member) in training mode.
      probs += torch::softmax(member->forward(feats), 1);
    correct += probs.argmax(1).eq(c.labels.to(device)).sum().item<int64_t>();
    total += c.labels.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace kws

int main() {
  using namespace kws;
  torch::manual_seed(365);
  // OK(torch-cuda-unguarded): guarded selection.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Config cfg;
  LogMel mel(device);

  const auto train = synth_clips(16, 32, 1.0), val = synth_clips(4, 64, 1.0), test = synth_clips(6, 64, 1.1);
  KwsNet best = fit_with_early_stopping(mel, train, val, device, cfg);
  std::cout << "best model test acc " << test_accuracy(best, mel, test, device) << '\n';

  Committee committee;
  for (size_t i = 0; i < committee.size(); ++i)
    fit_member(committee[i], mel, synth_clips(8, 32, 0.9 + 0.1 * static_cast<double>(i)), device, cfg.member_epochs);
  for (auto &member : committee) member->eval();

  // Sliding one-second window over a 5 s microphone buffer, hop 250 ms.
  const auto mic = synth_clips(1, 1, 1.0).front().audio.repeat({1, 5});
  int64_t last = -1;
  for (int64_t start = 0; start + kSamples <= mic.size(1); start += 4000) {
    const int64_t kw = committee_vote(committee, mel(mic.narrow(1, start, kSamples)));
    if (kw != last) std::cout << "t=" << start / 16000.0 << "s keyword " << kw << '\n';
    last = kw;
  }

  fit_member(committee[0], mel, synth_clips(2, 16, 1.3), device, cfg.enrol_epochs);
  std::cout << "committee test acc " << committee_accuracy(committee, mel, test, device) << '\n';
  return 0;
}
