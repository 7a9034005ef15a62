// OCR line recognition: a CRNN (convolutions, a bidirectional GRU over the
// image columns, CTC) reads printed text lines. The tokenizer and a few lookup
// tables are built once, on first use, in function-local statics. Training
// tracks a running character error rate from greedy decodes; a font adapter
// fine-tunes on a new typeface; a field reader serves free-text and numeric
// fields with a character prior and a digits-only mask.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace ocr {

constexpr const char *kAlphabet = "0123456789abcdefghijklmnopqrstuvwxyz .-";
constexpr int64_t kClasses = 40, kHeight = 32, kWidth = 128;  // 39 characters + blank (0)

class Tokenizer {
 public:
  explicit Tokenizer(std::string alphabet)
      : alphabet_(std::move(alphabet)), log_prior_(torch::full({kClasses}, -4.0)) {
    for (size_t i = 0; i < alphabet_.size(); ++i) index_[alphabet_[i]] = static_cast<int64_t>(i) + 1;
    log_prior_.narrow(0, 1, 10).fill_(-2.5);   // digits are frequent on invoices
    log_prior_.narrow(0, 37, 1).fill_(-1.5);   // so are spaces
  }
  torch::Tensor encode(const std::string &text) const {
    std::vector<int64_t> ids;
    for (char c : text) ids.push_back(index_.at(c));
    return torch::tensor(ids, torch::kLong);
  }
  std::string decode(const std::vector<int64_t> &ids) const {
    std::string out;
    for (int64_t id : ids) out.push_back(alphabet_[static_cast<size_t>(id - 1)]);
    return out;
  }
  const torch::Tensor &log_prior() const { return log_prior_; }
  const std::string &alphabet() const { return alphabet_; }

 private:
  std::string alphabet_;
  std::unordered_map<char, int64_t> index_;
  torch::Tensor log_prior_;
};

const Tokenizer &tokenizer() {
  static const Tokenizer tok(kAlphabet);
  return tok;
}

// Classes a numeric field may contain: blank and the ten digits.
const torch::Tensor &digits_only_mask() {
  static const torch::Tensor mask = torch::arange(kClasses) <= 10;
  return mask;
}

// A small bias against the blank, built on the caller's device the first time it is asked for.
const torch::Tensor &blank_bias(torch::Device device) {
  static const torch::Tensor bias = torch::zeros({kClasses}).index_fill_(0, torch::zeros({1}, torch::kLong), -0.3).to(device);
  return bias;
}

struct CrnnImpl : nn::Module {
  CrnnImpl()
      : cnn(register_module("cnn", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                                                  nn::MaxPool2d(nn::MaxPool2dOptions(2)),
                                                  nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
                                                  nn::MaxPool2d(nn::MaxPool2dOptions({2, 1}))))),
        rnn(register_module("rnn", nn::GRU(nn::GRUOptions(64 * kHeight / 4, 128).bidirectional(true)))),
        fc(register_module("fc", nn::Linear(256, kClasses))) {}

  // images B x 1 x H x W -> log-probabilities T x B x C
  torch::Tensor forward(const torch::Tensor &images) {
    auto f = cnn->forward(images);                  // B x 64 x H/4 x W/2
    f = f.permute({3, 0, 1, 2}).flatten(2);         // T x B x 64*H/4
    auto out = std::get<0>(rnn->forward(f));        // T x B x 256
    return torch::log_softmax(fc->forward(out), 2);
  }

  nn::Sequential cnn;
  nn::GRU rnn;
  nn::Linear fc;
};
TORCH_MODULE(Crnn);

struct LineBatch {
  torch::Tensor images;            // B x 1 x H x W
  std::vector<std::string> texts;
};

LineBatch synth_lines(int64_t b) {
  const std::string alphabet = tokenizer().alphabet();
  LineBatch batch{torch::rand({b, 1, kHeight, kWidth}), {}};
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = torch::randint(4, 13, {1}).item<int64_t>();
    auto picks = torch::randint(0, static_cast<int64_t>(alphabet.size()), {len});
    std::string text;
    for (int64_t j = 0; j < len; ++j) text.push_back(alphabet[static_cast<size_t>(picks[j].item<int64_t>())]);
    batch.images[i].narrow(2, 0, len * 8).mul_(0.3);  // ink where the text is
    batch.texts.push_back(text);
  }
  return batch;
}

// Concatenated targets and their lengths, on the host as CTC wants them.
std::pair<torch::Tensor, torch::Tensor> encode_batch(const std::vector<std::string> &texts) {
  std::vector<torch::Tensor> ids;
  std::vector<int64_t> lengths;
  for (const auto &t : texts) {
    ids.push_back(tokenizer().encode(t));
    lengths.push_back(static_cast<int64_t>(t.size()));
  }
  return {torch::cat(ids), torch::tensor(lengths, torch::kLong)};
}

std::vector<std::string> greedy_decode(const torch::Tensor &log_probs) {
  // BUG(torch-host-sync-in-loop): the training loop decodes every step; the best path is copied to the host each time.
  auto best = log_probs.argmax(2).transpose(0, 1).contiguous().to(torch::kCPU);
  auto a = best.accessor<int64_t, 2>();
  std::vector<std::string> out;
  for (int64_t b = 0; b < best.size(0); ++b) {
    std::vector<int64_t> ids;
    int64_t prev = 0;
    for (int64_t t = 0; t < best.size(1); ++t) {
      if (a[b][t] != 0 && a[b][t] != prev) ids.push_back(a[b][t]);
      prev = a[b][t];
    }
    out.push_back(tokenizer().decode(ids));
  }
  return out;
}

double char_error_rate(const std::vector<std::string> &hyp, const std::vector<std::string> &ref) {
  double errors = 0.0, total = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const size_t n = std::min(hyp[i].size(), ref[i].size());
    for (size_t j = 0; j < n; ++j) errors += hyp[i][j] != ref[i][j];
    errors += static_cast<double>(std::max(hyp[i].size(), ref[i].size()) - n);
    total += static_cast<double>(ref[i].size());
  }
  return errors / std::max(total, 1.0);
}

torch::Tensor ctc(const torch::Tensor &log_probs, const std::vector<std::string> &texts) {
  auto [targets, target_lengths] = encode_batch(texts);
  auto input_lengths = torch::full({log_probs.size(1)}, log_probs.size(0), torch::kLong);
  // OK(torch-device-mismatch): CTC reads the targets and the lengths on the host; only log_probs is an operand.
  return F::ctc_loss(log_probs, targets, input_lengths, target_lengths, F::CTCLossFuncOptions().zero_infinity(true));
}

double train(Crnn &net, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  std::vector<torch::Tensor> history;
  auto record = [&history](const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the recorder keeps every step's CTC loss with its graph.
    history.push_back(loss);
  };
  double cer_sum = 0.0;
  net->train();
  for (int64_t step = 0; step < steps; ++step) {
    auto batch = synth_lines(16);
    auto log_probs = net->forward(batch.images.to(device));
    auto loss = ctc(log_probs, batch.texts);
    opt.zero_grad();
    loss.backward();
    opt.step();
    record(loss);
    cer_sum += char_error_rate(greedy_decode(log_probs.detach()), batch.texts);
  }
  std::cout << "mean loss " << torch::stack(history).mean().item<double>() << '\n';
  return cer_sum / static_cast<double>(steps);
}

// Fine-tunes on lines rendered in a new typeface.
class FontAdapter {
 public:
  FontAdapter(Crnn net, torch::Device device)
      : net_(std::move(net)), device_(device), opt_(net_->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9)) {}

  void adapt(const std::vector<LineBatch> &font_lines) {
    net_->train();
    opt_.zero_grad();
    for (const auto &b : font_lines) {
      auto loss = ctc(net_->forward(b.images.to(device_)), b.texts);
      loss.backward();
      // BUG(torch-missing-zero-grad): the gradients are cleared once before the loop; each step re-applies the earlier lines'.
      opt_.step();
    }
  }

 private:
  Crnn net_;
  torch::Device device_;
  torch::optim::SGD opt_;
};

class FieldReader {
 public:
  FieldReader(Crnn net, torch::Device device, double prior_weight)
      : net_(std::move(net)), device_(device), prior_weight_(prior_weight) {
    net_->to(device_);
    net_->eval();
  }

  std::string read_text(const torch::Tensor &line) {
    torch::NoGradGuard no_grad;
    auto log_probs = net_->forward(line.to(device_));
    // BUG(torch-device-mismatch): the tokenizer's character prior was built on the CPU inside its function-local static.
    auto rescored = log_probs + prior_weight_ * tokenizer().log_prior();
    return greedy_decode(rescored).front();
  }

  std::string read_number(const torch::Tensor &line) {
    torch::NoGradGuard no_grad;
    auto log_probs = net_->forward(line.to(device_));
    // OK(torch-device-mismatch): the static bias was created on device_, the only device it is ever asked for.
    log_probs = log_probs + blank_bias(device_);
    // BUG(torch-device-mismatch): the digits-only mask lives on the CPU in its static; masked_fill gets it for a device tensor.
    auto constrained = log_probs.masked_fill(digits_only_mask().logical_not(), -1e9);
    return greedy_decode(constrained).front();
  }

 private:
  Crnn net_;
  torch::Device device_;
  double prior_weight_;
};

}  // namespace ocr

int main() {
  using namespace ocr;
  torch::manual_seed(370);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Crnn net;
  net->to(device);
  std::cout << "train CER " << train(net, device, 60) << '\n';

  std::vector<LineBatch> font_lines;
  for (int i = 0; i < 6; ++i) font_lines.push_back(synth_lines(8));
  FontAdapter adapter(net, device);
  adapter.adapt(font_lines);

  FieldReader reader(net, device, 0.2);
  auto sample = synth_lines(2);
  std::cout << "text field: '" << reader.read_text(sample.images.narrow(0, 0, 1)) << "' (truth '" << sample.texts[0] << "')\n";
  std::cout << "number field: '" << reader.read_number(sample.images.narrow(0, 1, 1)) << "'\n";
  return 0;
}
