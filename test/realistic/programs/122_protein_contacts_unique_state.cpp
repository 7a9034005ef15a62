// Protein contact-map prediction from one-hot sequences: a 1-D convolution
// gives per-residue features, their outer concatenation gives pair features,
// and a 2-D convolution head scores every residue pair, plus a fixed
// log-odds prior by sequence separation. The whole run state (model,
// optimizer, prior, running loss) is one struct owned by a std::unique_ptr;
// the compute device is a function-local static. Evaluation reports the
// precision of the top-L long-range contacts.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

constexpr int64_t kAA = 21, kLen = 96;

// GPU 0 of the folding node runs the MSA search; training uses GPU 1.
const torch::Device &compute_device() {
  // BUG(torch-cuda-unguarded): nothing on the path from main() checks that
  // CUDA is available before the static is initialised.
  // BUG(torch-device-index-unchecked): ordinal 1 is never compared with the
  // device count; a job given one GPU sees only ordinal 0.
  static const torch::Device device(torch::kCUDA, 1);
  return device;
}

struct ContactNetImpl : torch::nn::Module {
  ContactNetImpl()
      : seq(register_module("seq", torch::nn::Conv1d(torch::nn::Conv1dOptions(kAA, 48, 5).padding(2)))),
        pair1(register_module("pair1", torch::nn::Conv2d(torch::nn::Conv2dOptions(96, 32, 3).padding(1)))),
        pair2(register_module("pair2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 3).padding(1)))) {}

  torch::Tensor forward(const torch::Tensor &onehot) {  // [B, L, kAA] -> [B, L, L]
    auto h = torch::relu(seq(onehot.transpose(1, 2)));  // [B, 48, L]
    const int64_t L = h.size(2);
    auto pair = torch::cat({h.unsqueeze(3).expand({-1, -1, L, L}), h.unsqueeze(2).expand({-1, -1, L, L})}, 1);
    auto logits = pair2(torch::relu(pair1(pair))).squeeze(1);
    return 0.5 * (logits + logits.transpose(1, 2));
  }

  torch::nn::Conv1d seq;
  torch::nn::Conv2d pair1, pair2;
};
TORCH_MODULE(ContactNet);

struct ProteinBatch {
  torch::Tensor onehot;    // [B, L, kAA]
  torch::Tensor contacts;  // [B, L, L], 0/1
};

std::vector<ProteinBatch> make_batches(int64_t n, int64_t b) {
  std::vector<ProteinBatch> out;
  auto idx = torch::arange(kLen);
  auto near = ((idx.unsqueeze(0) - idx.unsqueeze(1)).abs() < 8).to(torch::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    auto residues = torch::randint(0, kAA, {b, kLen}, torch::TensorOptions().dtype(torch::kLong));
    auto random_pairs = (torch::rand({b, kLen, kLen}) < 0.01).to(torch::kFloat);
    auto contacts = ((random_pairs + random_pairs.transpose(1, 2) + near) > 0).to(torch::kFloat);
    out.push_back({torch::one_hot(residues, kAA).to(torch::kFloat), contacts});
  }
  return out;
}

// Log-odds of a contact by |i - j|; residues closer than 6 are never scored.
torch::Tensor separation_prior(int64_t L) {
  auto prior = torch::zeros({L, L});
  for (int64_t k = 1; k < L; ++k) {
    const double v = k < 6 ? -4.0 : -0.5 * std::log(static_cast<double>(k));
    prior.diagonal(k).fill_(v);
    prior.diagonal(-k).fill_(v);
  }
  return prior;
}

struct TrainState {
  explicit TrainState(int64_t L)
      : opt(net->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4)), sep_prior(separation_prior(L)),
        pos_weight(torch::full({1}, 8.0, torch::TensorOptions().device(compute_device()))),
        loss_sum(torch::zeros({}, torch::TensorOptions().device(compute_device()))) {
    net->to(compute_device());
  }

  ContactNet net;
  torch::optim::AdamW opt;
  torch::Tensor sep_prior;   // [L, L], built on the host
  torch::Tensor pos_weight;  // contacts are rare
  torch::Tensor loss_sum;
};

// One pass over the training batches; nullopt once the loss diverges.
std::optional<double> run_epoch(TrainState &st, const std::vector<ProteinBatch> &train) {
  st.loss_sum = torch::zeros({}, torch::TensorOptions().device(compute_device()));
  int64_t n = 0;
  for (auto it = train.begin(); it != train.end(); ++it, ++n) {
    auto logits = st.net->forward(it->onehot.to(compute_device()));
    // The prior is added as the state holds it.
    logits = logits + st.sep_prior;
    auto loss = torch::binary_cross_entropy_with_logits(logits, it->contacts.to(compute_device()), {}, st.pos_weight);
    // BUG(torch-host-sync-in-loop): the divergence check reads the loss back
    // to the host before every backward.
    if (!std::isfinite(loss.item<double>()))
      return std::nullopt;
    st.opt.zero_grad();
    loss.backward();
    st.opt.step();
    // BUG(torch-loss-accumulation-graph): the running sum lives in the state,
    // which outlives the step, and keeps every step's graph.
    st.loss_sum += loss;
  }
  // OK(torch-host-sync-in-loop): one read per epoch, after the batch loop.
  return st.loss_sum.item<double>() / static_cast<double>(n);
}

double top_l_precision(TrainState &st, const std::vector<ProteinBatch> &test) {
  c10::InferenceMode guard;
  auto far = torch::ones({kLen, kLen}, torch::TensorOptions().device(compute_device())).triu(6).to(torch::kBool);
  double precision = 0.0;
  for (const auto &batch : test) {
    // OK(torch-inference-without-no-grad): InferenceMode is held for the loop.
    auto logits = st.net->forward(batch.onehot.to(compute_device()));
    // OK(torch-device-mismatch): the prior follows the logits here.
    logits = logits + st.sep_prior.to(logits.device());
    auto scores = logits.masked_select(far.unsqueeze(0));
    auto truth = batch.contacts.to(compute_device()).masked_select(far.unsqueeze(0));
    auto top = std::get<1>(scores.topk(batch.onehot.size(0) * kLen));
    precision += truth.index_select(0, top).mean().item<double>();
  }
  return precision / static_cast<double>(test.size());
}

int main() {
  torch::manual_seed(29);
  std::cout << "training on " << compute_device() << "\n";
  const auto train = make_batches(64, 4);
  const auto test = make_batches(8, 4);
  auto state = std::make_unique<TrainState>(kLen);

  std::vector<double> curve;
  for (int epoch = 0; epoch < 12; ++epoch) {
    // BUG(torch-device-mismatch): run_epoch() adds the state's separation
    // prior, built on the host by TrainState's constructor, to logits on
    // compute_device(); both come from the state this call hands over.
    const auto mean = run_epoch(*state, train);
    if (!mean) {
      std::cerr << "diverged in epoch " << epoch << "\n";
      return 1;
    }
    curve.push_back(*mean);
    std::cout << "epoch " << epoch << " loss " << *mean << "\n";
  }
  std::cout << "top-L long-range precision " << top_l_precision(*state, test) << "\n";
  torch::save(state->net, "contacts.pt");
  return 0;
}
