// A BiLSTM-CRF named-entity tagger. The LSTM produces per-token emission
// scores, a linear-chain CRF layer holds the tag transition scores and
// computes the negative log-likelihood with the forward algorithm; decoding
// runs Viterbi on the host over the emissions of each sentence. Sentences
// of a batch are padded, and a padding mask keeps the padded positions out
// of the loss.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kWords = 5000;
constexpr int64_t kTags = 9;

struct CrfImpl : torch::nn::Module {
  CrfImpl() { transitions = register_parameter("transitions", torch::randn({kTags, kTags}) * 0.01); }

  // Negative log-likelihood of the gold tags; emissions [T, B, kTags], tags
  // [T, B], mask [T, B] (1 for real tokens).
  torch::Tensor nll(const torch::Tensor &emissions, const torch::Tensor &tags, const torch::Tensor &mask) {
    const int64_t T = emissions.size(0);
    auto alpha = emissions[0];
    auto gold = emissions[0].gather(1, tags[0].unsqueeze(1)).squeeze(1);
    for (int64_t t = 1; t < T; ++t) {
      auto scores = alpha.unsqueeze(2) + transitions.unsqueeze(0) + emissions[t].unsqueeze(1);
      auto next = torch::logsumexp(scores, 1);
      auto m = mask[t].unsqueeze(1);
      alpha = torch::where(m, next, alpha);
      auto step = transitions.index({tags[t - 1], tags[t]}) + emissions[t].gather(1, tags[t].unsqueeze(1)).squeeze(1);
      gold = gold + step * mask[t].to(torch::kFloat);
    }
    return (torch::logsumexp(alpha, 1) - gold).mean();
  }

  torch::Tensor transitions;
};
TORCH_MODULE(Crf);

struct TaggerImpl : torch::nn::Module {
  TaggerImpl()
      : embed(register_module("embed", torch::nn::Embedding(kWords, 100))),
        lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(100, 128).bidirectional(true)))),
        proj(register_module("proj", torch::nn::Linear(256, kTags))),
        crf(register_module("crf", Crf())) {}
  // Emission scores [T, B, kTags] for token ids [T, B].
  torch::Tensor forward(const torch::Tensor &tokens) {
    return proj->forward(std::get<0>(lstm->forward(embed->forward(tokens))));
  }
  torch::nn::Embedding embed;
  torch::nn::LSTM lstm;
  torch::nn::Linear proj;
  Crf crf;
};
TORCH_MODULE(Tagger);

struct PaddedBatch {
  torch::Tensor tokens, tags, mask;  // [T, B] each, on the host
};

PaddedBatch make_batch(int64_t T, int64_t B) {
  auto lengths = torch::randint(T / 2, T + 1, {B}, torch::kLong);
  auto mask = torch::arange(T).unsqueeze(1) < lengths.unsqueeze(0);
  return {torch::randint(kWords, {T, B}, torch::kLong), torch::randint(kTags, {T, B}, torch::kLong), mask};
}

// Viterbi over the emissions [T, B, kTags] of sentence 'col', on the host.
std::vector<int64_t> viterbi(const torch::Tensor &emissions, int64_t col, const torch::Tensor &transitions,
                             int64_t length) {
  auto e = emissions.accessor<float, 3>();
  auto tr = transitions.accessor<float, 2>();
  std::vector<std::vector<int64_t>> back(length, std::vector<int64_t>(kTags, 0));
  std::vector<float> score(kTags);
  for (int64_t j = 0; j < kTags; ++j)
    score[j] = e[0][col][j];
  for (int64_t t = 1; t < length; ++t) {
    std::vector<float> next(kTags);
    for (int64_t j = 0; j < kTags; ++j) {
      int64_t best = 0;
      for (int64_t i = 1; i < kTags; ++i)
        if (score[i] + tr[i][j] > score[best] + tr[best][j])
          best = i;
      next[j] = score[best] + tr[best][j] + e[t][col][j];
      back[t][j] = best;
    }
    score = next;
  }
  std::vector<int64_t> path(length);
  path[length - 1] = std::max_element(score.begin(), score.end()) - score.begin();
  for (int64_t t = length - 1; t > 0; --t)
    path[t - 1] = back[t][path[t]];
  return path;
}

int main() {
  torch::manual_seed(4);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  Tagger tagger;
  tagger->to(device);
  torch::optim::Adam opt(tagger->parameters(), torch::optim::AdamOptions(1e-3));

  torch::Tensor epoch_nll;
  auto train_epoch = [&](int64_t batches) {
    epoch_nll = torch::zeros({}, torch::TensorOptions().device(device));
    for (int64_t b = 0; b < batches; ++b) {
      auto batch = make_batch(40, 32);
      auto tokens = batch.tokens.to(device);
      auto tags = batch.tags.to(device);
      opt.zero_grad();
      auto emissions = tagger->forward(tokens);
      // BUG(torch-device-mismatch): the padding mask is still on the host;
      // nll() combines it with the emissions and transitions on 'device'.
      auto loss = tagger->crf->nll(emissions, tags, batch.mask);
      // BUG(torch-host-sync-in-loop): a divergence guard that reads the loss
      // on the host after every forward.
      if (!std::isfinite(loss.item<float>()))
        continue;
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the epoch's running NLL is a
      // captured tensor that keeps every batch's graph.
      epoch_nll += loss;
    }
  };

  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    tagger->train();
    train_epoch(200);
    // OK(torch-host-sync-in-loop): one read per epoch.
    std::cout << "epoch " << epoch << " nll " << epoch_nll.item<float>() / 200 << "\n";
  }

  // Decoding a held-out set.
  tagger->eval();
  int64_t correct = 0, total = 0;
  for (int64_t b = 0; b < 20; ++b) {
    auto batch = make_batch(40, 16);
    // BUG(torch-inference-without-no-grad): decoding never backpropagates and
    // no NoGradGuard is held.
    auto emissions = tagger->forward(batch.tokens.to(device));
    auto host = emissions.to(torch::kCPU, /*non_blocking=*/true);
    auto transitions = tagger->crf->transitions.to(torch::kCPU);
    auto lengths = batch.mask.sum(0);
    for (int64_t i = 0; i < host.size(1); ++i) {
      const int64_t len = lengths[i].item<int64_t>();
      // BUG(torch-non-blocking-d2h-race): viterbi() reads the emissions
      // before their asynchronous copy has finished.
      auto path = viterbi(host, i, transitions, len);
      for (int64_t t = 0; t < len; ++t)
        correct += path[t] == batch.tags[t][i].item<int64_t>();
      total += len;
    }
  }
  std::cout << "token accuracy " << static_cast<double>(correct) / static_cast<double>(total) << "\n";
  return 0;
}
