// Character-level language model (embedding + 2-layer GRU) trained on a
// text file with truncated BPTT, with perplexity evaluation on a held-out
// split and temperature sampling. Logging goes through macros; the hidden
// state is carried across chunks and detached at each boundary.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#define LOG_INFO(x) do { std::cout << "[info] " << x << std::endl; } while (0)
#define LOG_EVERY(n, step, x) do { if ((step) % (n) == 0) LOG_INFO(x); } while (0)

struct Vocab {
  std::map<char, int64_t> stoi;
  std::vector<char> itos;
  explicit Vocab(const std::string &text) {
    for (char c : text)
      if (!stoi.count(c)) {
        stoi[c] = static_cast<int64_t>(itos.size());
        itos.push_back(c);
      }
  }
  torch::Tensor encode(const std::string &s) const {
    std::vector<int64_t> ids;
    ids.reserve(s.size());
    for (char c : s)
      ids.push_back(stoi.at(c));
    return torch::tensor(ids, torch::kLong);
  }
};

struct CharLMImpl : torch::nn::Module {
  CharLMImpl(int64_t vocab, int64_t hidden)
      : emb(register_module("emb", torch::nn::Embedding(vocab, 128))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(128, hidden).num_layers(2).batch_first(true)))),
        out(register_module("out", torch::nn::Linear(hidden, vocab))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor &ids, const torch::Tensor &h) {
    auto r = gru->forward(emb->forward(ids), h);
    return {out->forward(std::get<0>(r)), std::get<1>(r)};
  }
  torch::nn::Embedding emb;
  torch::nn::GRU gru;
  torch::nn::Linear out;
};
TORCH_MODULE(CharLM);

std::string load_text(const char *path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto s = ss.str();
  return s.empty() ? std::string("the quick brown fox jumps over the lazy dog. ") : s;
}

int main(int argc, char **argv) {
  const auto text = load_text(argc > 1 ? argv[1] : "input.txt");
  Vocab vocab(text);
  const int64_t V = static_cast<int64_t>(vocab.itos.size()), H = 256, B = 32, T = 64;
  auto data = vocab.encode(text).repeat({(B * (T + 1) * 4) / static_cast<int64_t>(text.size()) + 1});
  const int64_t split = data.size(0) * 9 / 10;
  auto train_ids = data.narrow(0, 0, split), val_ids = data.narrow(0, split, data.size(0) - split);

  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  CharLM lm(V, H);
  lm->to(device);
  torch::optim::Adam opt(lm->parameters(), 2e-3);

  const int64_t per_row = train_ids.size(0) / B;
  auto rows = train_ids.narrow(0, 0, per_row * B).view({B, per_row});
  std::vector<torch::Tensor> loss_history;
  for (int epoch = 0; epoch < 20; ++epoch) {
    auto h = torch::zeros({2, B, H}, device);
    for (int64_t s = 0; s + T + 1 <= per_row; s += T) {
      auto x = rows.narrow(1, s, T).to(device);
      auto y = rows.narrow(1, s + 1, T).to(device);
      // OK(torch-loss-accumulation-graph): the carried state is detached at
      // every chunk boundary (truncated BPTT).
      h = h.detach();
      auto [logits, h_next] = lm->forward(x, h);
      h = h_next;
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, V}), y.reshape({-1}));
      opt.zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(lm->parameters(), 1.0);
      opt.step();
      // BUG(torch-loss-accumulation-graph): every chunk's graph stays alive
      // in the history vector.
      loss_history.push_back(loss);
      // OK(torch-host-sync-in-loop): the macro logs every 100 chunks only.
      LOG_EVERY(100, s / T, "epoch " << epoch << " loss " << loss.item<float>());
    }
    // Perplexity on the held-out split.
    lm->eval();
    {
      torch::NoGradGuard no_grad;
      auto vh = torch::zeros({2, 1, H}, device);
      double nll = 0.0;
      int64_t n = 0;
      for (int64_t s = 0; s + T + 1 <= val_ids.size(0); s += T) {
        auto x = val_ids.narrow(0, s, T).unsqueeze(0).to(device);
        auto y = val_ids.narrow(0, s + 1, T).unsqueeze(0).to(device);
        // OK(torch-inference-without-no-grad): inside the NoGradGuard.
        auto [logits, vh_next] = lm->forward(x, vh);
        vh = vh_next;
        nll += torch::nn::functional::cross_entropy(logits.reshape({-1, V}), y.reshape({-1}),
                                                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
        n += T;
      }
      LOG_INFO("epoch " << epoch << " val ppl " << std::exp(nll / std::max<int64_t>(n, 1)));
    }
    lm->train();
  }

  // Temperature sampling.
  lm->eval();
  const double temperature = 0.8;
  auto h = torch::zeros({2, 1, H}, device);
  auto cur = torch::full({1, 1}, vocab.stoi.begin()->second, torch::kLong);
  std::string sample;
  for (int i = 0; i < 400; ++i) {
    // BUG(torch-device-mismatch): the current character id is created on
    // the host and fed back every step; the model is on `device`.
    // BUG(torch-inference-without-no-grad): sampling keeps an autograd
    // graph across all 400 steps through the hidden state.
    auto [logits, h_next] = lm->forward(cur, h);
    h = h_next;
    auto probs = torch::softmax(logits.squeeze(0).squeeze(0) / temperature, 0);
    const auto next = torch::multinomial(probs.cpu(), 1).item<int64_t>();
    sample.push_back(vocab.itos[next]);
    cur = torch::full({1, 1}, next, torch::kLong);
  }
  LOG_INFO("sample: " << sample);
  double mean = 0.0;
  for (auto &l : loss_history)
    mean += l.item<double>();
  LOG_INFO("mean train loss " << mean / std::max<size_t>(loss_history.size(), 1));
  return 0;
}
