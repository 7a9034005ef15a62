// A digit-reversal seq2seq model (GRU encoder, GRUCell decoder) trained with
// scheduled teacher forcing. The run is driven by a TrainState passed by
// pointer between small functions (init, step, evaluate, decode), the way
// code ported from a C training harness often looks.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kVocab = 11;  // digits 0-9 and BOS
constexpr int64_t kBos = 10;
constexpr int64_t kHidden = 128;
constexpr int64_t kLen = 8;

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, 32))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(32, kHidden).batch_first(true)))) {}
  // Returns the final hidden state, [B, H].
  torch::Tensor forward(torch::Tensor tokens) { return std::get<1>(gru->forward(emb(tokens))).squeeze(0); }
  torch::nn::Embedding emb;
  torch::nn::GRU gru;
};
TORCH_MODULE(Encoder);

struct DecoderImpl : torch::nn::Module {
  DecoderImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, 32))),
        cell(register_module("cell", torch::nn::GRUCell(32, kHidden))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        out(register_module("out", torch::nn::Linear(kHidden, kVocab))) {}
  // One decoding step: logits [B, V] and the next hidden state.
  std::pair<torch::Tensor, torch::Tensor> forward(torch::Tensor token, torch::Tensor hidden) {
    auto h = cell(emb(token), hidden);
    return {out(drop(h)), h};
  }
  torch::nn::Embedding emb;
  torch::nn::GRUCell cell;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(Decoder);

struct TrainState {
  Encoder encoder;
  Decoder decoder;
  std::unique_ptr<torch::optim::Adam> opt;
  torch::Device device = torch::kCPU;
  int64_t step = 0;
  double teacher_forcing = 1.0;
  double best_token_acc = 0.0;
  std::mt19937 rng{7};
  torch::Tensor running;             // detached loss sum between log lines
  std::vector<torch::Tensor> history;  // one loss per step, for the plot
};

torch::TensorOptions long_on(torch::Device device) { return torch::TensorOptions().dtype(torch::kLong).device(device); }

// Source digits and their reversal, on the host.
std::pair<torch::Tensor, torch::Tensor> make_pair_batch(int64_t batch, std::mt19937 &rng) {
  auto seed = static_cast<int64_t>(rng() % 100000);
  auto gen_opts = torch::TensorOptions().dtype(torch::kLong);
  auto src = (torch::randint(0, 10, {batch, kLen}, gen_opts) + seed) % 10;
  return {src, src.flip({1})};
}

void init_state(TrainState *s, torch::Device device) {
  s->device = device;
  s->encoder->to(device);
  s->decoder->to(device);
  auto params = s->encoder->parameters();
  auto dec = s->decoder->parameters();
  params.insert(params.end(), dec.begin(), dec.end());
  s->opt = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
  s->running = torch::zeros({}, device);
}

torch::Tensor train_step(TrainState *s, int64_t batch) {
  auto pair = make_pair_batch(batch, s->rng);
  auto src = pair.first.to(s->device);
  auto tgt = pair.second.to(s->device);
  auto hidden = s->encoder->forward(src);
  auto token = torch::full({batch}, kBos, long_on(s->device));
  std::bernoulli_distribution force(s->teacher_forcing);

  auto loss = torch::zeros({}, s->device);
  std::vector<torch::Tensor> guesses;
  for (int64_t t = 0; t < kLen; ++t) {
    // OK(torch-inference-without-no-grad): this loop runs no backward, but
    // every step's logits go into the loss that backward() runs through below.
    auto step = s->decoder->forward(token, hidden);
    hidden = step.second;
    auto gold = tgt.select(1, t);
    // OK(torch-loss-accumulation-graph): the sum over tokens is the loss;
    // backward() runs through it.
    loss = loss + torch::nn::functional::cross_entropy(step.first, gold);
    auto guess = step.first.argmax(1);
    guesses.push_back(guess);
    token = force(s->rng) ? gold : guess;
  }
  loss = loss / static_cast<double>(kLen);

  s->opt->zero_grad();
  loss.backward();
  s->opt->step();

  auto token_acc = torch::stack(guesses, 1).eq(tgt).to(torch::kFloat).mean();
  // BUG(torch-host-sync-in-loop): run() calls train_step() on every step;
  // item() waits for the whole step to finish on the device.
  s->best_token_acc = std::max(s->best_token_acc, token_acc.item<double>());
  // OK(torch-loss-accumulation-graph): detached before it is summed.
  s->running += loss.detach();
  // BUG(torch-loss-accumulation-graph): 'history' lives in the TrainState,
  // which outlives every step; each element keeps its step's graph.
  s->history.push_back(loss);
  return loss;
}

void run(TrainState *s, int64_t total_steps) {
  s->encoder->train();
  s->decoder->train();
  while (s->step < total_steps) {
    s->teacher_forcing = std::max(0.0, 1.0 - static_cast<double>(s->step) / 2000.0);
    train_step(s, 128);
    ++s->step;
    if (s->step % 250 == 0) {
      // OK(torch-host-sync-in-loop): read once every 250 steps.
      std::cout << "step " << s->step << " tf " << s->teacher_forcing << " loss "
                << (s->running / 250.0).item<double>() << " best token acc " << s->best_token_acc << '\n';
      s->running.zero_();
    }
  }
}

double sequence_accuracy(TrainState *s, int64_t batches) {
  torch::NoGradGuard no_grad;
  s->encoder->eval();
  s->decoder->eval();
  int64_t exact = 0, total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    auto pair = make_pair_batch(256, s->rng);
    auto src = pair.first;
    // BUG(torch-tensor-to-discarded): the moved copy is dropped; 'src' stays
    // on the host.
    src.to(s->device);
    auto tgt = pair.second.to(s->device);
    // BUG(torch-device-mismatch): the encoder is on the state's device, 'src'
    // is still the host tensor from make_pair_batch().
    auto hidden = s->encoder->forward(src);
    auto token = torch::full({256}, kBos, long_on(s->device));
    std::vector<torch::Tensor> preds;
    for (int64_t t = 0; t < kLen; ++t) {
      auto step = s->decoder->forward(token, hidden);
      hidden = step.second;
      token = step.first.argmax(1);
      preds.push_back(token);
    }
    exact += torch::stack(preds, 1).eq(tgt).all(1).sum().item<int64_t>();
    total += 256;
  }
  s->encoder->train();
  s->decoder->train();
  return static_cast<double>(exact) / static_cast<double>(total);
}

std::string reverse_digits(TrainState *s, const std::string &digits) {
  torch::NoGradGuard no_grad;
  s->encoder->eval();
  s->decoder->eval();
  std::vector<int64_t> ids;
  for (char c : digits) ids.push_back(c - '0');
  auto src = torch::tensor(ids, torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0).to(s->device);
  auto hidden = s->encoder->forward(src);
  auto token = torch::full({1}, kBos, long_on(s->device));
  std::string out;
  for (size_t t = 0; t < digits.size(); ++t) {
    auto step = s->decoder->forward(token, hidden);
    hidden = step.second;
    token = step.first.argmax(1);
    // OK(torch-host-sync-in-loop): greedy decoding trains nothing; one read
    // per token is what it needs.
    out.push_back(static_cast<char>('0' + token.item<int64_t>()));
  }
  return out;
}

int main(int argc, char **argv) {
  torch::manual_seed(0);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TrainState state;
  init_state(&state, device);
  run(&state, argc > 1 ? std::stoll(argv[1]) : 3000);
  std::cout << "sequence accuracy " << sequence_accuracy(&state, 8) << '\n';
  std::cout << "12345678 -> " << reverse_digits(&state, "12345678") << '\n';
  return 0;
}
