// A beam-search decoding service for a small GRU caption decoder. Requests
// carry an encoder context vector; the service keeps all live beams of one
// request in one batch on the device, expands them with one decoder step,
// picks the best continuations with topk over the flattened scores and
// rebuilds the token histories on the host. Scores are length-normalised at
// the end. A warm-up decodes one dummy request at start-up.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

constexpr int64_t kVocab = 96;
constexpr int64_t kHidden = 128;
constexpr int64_t kBos = 1;
constexpr int64_t kEos = 2;

struct DecoderImpl : torch::nn::Module {
  DecoderImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, kHidden))),
        cell(register_module("cell", torch::nn::GRUCell(kHidden, kHidden))),
        out(register_module("out", torch::nn::Linear(kHidden, kVocab))) {}

  // One step for every live beam: log-probabilities over the vocabulary and
  // the new hidden states.
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor &tokens, const torch::Tensor &hidden) {
    auto h = cell->forward(embed->forward(tokens), hidden);
    return {torch::log_softmax(out->forward(h), -1), h};
  }

  torch::nn::Embedding embed;
  torch::nn::GRUCell cell;
  torch::nn::Linear out;
};
TORCH_MODULE(Decoder);

struct Request {
  std::string id;
  torch::Tensor context;  // [kHidden], produced by the encoder service on the host
};

struct Result {
  std::string id;
  std::vector<int64_t> tokens;
  float score = 0.0f;
};

// Last token of every beam, as a host tensor of indices.
torch::Tensor last_tokens(const std::vector<std::vector<int64_t>> &beams) {
  std::vector<int64_t> last;
  last.reserve(beams.size());
  for (const auto &b : beams)
    last.push_back(b.back());
  return torch::tensor(last, torch::kLong);
}

// GNMT length penalty, one entry per beam.
torch::Tensor length_penalty(const std::vector<std::vector<int64_t>> &beams, double alpha) {
  std::vector<float> lp;
  for (const auto &b : beams)
    lp.push_back(static_cast<float>(std::pow((5.0 + b.size()) / 6.0, alpha)));
  return torch::tensor(lp);
}

class BeamSearcher {
 public:
  BeamSearcher(Decoder decoder, torch::Device device, int64_t beam, int64_t max_len)
      : decoder_(std::move(decoder)), device_(device), beam_(beam), max_len_(max_len) {}

  Result decode(const Request &req) {
    std::vector<std::vector<int64_t>> beams{{kBos}};
    auto hidden = req.context.to(device_).unsqueeze(0);
    auto scores = torch::zeros({1}, torch::TensorOptions().device(device_));
    for (int64_t t = 0; t < max_len_; ++t) {
      auto tokens = last_tokens(beams).to(device_);
      // BUG(torch-inference-without-no-grad): decoding never backpropagates
      // and nothing on the serving path holds a NoGradGuard.
      auto [logp, h] = decoder_->forward(tokens, hidden);
      // OK(torch-device-mismatch): the running scores live on the device too.
      auto total = (scores.unsqueeze(1) + logp).view({-1});
      auto [best, flat] = total.topk(std::min<int64_t>(beam_, total.size(0)));
      auto flat_host = flat.to(torch::kCPU, /*non_blocking=*/true);
      // BUG(torch-non-blocking-d2h-race): the indices of the chosen
      // continuations are read before their asynchronous copy has landed.
      auto idx = flat_host.accessor<int64_t, 1>();
      std::vector<std::vector<int64_t>> next;
      std::vector<int64_t> parents;
      for (int64_t i = 0; i < idx.size(0); ++i) {
        const int64_t parent = idx[i] / kVocab;
        auto seq = beams[parent];
        seq.push_back(idx[i] % kVocab);
        next.push_back(std::move(seq));
        parents.push_back(parent);
      }
      beams = std::move(next);
      hidden = h.index({torch::tensor(parents, torch::kLong).to(device_)});
      scores = best;
      if (std::all_of(beams.begin(), beams.end(), [](const auto &b) { return b.back() == kEos; }))
        break;
    }
    // BUG(torch-device-mismatch): the beam scores are on the device, the
    // length penalties were built on the host.
    auto normalised = scores / length_penalty(beams, 0.6);
    // OK(torch-non-blocking-d2h-race): a blocking copy, read at once.
    auto host = normalised.to(torch::kCPU);
    const int64_t winner = host.argmax().item<int64_t>();
    return {req.id, beams[winner], host[winner].item<float>()};
  }

 private:
  Decoder decoder_;
  torch::Device device_;
  int64_t beam_;
  int64_t max_len_;
};

// Greedy decode used by the health check; the caller holds a NoGradGuard.
std::vector<int64_t> greedy(Decoder &decoder, const torch::Tensor &context, torch::Device device) {
  std::vector<int64_t> out{kBos};
  auto hidden = context.to(device).unsqueeze(0);
  for (int i = 0; i < 16 && out.back() != kEos; ++i) {
    auto tok = torch::tensor({out.back()}, torch::kLong).to(device);
    // OK(torch-inference-without-no-grad): health_check() holds the guard.
    auto [logp, h] = decoder->forward(tok, hidden);
    hidden = h;
    auto next = logp.argmax(-1).to(torch::kCPU, /*non_blocking=*/true);
    torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised before the read.
    out.push_back(next.item<int64_t>());
  }
  return out;
}

bool health_check(Decoder &decoder, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto probe = torch::randn({kHidden});
  return !greedy(decoder, probe, device).empty();
}

std::vector<Request> pending_requests(int64_t n) {
  std::vector<Request> reqs;
  for (int64_t i = 0; i < n; ++i)
    reqs.push_back({"req-" + std::to_string(i), torch::randn({kHidden})});
  return reqs;
}

int main(int argc, char **argv) {
  const int64_t beam = argc > 1 ? std::stoll(argv[1]) : 4;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  Decoder decoder;
  torch::load(decoder, "decoder.pt");
  decoder->to(device);
  decoder->eval();

  if (!health_check(decoder, device)) {
    std::cerr << "decoder failed its health check\n";
    return 1;
  }

  BeamSearcher searcher(decoder, device, beam, 40);
  for (const auto &req : pending_requests(32)) {
    auto res = searcher.decode(req);
    std::cout << res.id << " score=" << res.score << " len=" << res.tokens.size() << "\n";
  }
  return 0;
}
