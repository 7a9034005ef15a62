// Beat-level arrhythmia classification for Holter ECG (MIT-BIH style): one
// second of single-lead signal at 360 Hz around each R peak, five AAMI
// classes (N, S, V, F, Q). Four ensemble members of different widths are
// trained from one template; metrics take the module handle by value (it is
// a shared pointer). A small signal-quality net gates noisy windows through
// an alarm rule holding a std::function; an overnight recording is scored on
// a worker thread, and Monte-Carlo dropout gives the uncertainty that the
// cardiologist's review queue is sorted by.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace holter {
constexpr int64_t kSamples = 360, kClasses = 5, kVentricular = 2;

struct Beat {
  torch::Tensor signal;  // [B, 1, 360]
  torch::Tensor rhythm;  // [B] AAMI class
  torch::Tensor noisy;   // [B] 1 when the lead was off or saturated
};

std::vector<Beat> synth_beats(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Beat> out;
  auto t = torch::linspace(-1.0, 1.0, kSamples, device).view({1, 1, kSamples});
  for (int64_t b = 0; b < batches; ++b) {
    auto rhythm = torch::randint(0, kClasses, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto width = 0.02 + 0.03 * rhythm.to(torch::kFloat).view({n, 1, 1});
    auto qrs = torch::exp(-(t * t) / width);
    auto noisy = (torch::rand({n}, device) < 0.1).to(torch::kFloat);
    auto signal = qrs + (0.05 + noisy.view({n, 1, 1})) * torch::randn({n, 1, kSamples}, device);
    out.push_back({signal, rhythm, noisy});
  }
  return out;
}

struct EcgNetImpl : nn::Module {
  explicit EcgNetImpl(int64_t width)
      : conv1(register_module("conv1", nn::Conv1d(nn::Conv1dOptions(1, width, 7).padding(3)))),
        bn1(register_module("bn1", nn::BatchNorm1d(width))),
        conv2(register_module("conv2", nn::Conv1d(nn::Conv1dOptions(width, width, 5).stride(2).padding(2)))),
        bn2(register_module("bn2", nn::BatchNorm1d(width))),
        fc(register_module("fc", nn::Linear(width, 64))),
        head_drop(register_module("head_drop", nn::Dropout(0.3))),
        head(register_module("head", nn::Linear(64, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::relu(bn1->forward(conv1->forward(x)));
    h = torch::relu(bn2->forward(conv2->forward(h))).mean(2);
    return head->forward(head_drop->forward(torch::relu(fc->forward(h))));
  }
  nn::Conv1d conv1;
  nn::BatchNorm1d bn1;
  nn::Conv1d conv2;
  nn::BatchNorm1d bn2;
  nn::Linear fc;
  nn::Dropout head_drop;
  nn::Linear head;
};
TORCH_MODULE(EcgNet);

struct QualityNetImpl : nn::Module {
  QualityNetImpl()
      : conv(register_module("conv", nn::Conv1d(nn::Conv1dOptions(1, 8, 9).stride(4)))),
        bn(register_module("bn", nn::BatchNorm1d(8))),
        drop(register_module("drop", nn::Dropout(0.2))),
        out(register_module("out", nn::Linear(8, 1))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    return out->forward(drop->forward(torch::relu(bn->forward(conv->forward(x))).amax(2)));
  }
  nn::Conv1d conv;
  nn::BatchNorm1d bn;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(QualityNet);

template <typename Net, typename LossFn>
void fit(Net net, const std::vector<Beat> &data, int epochs, double lr, LossFn loss_fn) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(lr));
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (const auto &b : data) {
      opt.zero_grad();
      // OK(torch-eval-mode-missing): train() above, on the caller's module through the handle copy.
      auto loss = loss_fn(net->forward(b.signal), b);
      loss.backward();
      opt.step();
    }
}

// Macro F1 over the five AAMI classes.
double macro_f1(EcgNet net, const std::vector<Beat> &data) {
  torch::NoGradGuard no_grad;
  auto confusion = torch::zeros({kClasses * kClasses}, torch::kLong);
  for (const auto &b : data) {
    // BUG(torch-eval-mode-missing): main() passes each member straight from
    // fit(); the copied handle shares the module, still in training mode.
    auto pred = net->forward(b.signal).argmax(1).cpu();
    confusion.index_add_(0, b.rhythm.cpu() * kClasses + pred, torch::ones_like(pred));
  }
  auto cm = confusion.view({kClasses, kClasses}).to(torch::kDouble);
  return (2.0 * cm.diag() / (cm.sum(0) + cm.sum(1)).clamp_min(1.0)).mean().item<double>();
}

// Ventricular-beat sensitivity, the figure the Holter vendor quotes.
double ventricular_sensitivity(EcgNet net, const std::vector<Beat> &data) {
  net->eval();
  torch::NoGradGuard no_grad;
  int64_t hit = 0, total = 0;
  for (const auto &b : data) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
    auto pred = net->forward(b.signal).argmax(1);
    auto ventricular = b.rhythm.eq(kVentricular);
    hit += (pred.eq(kVentricular) & ventricular).sum().item<int64_t>();
    total += ventricular.sum().item<int64_t>();
  }
  return static_cast<double>(hit) / static_cast<double>(std::max<int64_t>(total, 1));
}

// Patient-specific fine-tuning on the first minutes of the recording.
std::vector<torch::Tensor> personalize(EcgNet &net, const std::vector<Beat> &first_minutes) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  std::vector<torch::Tensor> trace;
  for (const auto &b : first_minutes) {
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): ventricular_sensitivity() took a copy of
    // the handle, but its eval() switched this module; it trains in eval mode.
    auto loss = F::cross_entropy(net->forward(b.signal), b.rhythm);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the trace keeps every step's graph.
    trace.push_back(loss);
  }
  return trace;
}

class Ensemble {
 public:
  void add(EcgNet m) { members_.push_back(std::move(m)); }
  void freeze() {
    for (auto m : members_)  // a handle copy names the same module
      m->eval();
  }
  torch::Tensor predict(const torch::Tensor &x) {
    torch::NoGradGuard no_grad;
    auto votes = torch::zeros({x.size(0), kClasses}, x.options());
    for (auto &m : members_)
      // OK(torch-eval-mode-missing): freeze() switched every member through a handle copy.
      votes += torch::softmax(m->forward(x), 1);
    return votes / static_cast<double>(members_.size());
  }

 private:
  std::vector<EcgNet> members_;
};

// Monte-Carlo dropout: batch norm stays frozen, only the head's dropout samples.
std::pair<torch::Tensor, torch::Tensor> mc_dropout_predict(EcgNet &net, const torch::Tensor &x, int samples) {
  net->eval();
  net->head_drop->train();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> draws;
  for (int s = 0; s < samples; ++s)
    // OK(torch-eval-mode-missing): deliberate sampling; the module is in eval, its dropout layer samples.
    draws.push_back(torch::softmax(net->forward(x), 1));
  net->head_drop->eval();
  auto stacked = torch::stack(draws);
  return {stacked.mean(0), (stacked - stacked.mean(0)).pow(2).mean(0).sqrt()};
}

struct AlarmRule {
  std::string name;
  std::function<torch::Tensor(const torch::Tensor &)> score;  // per-beat probability
  double threshold;
};

std::vector<size_t> screen(const AlarmRule &rule, const std::vector<torch::Tensor> &windows) {
  torch::NoGradGuard no_grad;
  std::vector<size_t> flagged;
  for (size_t i = 0; i < windows.size(); ++i)
    if (rule.score(windows[i]).max().item<double>() > rule.threshold)
      flagged.push_back(i);
  return flagged;
}

}  // namespace holter

int main() {
  using namespace holter;
  torch::manual_seed(302);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto train = synth_beats(60, 64, device);
  auto val = synth_beats(8, 128, device);
  auto patient = synth_beats(4, 32, device);
  std::vector<torch::Tensor> overnight;
  for (const auto &b : synth_beats(30, 256, device))
    overnight.push_back(b.signal);

  std::vector<EcgNet> members;
  for (int64_t width : {16, 24, 32, 48}) {
    EcgNet m(width);
    m->to(device);
    fit(m, train, 3, 1e-3, [](const torch::Tensor &logits, const Beat &b) { return F::cross_entropy(logits, b.rhythm); });
    members.push_back(m);
  }
  for (auto &m : members)
    std::cout << "member macro-F1 " << macro_f1(m, val) << '\n';
  std::cout << "V sensitivity " << ventricular_sensitivity(members[0], val) << '\n';
  auto trace = personalize(members[0], patient);
  std::cout << "personalized, last loss " << trace.back().item<double>() << '\n';

  Ensemble ensemble;
  for (auto &m : members)
    ensemble.add(m);
  ensemble.freeze();

  QualityNet quality;
  quality->to(device);
  fit(quality, train, 1, 1e-3,
      [](const torch::Tensor &logit, const Beat &b) { return F::binary_cross_entropy_with_logits(logit.squeeze(1), b.noisy); });
  AlarmRule lead_off{"lead-off",
                     [&quality](const torch::Tensor &w) {
                       // BUG(torch-eval-mode-missing): the quality net comes
                       // straight from fit(); screen() runs this under its guard.
                       return torch::sigmoid(quality->forward(w));
                     },
                     0.8};
  std::cout << "lead-off windows " << screen(lead_off, overnight).size() << '\n';

  std::vector<size_t> alarms;
  torch::Tensor summary;
  {
    torch::NoGradGuard no_grad;  // grad mode is per thread: this one covers main only
    std::thread worker([&] {
      for (size_t i = 0; i < overnight.size(); ++i) {
        // OK(torch-eval-mode-missing): ensemble.freeze() switched members[2] through its handle copy.
        // BUG(torch-inference-without-no-grad): the worker thread starts
        // with autograd on; main's guard does not reach it.
        auto pred = members[2]->forward(overnight[i]).argmax(1);
        if (pred.eq(kVentricular).sum().item<int64_t>() > 8)
          alarms.push_back(i);
      }
    });
    summary = ensemble.predict(val.front().signal);
    worker.join();
  }
  auto [mean, spread] = mc_dropout_predict(members[1], overnight.front(), 20);
  std::cout << alarms.size() << " ventricular runs; ensemble confidence " << summary.amax(1).mean().item<double>()
            << "; review queue top uncertainty " << spread.max().item<double>() << '\n';
  return 0;
}
