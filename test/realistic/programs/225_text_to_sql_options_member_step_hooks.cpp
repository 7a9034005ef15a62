// Text-to-SQL for single-table questions (WikiSQL style): a sketch model
// predicts the SELECT column, the aggregation operator and the number of
// WHERE conditions from the question and the table's column names. A
// Featurizer keeps the TensorOptions of the token ids, built once in its
// constructor, and every method builds its tensors from them; the trainer
// reports each step and each epoch through std::function hooks registered by
// main(), and the demo decodes the sketches back to SQL on the host.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 6000, kMaxQ = 32, kMaxCols = 12, kColToks = 4, kAggOps = 6, kMaxConds = 4;
constexpr int64_t kEmb = 96, kHid = 128, kBatch = 32;
const char *const kAggNames[kAggOps] = {"", "MAX", "MIN", "COUNT", "SUM", "AVG"};

struct Example {
  std::vector<int64_t> question;
  std::vector<std::string> column_names;
  std::vector<std::vector<int64_t>> columns;  // token ids of each column name
  int64_t sel_col = 0, agg = 0, n_conds = 0;
};

struct SketchOut {
  torch::Tensor sel;        // [B, kMaxCols]
  torch::Tensor agg;        // [B, kAggOps]
  torch::Tensor where_num;  // [B, kMaxConds + 1]
};

struct SketchNetImpl : torch::nn::Module {
  SketchNetImpl()
      : embed(register_module("embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(kVocab, kEmb).padding_idx(0)))),
        q_enc(register_module("q_enc", torch::nn::LSTM(torch::nn::LSTMOptions(kEmb, kHid).batch_first(true).bidirectional(true)))),
        col_proj(register_module("col_proj", torch::nn::Linear(kEmb, 2 * kHid))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        agg_head(register_module("agg_head", torch::nn::Linear(2 * kHid, kAggOps))),
        num_head(register_module("num_head", torch::nn::Linear(2 * kHid, kMaxConds + 1))) {}

  SketchOut forward(const torch::Tensor &q, const torch::Tensor &cols) {
    auto qh = std::get<0>(q_enc->forward(embed->forward(q)));      // [B, L, 2H]
    auto qv = drop->forward(std::get<0>(qh.max(1)));               // [B, 2H]
    auto cv = col_proj->forward(embed->forward(cols).mean(2));      // [B, C, 2H]
    auto sel = torch::bmm(cv, qv.unsqueeze(2)).squeeze(2);          // [B, C]
    return {sel, agg_head->forward(qv), num_head->forward(qv)};
  }

  torch::nn::Embedding embed;
  torch::nn::LSTM q_enc;
  torch::nn::Linear col_proj;
  torch::nn::Dropout drop;
  torch::nn::Linear agg_head, num_head;
};
TORCH_MODULE(SketchNet);

class Featurizer {
 public:
  explicit Featurizer(torch::Device device)
      : ids_opts_(torch::TensorOptions().dtype(torch::kLong).device(device)),
        host_opts_(torch::TensorOptions().dtype(torch::kLong)) {}

  // [B, kMaxQ], right-padded with 0
  torch::Tensor questions(const std::vector<Example> &batch) const {
    auto q = torch::zeros({static_cast<int64_t>(batch.size()), kMaxQ}, host_opts_);
    auto a = q.accessor<int64_t, 2>();
    for (size_t i = 0; i < batch.size(); ++i)
      for (size_t t = 0; t < batch[i].question.size() && t < static_cast<size_t>(kMaxQ); ++t)
        a[i][t] = batch[i].question[t];
    if (ids_opts_.device().is_cuda())
      // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy;
      // q itself stays pageable.
      q.pin_memory();
    // BUG(torch-non-blocking-pageable): q is still the pageable torch::zeros
    // buffer, so the copy is synchronous.
    return q.to(ids_opts_.device(), /*non_blocking=*/true);
  }

  // [B, kMaxCols, kColToks]
  torch::Tensor columns(const std::vector<Example> &batch) const {
    auto c = torch::zeros({static_cast<int64_t>(batch.size()), kMaxCols, kColToks}, host_opts_);
    auto a = c.accessor<int64_t, 3>();
    for (size_t i = 0; i < batch.size(); ++i)
      for (size_t k = 0; k < batch[i].columns.size() && k < static_cast<size_t>(kMaxCols); ++k)
        for (size_t t = 0; t < batch[i].columns[k].size() && t < static_cast<size_t>(kColToks); ++t)
          a[i][k][t] = batch[i].columns[k][t];
    if (ids_opts_.device().is_cuda())
      c = c.pin_memory();
    // OK(torch-non-blocking-pageable): pinned whenever the copy goes to a GPU.
    return c.to(ids_opts_.device(), /*non_blocking=*/true);
  }

  // (select column, aggregation, number of WHERE conditions)
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> targets(const std::vector<Example> &batch) const {
    std::vector<int64_t> sel, agg, num;
    for (const auto &ex : batch) {
      sel.push_back(ex.sel_col);
      agg.push_back(ex.agg);
      num.push_back(ex.n_conds);
    }
    return {torch::tensor(sel, ids_opts_), torch::tensor(agg, torch::kLong), torch::tensor(num, ids_opts_)};
  }

 private:
  torch::TensorOptions ids_opts_;
  torch::TensorOptions host_opts_;
};

class SketchTrainer {
 public:
  using StepHook = std::function<void(int64_t, const torch::Tensor &, const torch::Tensor &)>;

  SketchTrainer(SketchNet net, torch::Device device)
      : net_(std::move(net)), feats_(device), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {
    net_->to(device);
  }

  void on_step(StepHook hook) { on_step_ = std::move(hook); }
  void after_epoch(std::function<void(int)> hook) { after_epoch_ = std::move(hook); }
  SketchNet &model() { return net_; }

  void fit(const std::vector<Example> &data, int epochs) {
    net_->train();
    int64_t step = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (size_t i = 0; i + kBatch <= data.size(); i += kBatch) {
        std::vector<Example> batch(data.begin() + i, data.begin() + i + kBatch);
        torch::Tensor sel_t, agg_t, num_t;
        std::tie(sel_t, agg_t, num_t) = feats_.targets(batch);
        auto out = net_->forward(feats_.questions(batch), feats_.columns(batch));
        auto loss = F::cross_entropy(out.sel, sel_t);
        // BUG(torch-device-mismatch): targets() built the aggregation labels
        // without ids_opts_, on the CPU.
        loss = loss + F::cross_entropy(out.agg, agg_t);
        loss = loss + 0.5 * F::cross_entropy(out.where_num, num_t);
        opt_.zero_grad();
        loss.backward();
        opt_.step();
        if (on_step_)
          on_step_(step, out.sel.detach(), sel_t);
        if (++step % 250 == 0) {
          // OK(torch-host-sync-in-loop): every 250 steps.
          std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << "\n";
        }
      }
      if (after_epoch_)
        after_epoch_(epoch);
    }
  }

 private:
  SketchNet net_;
  Featurizer feats_;
  torch::optim::Adam opt_;
  StepHook on_step_;
  std::function<void(int)> after_epoch_;
};

std::vector<Example> synthetic_tables(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Example> out;
  for (int64_t i = 0; i < n; ++i) {
    Example ex;
    const int64_t cols = 3 + static_cast<int64_t>(rng() % (kMaxCols - 3));
    for (int64_t k = 0; k < cols; ++k) {
      ex.columns.push_back({1 + static_cast<int64_t>(rng() % (kVocab - 1)), 1 + static_cast<int64_t>(rng() % (kVocab - 1))});
      ex.column_names.push_back("col" + std::to_string(k));
    }
    ex.sel_col = static_cast<int64_t>(rng() % cols);
    ex.agg = static_cast<int64_t>(rng() % kAggOps);
    ex.n_conds = static_cast<int64_t>(rng() % (kMaxConds + 1));
    ex.question = {ex.columns[ex.sel_col][0], 7 + ex.agg, 20 + ex.n_conds};
    for (int t = 0; t < 10; ++t)
      ex.question.push_back(1 + static_cast<int64_t>(rng() % (kVocab - 1)));
    out.push_back(std::move(ex));
  }
  return out;
}

std::tuple<torch::Tensor, torch::Tensor> decode_to_host(const SketchOut &out) {
  return {out.sel.argmax(1).to(torch::kCPU, /*non_blocking=*/true),
          out.agg.argmax(1).to(torch::kCPU, /*non_blocking=*/true)};
}

void print_queries(const std::vector<Example> &batch, const torch::Tensor &sel, const torch::Tensor &agg) {
  auto s = sel.accessor<int64_t, 1>();
  auto g = agg.accessor<int64_t, 1>();
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto &col = batch[i].column_names.at(static_cast<size_t>(s[i]) % batch[i].column_names.size());
    const std::string what = g[i] == 0 ? col : std::string(kAggNames[g[i]]) + "(" + col + ")";
    std::cout << "SELECT " << what << " FROM t\n";
  }
}

int main() {
  torch::manual_seed(225);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  SketchTrainer trainer(SketchNet(), device);

  int64_t hits = 0, seen = 0;
  trainer.on_step([&](int64_t step, const torch::Tensor &sel_logits, const torch::Tensor &gold) {
    // BUG(torch-host-sync-in-loop): the hook runs on every training step and
    // reads the hit count back to the host each time.
    hits += (sel_logits.argmax(1) == gold).sum().item<int64_t>();
    seen += gold.size(0);
    (void)step;
  });
  trainer.after_epoch([&](int epoch) {
    std::cout << "epoch " << epoch << " train select-column accuracy " << static_cast<double>(hits) / seen << "\n";
    hits = seen = 0;
    if (device.is_cuda())
      // BUG(torch-empty-cache-in-loop): fit() runs this hook after every epoch.
      c10::cuda::CUDACachingAllocator::emptyCache();
  });
  trainer.fit(synthetic_tables(20000, 1), 6);

  SketchNet &net = trainer.model();
  net->eval();
  torch::NoGradGuard no_grad;
  Featurizer feats(device);
  const auto dev_set = synthetic_tables(2000, 2);
  int64_t exact = 0, total = 0;
  for (size_t i = 0; i + kBatch <= dev_set.size(); i += kBatch) {
    std::vector<Example> batch(dev_set.begin() + i, dev_set.begin() + i + kBatch);
    auto out = net->forward(feats.questions(batch), feats.columns(batch));
    torch::Tensor sel_h, agg_h;
    std::tie(sel_h, agg_h) = decode_to_host(out);
    if (device.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised above when the copies came
    // from a GPU.
    auto s = sel_h.accessor<int64_t, 1>();
    auto g = agg_h.accessor<int64_t, 1>();
    for (int64_t r = 0; r < s.size(0); ++r)
      exact += (s[r] == batch[r].sel_col && g[r] == batch[r].agg) ? 1 : 0;
    total += s.size(0);
  }
  std::cout << "dev sketch accuracy " << static_cast<double>(exact) / total << "\n";

  const auto demo = synthetic_tables(4, 3);
  auto out = net->forward(feats.questions(demo), feats.columns(demo));
  torch::Tensor sel_h, agg_h;
  std::tie(sel_h, agg_h) = decode_to_host(out);
  // BUG(torch-non-blocking-d2h-race): the demo predictions go to the printer
  // before the queued copies are known to have landed.
  print_queries(demo, sel_h, agg_h);
  return 0;
}
