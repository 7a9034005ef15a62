// Word-level Transformer language model over commit messages (the corpus is
// the tokenised `git log` of a monorepo), ported from pytorch/examples
// word_language_model: batchify() lays the token stream out in columns,
// get_batch() returns (data, targets) for structured bindings, and the
// device override comes from an optional in the config. Besides perplexity,
// the tool suggests the next words for a partial message and scores whole
// messages for the commit-lint bot.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

struct LmConfig {
  int64_t ntokens = 8000;
  int64_t emsize = 256;
  int64_t nhead = 4;
  int64_t nhid = 512;
  int64_t nlayers = 2;
  double dropout = 0.2;
  int64_t bptt = 35;
  int64_t batch_size = 20;
  int64_t eval_batch_size = 10;
  int64_t epochs = 8;
  double lr = 5.0;
  double clip = 0.25;
  int64_t log_interval = 200;
  std::optional<std::string> device_override;
};

torch::Tensor generate_square_subsequent_mask(int64_t sz, torch::Device device) {
  return torch::triu(torch::full({sz, sz}, -std::numeric_limits<float>::infinity(), torch::TensorOptions().device(device)),
                     1);
}

struct TransformerLmImpl : torch::nn::Module {
  explicit TransformerLmImpl(const LmConfig &cfg)
      : emsize(cfg.emsize),
        encoder(register_module("encoder", torch::nn::Embedding(cfg.ntokens, cfg.emsize))),
        transformer(register_module(
            "transformer",
            torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                torch::nn::TransformerEncoderLayerOptions(cfg.emsize, cfg.nhead).dim_feedforward(cfg.nhid).dropout(cfg.dropout),
                cfg.nlayers)))),
        decoder(register_module("decoder", torch::nn::Linear(cfg.emsize, cfg.ntokens))),
        drop(register_module("drop", torch::nn::Dropout(cfg.dropout))) {
    auto position = torch::arange(0, 5000, torch::kFloat).unsqueeze(1);
    auto div_term = torch::exp(torch::arange(0, cfg.emsize, 2, torch::kFloat) * (-std::log(10000.0) / cfg.emsize));
    auto table = torch::zeros({5000, 1, cfg.emsize});
    table.slice(2, 0, cfg.emsize, 2).copy_(torch::sin(position * div_term).unsqueeze(1));
    table.slice(2, 1, cfg.emsize, 2).copy_(torch::cos(position * div_term).unsqueeze(1));
    pe = register_buffer("pe", table);
  }

  // src: [seq, batch] token ids -> [seq, batch, ntokens] log-probabilities
  torch::Tensor forward(torch::Tensor src) {
    // OK(torch-device-mismatch): the mask is built on the input's device.
    auto mask = generate_square_subsequent_mask(src.size(0), src.device());
    auto x = encoder->forward(src) * std::sqrt(static_cast<double>(emsize));
    x = drop->forward(x + pe.narrow(0, 0, src.size(0)));
    return torch::log_softmax(decoder->forward(transformer->forward(x, mask)), -1);
  }

  int64_t emsize;
  torch::nn::Embedding encoder;
  torch::nn::TransformerEncoder transformer;
  torch::nn::Linear decoder;
  torch::nn::Dropout drop;
  torch::Tensor pe;
};
TORCH_MODULE(TransformerLm);

torch::Tensor batchify(torch::Tensor data, int64_t bsz, torch::Device device) {
  const int64_t nbatch = data.size(0) / bsz;
  data = data.narrow(0, 0, nbatch * bsz).view({bsz, -1}).t();
  // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor; the
  // transposed columns stay strided, and so does the copy on `device`.
  data.contiguous();
  return data.to(device);
}

std::tuple<torch::Tensor, torch::Tensor> get_batch(const torch::Tensor &source, int64_t i, int64_t bptt) {
  const int64_t seq_len = std::min(bptt, source.size(0) - 1 - i);
  return {source.narrow(0, i, seq_len), source.narrow(0, i + 1, seq_len).reshape(-1)};
}

double evaluate(TransformerLm &model, const torch::Tensor &data_source, const LmConfig &cfg) {
  torch::NoGradGuard no_grad;
  model->eval();
  double total_loss = 0.0;
  for (int64_t i = 0; i < data_source.size(0) - 1; i += cfg.bptt) {
    auto [data, targets] = get_batch(data_source, i, cfg.bptt);
    auto output = model->forward(data);
    total_loss += data.size(0) * torch::nll_loss(output.view({-1, cfg.ntokens}), targets).item<double>();
  }
  return total_loss / static_cast<double>(data_source.size(0) - 1);
}

// Top-5 next words after a partial message, for the editor plugin.
std::vector<int64_t> suggest(TransformerLm &model, const std::vector<int64_t> &prefix, torch::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto ids = torch::tensor(prefix, torch::TensorOptions().dtype(torch::kLong).device(device)).unsqueeze(1);
  auto last = model->forward(ids).select(0, -1).squeeze(0);
  auto [probs, idx] = last.exp().topk(5);
  auto host_idx = idx.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): host_idx is read on the host before
  // the device-to-host copy was waited for.
  const int64_t *top = host_idx.data_ptr<int64_t>();
  return std::vector<int64_t>(top, top + 5);
}

// Mean log-likelihood of a whole message; the lint bot flags outliers.
double score_message(TransformerLm &model, const std::vector<int64_t> &tokens) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto ids = torch::tensor(tokens, torch::kLong).unsqueeze(1);
  auto logp = model->forward(ids.narrow(0, 0, ids.size(0) - 1));
  return logp.squeeze(1).gather(1, ids.narrow(0, 1, ids.size(0) - 1)).mean().item<double>();
}

int main(int argc, char **argv) {
  torch::manual_seed(1111);
  LmConfig cfg;
  if (argc > 1)
    cfg.device_override = std::string(argv[1]);

  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available())
    device = torch::Device(cfg.device_override.value_or("cuda"));

  // Stand-in for the tokenised log: a Zipf-ish token stream.
  auto stream = (torch::rand({600000}).pow(3.0) * (cfg.ntokens - 1)).to(torch::kLong);
  auto train_data = batchify(stream.narrow(0, 0, 500000), cfg.batch_size, device);
  auto val_data = batchify(stream.narrow(0, 500000, 100000), cfg.eval_batch_size, device);

  TransformerLm model(cfg);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(cfg.lr));

  double best_val = std::numeric_limits<double>::infinity();
  for (int64_t epoch = 1; epoch <= cfg.epochs; ++epoch) {
    model->train();
    double running = 0.0;
    int64_t batch = 0;
    for (int64_t i = 0; i < train_data.size(0) - 1; i += cfg.bptt, ++batch) {
      auto [data, targets] = get_batch(train_data, i, cfg.bptt);
      optimizer.zero_grad();
      auto output = model->forward(data);
      // OK(torch-device-mismatch): data and targets are slices of train_data.
      auto loss = torch::nll_loss(output.view({-1, cfg.ntokens}), targets);
      loss.backward();
      torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.clip);
      optimizer.step();
      if (batch % cfg.log_interval == 0 && batch > 0) {
        // OK(torch-host-sync-in-loop): only every log_interval batches.
        running = loss.item<double>();
        std::cout << "| epoch " << epoch << " | batch " << batch << " | loss " << running << " | ppl "
                  << std::exp(running) << "\n";
      }
    }
    const double val_loss = evaluate(model, val_data, cfg);
    std::cout << "| end of epoch " << epoch << " | valid ppl " << std::exp(val_loss) << "\n";
    if (val_loss < best_val) {
      best_val = val_loss;
      torch::save(model, "commit_lm.pt");
    }
  }

  auto words = suggest(model, {12, 7, 431, 9}, device);
  std::cout << "suggestions:";
  for (auto w : words)
    std::cout << " " << w;
  std::cout << "\n";

  std::vector<std::vector<int64_t>> messages = {{5, 88, 3, 17, 2}, {44, 44, 44, 44, 44, 44}};
  for (const auto &msg : messages) {
    // BUG(torch-device-mismatch): score_message builds its ids on the CPU
    // and calls the model, which main() moved to `device`.
    std::cout << "score " << score_message(model, msg) << "\n";
  }
  return 0;
}
