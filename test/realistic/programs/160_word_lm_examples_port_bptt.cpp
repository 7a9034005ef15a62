// A C++ port of pytorch/examples' word_language_model (LSTM variant) on a
// synthetic Zipf-distributed corpus: batchify() into columns, get_batch()
// returning a (data, target) tuple for truncated BPTT, repackage_hidden()
// between chunks, manual SGD with the learning rate divided by 4 whenever
// validation stops improving (the best loss so far is a std::optional), and
// a generate() at the end. The whole run is retried once with half the batch
// size when the GPU runs out of memory.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using Hidden = std::tuple<torch::Tensor, torch::Tensor>;

struct RunConfig {
  int64_t ntokens = 10000, emsize = 200, nhid = 200, nlayers = 2;
  double dropout = 0.2, lr = 20.0, clip = 0.25;
  int64_t epochs = 6, batch_size = 20, eval_batch_size = 10, bptt = 35, log_interval = 200;
  std::string save = "word_lm.pt";
};

struct RNNModelImpl : torch::nn::Module {
  RNNModelImpl(const RunConfig &cfg)
      : drop(register_module("drop", torch::nn::Dropout(cfg.dropout))),
        encoder(register_module("encoder", torch::nn::Embedding(cfg.ntokens, cfg.emsize))),
        rnn(register_module("rnn", torch::nn::LSTM(torch::nn::LSTMOptions(cfg.emsize, cfg.nhid)
                                                       .num_layers(cfg.nlayers)
                                                       .dropout(cfg.dropout)))),
        decoder(register_module("decoder", torch::nn::Linear(cfg.nhid, cfg.ntokens))), nlayers(cfg.nlayers),
        nhid(cfg.nhid) {}

  std::tuple<torch::Tensor, Hidden> forward(const torch::Tensor &input, const Hidden &hidden) {
    auto emb = drop(encoder(input));
    auto [output, next] = rnn->forward(emb, hidden);
    return {torch::log_softmax(decoder(drop(output)), -1), next};
  }
  Hidden init_hidden(int64_t bsz) {
    auto opts = decoder->weight.options();
    return {torch::zeros({nlayers, bsz, nhid}, opts), torch::zeros({nlayers, bsz, nhid}, opts)};
  }

  torch::nn::Dropout drop;
  torch::nn::Embedding encoder;
  torch::nn::LSTM rnn;
  torch::nn::Linear decoder;
  int64_t nlayers, nhid;
};
TORCH_MODULE(RNNModel);

torch::Tensor zipf_corpus(int64_t n, int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto u = torch::rand({n}, gen);
  return (torch::pow(static_cast<double>(vocab), u) - 1).to(torch::kLong).clamp(0, vocab - 1);
}

torch::Tensor batchify(const torch::Tensor &data, int64_t bsz, torch::Device device) {
  const int64_t nbatch = data.size(0) / bsz;
  return data.narrow(0, 0, nbatch * bsz).view({bsz, -1}).t().contiguous().to(device);
}

std::tuple<torch::Tensor, torch::Tensor> get_batch(const torch::Tensor &source, int64_t i, int64_t bptt) {
  const int64_t seq_len = std::min(bptt, source.size(0) - 1 - i);
  return {source.slice(0, i, i + seq_len), source.slice(0, i + 1, i + 1 + seq_len).reshape({-1})};
}

Hidden repackage_hidden(const Hidden &h) { return {std::get<0>(h).detach(), std::get<1>(h).detach()}; }

void train_epoch(RNNModel &model, const torch::Tensor &train_data, const RunConfig &cfg, double lr, int64_t epoch) {
  model->train();
  double total_loss = 0.0;
  auto hidden = model->init_hidden(cfg.batch_size);
  for (int64_t batch = 0, i = 0; i < train_data.size(0) - 1; ++batch, i += cfg.bptt) {
    auto [data, targets] = get_batch(train_data, i, cfg.bptt);
    hidden = repackage_hidden(hidden);
    model->zero_grad();
    torch::Tensor output;
    std::tie(output, hidden) = model->forward(data, hidden);
    auto loss = torch::nll_loss(output.view({-1, cfg.ntokens}), targets);
    loss.backward();
    torch::nn::utils::clip_grad_value_(model->parameters(), cfg.clip);
    {
      torch::NoGradGuard no_grad;
      for (auto &p : model->parameters())
        p.add_(p.grad(), -lr);
    }
    // BUG(torch-host-sync-in-loop): the port keeps Python's
    // `total_loss += loss.item()`, a device read on every chunk.
    total_loss += loss.item<double>();
    if (batch % cfg.log_interval == 0 && batch > 0) {
      const double cur = total_loss / static_cast<double>(cfg.log_interval);
      std::cout << "| epoch " << epoch << " | batch " << batch << " | lr " << lr << " | loss " << cur << " | ppl "
                << std::exp(cur) << '\n';
      total_loss = 0.0;
    }
  }
}

double evaluate(RNNModel &model, const torch::Tensor &data_source, const RunConfig &cfg) {
  model->eval();
  auto total_loss = torch::zeros({}, data_source.device());
  auto hidden = model->init_hidden(cfg.eval_batch_size);
  for (int64_t i = 0; i < data_source.size(0) - 1; i += cfg.bptt) {
    auto [data, targets] = get_batch(data_source, i, cfg.bptt);
    torch::Tensor output;
    // BUG(torch-inference-without-no-grad): the port lost the example's
    // `with torch.no_grad():`; nothing here runs backward().
    std::tie(output, hidden) = model->forward(data, hidden);
    hidden = repackage_hidden(hidden);
    // BUG(torch-loss-accumulation-graph): the sum keeps every chunk's graph
    // until the end of the validation pass.
    total_loss += data.size(0) * torch::nll_loss(output.view({-1, cfg.ntokens}), targets);
  }
  return total_loss.item<double>() / static_cast<double>(data_source.size(0) - 1);
}

std::vector<int64_t> generate(RNNModel &model, int64_t words, double temperature, torch::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto hidden = model->init_hidden(1);
  auto input = torch::randint(0, model->decoder->weight.size(0), {1, 1},
                              torch::TensorOptions().dtype(torch::kLong).device(device));
  std::vector<int64_t> out;
  for (int64_t i = 0; i < words; ++i) {
    torch::Tensor output;
    // OK(torch-inference-without-no-grad): generation runs under the guard.
    std::tie(output, hidden) = model->forward(input, hidden);
    auto weights = output.squeeze().div(temperature).exp().cpu();
    const int64_t idx = torch::multinomial(weights, 1)[0].item<int64_t>();
    input.fill_(idx);
    out.push_back(idx);
  }
  return out;
}

void run(const RunConfig &cfg, torch::Device device) {
  auto train_data = batchify(zipf_corpus(2000000, cfg.ntokens, 1), cfg.batch_size, device);
  auto val_data = batchify(zipf_corpus(200000, cfg.ntokens, 2), cfg.eval_batch_size, device);
  RNNModel model(cfg);
  model->to(device);

  double lr = cfg.lr;
  std::optional<double> best_val;
  for (int64_t epoch = 1; epoch <= cfg.epochs; ++epoch) {
    train_epoch(model, train_data, cfg, lr, epoch);
    const double val_loss = evaluate(model, val_data, cfg);
    std::cout << "| end of epoch " << epoch << " | valid loss " << val_loss << " | valid ppl " << std::exp(val_loss)
              << '\n';
    if (!best_val || val_loss < *best_val) {
      torch::save(model, cfg.save);
      best_val = val_loss;
    } else {
      lr /= 4.0;
    }
  }
  torch::load(model, cfg.save);
  const auto words = generate(model, 100, 1.0, device);
  std::cout << "generated " << words.size() << " words, first id " << words.front() << '\n';
}

int main() {
  torch::manual_seed(1111);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  RunConfig cfg;
  try {
    run(cfg, device);
  } catch (const c10::OutOfMemoryError &) {
    std::cerr << "out of memory at batch size " << cfg.batch_size << ", retrying with half\n";
    // OK(torch-empty-cache-oom-retry): the retry halves the batch size.
    c10::cuda::CUDACachingAllocator::emptyCache();
    cfg.batch_size /= 2;
    run(cfg, device);
  }
  return 0;
}
