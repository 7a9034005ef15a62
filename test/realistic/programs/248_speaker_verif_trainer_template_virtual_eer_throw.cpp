// Speaker verification: an x-vector TDNN trained as a speaker classifier by a
// Trainer class template whose fit() calls virtual train/eval steps (softmax or
// additive-angular-margin head), scored on trials by cosine EER (a diverged
// model throws), then enrolment, cohort statistics and in-domain adaptation.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kMels = 40, kFrames = 120, kEmbed = 64, kSpeakers = 24;

struct XVectorImpl : torch::nn::Module {
  XVectorImpl()
      : tdnn1(register_module("tdnn1", torch::nn::Conv1d(torch::nn::Conv1dOptions(kMels, 128, 5)))),
        bn1(register_module("bn1", torch::nn::BatchNorm1d(128))),
        tdnn2(register_module("tdnn2", torch::nn::Conv1d(torch::nn::Conv1dOptions(128, 128, 3).dilation(2)))),
        bn2(register_module("bn2", torch::nn::BatchNorm1d(128))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        embed(register_module("embed", torch::nn::Linear(256, kEmbed))) {}
  torch::Tensor forward(const torch::Tensor &feats) {
    auto h = torch::relu(bn1->forward(tdnn1->forward(feats)));
    h = torch::relu(bn2->forward(tdnn2->forward(h)));
    auto stats = torch::cat({h.mean(2), h.std(2)}, 1);  // statistics pooling
    return embed->forward(drop->forward(stats));
  }
  torch::nn::Conv1d tdnn1; torch::nn::BatchNorm1d bn1;
  torch::nn::Conv1d tdnn2; torch::nn::BatchNorm1d bn2;
  torch::nn::Dropout drop; torch::nn::Linear embed;
};
TORCH_MODULE(XVector);

struct Batch { torch::Tensor feats, speakers; };
struct Trial { torch::Tensor enroll, test; bool same; };
struct RunConfig { double margin = 0.2; int epochs = 4; double lr = 1e-3; };

// Synthetic corpus: each speaker is a mean log-mel envelope plus noise.
class Corpus {
 public:
  explicit Corpus(int64_t speakers) : centroids_(torch::randn({speakers, kMels, 1})) {}
  torch::Tensor utterance(int64_t spk) const { return centroids_[spk] + 0.6 * torch::randn({kMels, kFrames}); }
  Batch batch(int64_t n) const {
    auto ids = torch::arange(n, torch::kLong) % centroids_.size(0);
    return {centroids_.index_select(0, ids) + 0.6 * torch::randn({n, kMels, kFrames}), ids};
  }
  std::vector<Trial> trials(int64_t n) const {  // every other trial is a target trial
    std::vector<Trial> out;
    for (int64_t i = 0, a = 0; i < n; ++i, a = i % centroids_.size(0))
      out.push_back({utterance(a), utterance(i % 2 ? (a + 1 + i % 5) % centroids_.size(0) : a), i % 2 == 0});
    return out;
  }
 private:
  torch::Tensor centroids_;
};

std::vector<torch::Tensor> join(std::vector<torch::Tensor> a, const std::vector<torch::Tensor> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

template <typename Model>
class Trainer {
 public:
  explicit Trainer(Model model) : model_(std::move(model)) {}
  virtual ~Trainer() = default;
  virtual torch::Tensor train_step(const Batch &batch) = 0;
  virtual double eval_step(const Batch &batch) = 0;

  void fit(const std::vector<Batch> &train, const std::vector<Batch> &dev, int epochs) {
    for (int epoch = 0; epoch < epochs; ++epoch) {
      model_->train();
      auto running = torch::zeros({});
      for (const auto &batch : train)
        // OK(torch-loss-accumulation-graph): the step's loss is detached before it is summed.
        running += train_step(batch).detach();
      double dev_loss = 0.0;
      {
        torch::NoGradGuard no_grad;
        for (const auto &batch : dev)
          dev_loss += eval_step(batch);
      }
      std::cout << "epoch " << epoch << " train " << running.item<double>() / static_cast<double>(train.size())
                << " dev " << dev_loss / static_cast<double>(dev.size()) << '\n';
    }
  }

 protected:
  Model model_;
};

class SoftmaxTrainer : public Trainer<XVector> {
 public:
  SoftmaxTrainer(XVector net, double lr)
      : Trainer<XVector>(std::move(net)), head_(kEmbed, kSpeakers),
        opt_(join(model_->parameters(), head_->parameters()), torch::optim::AdamOptions(lr)) {}
  torch::Tensor train_step(const Batch &batch) override {
    opt_.zero_grad();
    auto loss = F::cross_entropy(train_logits(model_->forward(batch.feats), batch.speakers), batch.speakers);
    loss.backward();
    opt_.step();
    return loss;
  }
  double eval_step(const Batch &batch) override {
    // BUG(torch-eval-mode-missing): fit() puts model_ in train() every epoch
    // and runs this dev step under its no-grad guard without eval().
    auto emb = model_->forward(batch.feats);
    return F::cross_entropy(head_->forward(emb), batch.speakers).item<double>();
  }

 protected:
  virtual torch::Tensor train_logits(const torch::Tensor &emb, const torch::Tensor &) { return head_->forward(emb); }
  torch::nn::Linear head_;
  torch::optim::Adam opt_;
};

// Additive angular margin: cosine logits, the target's angle widened by m.
class AamTrainer : public SoftmaxTrainer {
 public:
  AamTrainer(XVector net, double lr, double margin) : SoftmaxTrainer(std::move(net), lr), margin_(margin) {}

 protected:
  torch::Tensor train_logits(const torch::Tensor &emb, const torch::Tensor &target) override {
    auto cosine = F::normalize(emb, F::NormalizeFuncOptions().dim(1))
                      .matmul(F::normalize(head_->weight, F::NormalizeFuncOptions().dim(1)).t());
    auto theta = torch::acos(cosine.clamp(-1 + 1e-6, 1 - 1e-6));
    auto target_mask = F::one_hot(target, kSpeakers).to(torch::kBool);
    return 30.0 * torch::cos(torch::where(target_mask, theta + margin_, theta));
  }
  double margin_;
};

struct ScoringError : std::runtime_error { using std::runtime_error::runtime_error; };
// Cosine-scores every trial and returns the equal error rate. Throws on a
// non-finite score (a diverged model), leaving `net` in evaluation mode.
double equal_error_rate(XVector &net, const std::vector<Trial> &trials) {
  net->eval();
  torch::NoGradGuard no_grad;
  std::vector<std::pair<double, bool>> scored;
  for (const auto &trial : trials) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
    auto emb = F::normalize(net->forward(torch::stack({trial.enroll, trial.test})), F::NormalizeFuncOptions().dim(1));
    const double score = (emb[0] * emb[1]).sum().item<double>();
    if (!std::isfinite(score))
      throw ScoringError("non-finite trial score");
    scored.emplace_back(score, trial.same);
  }
  net->train();
  std::sort(scored.begin(), scored.end());
  const double targets = static_cast<double>(std::count_if(scored.begin(), scored.end(), [](auto &s) { return s.second; }));
  const double nontargets = static_cast<double>(scored.size()) - targets;
  double miss = 0, false_alarm = nontargets, eer = 1.0;
  for (const auto &s : scored) {  // move the threshold just above s
    s.second ? miss += 1 : false_alarm -= 1;
    eer = std::min(eer, std::max(miss / targets, false_alarm / nontargets));
  }
  return eer;
}

void build_enrolment_db(XVector &net, const Corpus &corpus, std::map<std::string, torch::Tensor> &db) {
  torch::NoGradGuard no_grad;
  for (int64_t spk = 0; spk < kSpeakers; ++spk) {
    auto utts = torch::stack({corpus.utterance(spk), corpus.utterance(spk), corpus.utterance(spk)});
    // BUG(torch-eval-mode-missing): equal_error_rate() ended with train() on
    // its normal return, and main() enrols right after it.
    db["spk" + std::to_string(spk)] = F::normalize(net->forward(utts).mean(0), F::NormalizeFuncOptions().dim(0));
  }
}

// Scoring mode for a deployed embedding extractor; returns its parameter count.
int64_t to_scoring_mode(torch::nn::Module &module) {
  module.eval();
  int64_t count = 0;
  for (const auto &p : module.parameters())
    count += p.numel();
  return count;
}

struct CohortStats { double mean = 0, stddev = 1; };
CohortStats cohort_stats(XVector &net, const torch::Tensor &probe, const std::vector<torch::Tensor> &cohort) {
  std::vector<double> scores;
  for (const auto &utt : cohort) {
    // BUG(torch-inference-without-no-grad): no guard here or in main(); the
    // cohort pass never trains.
    // OK(torch-eval-mode-missing): to_scoring_mode(*net) switched it to eval() before.
    auto pair = F::normalize(net->forward(torch::stack({probe, utt})), F::NormalizeFuncOptions().dim(1));
    scores.push_back((pair[0] * pair[1]).sum().item<double>());
  }
  auto t = torch::tensor(scores, torch::kDouble);
  return {t.mean().item<double>(), t.std().item<double>()};
}

struct AdaptReport { torch::Tensor loss_sum = torch::zeros({}); int64_t steps = 0; };
AdaptReport adapt(XVector &net, torch::nn::Linear &head, const std::vector<Batch> &in_domain) {
  torch::optim::SGD opt(join(net->parameters(), head->parameters()), torch::optim::SGDOptions(1e-3).momentum(0.9));
  AdaptReport report;
  for (const auto &batch : in_domain) {
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): to_scoring_mode() left net in eval() and
    // adaptation trains with dropout off and frozen BatchNorm statistics.
    auto loss = F::cross_entropy(head->forward(net->forward(batch.feats)), batch.speakers);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the report field outlives the step
    // and keeps every step's graph.
    report.loss_sum += loss;
    ++report.steps;
  }
  return report;
}

int main() {
  torch::manual_seed(248);
  RunConfig cfg;
  Corpus corpus(kSpeakers);
  std::vector<Batch> train(20), dev(4), in_domain(4);
  std::generate(train.begin(), train.end(), [&] { return corpus.batch(32); });
  std::generate(dev.begin(), dev.end(), [&] { return corpus.batch(32); });
  std::generate(in_domain.begin(), in_domain.end(), [&] { return corpus.batch(16); });
  XVector net;
  std::unique_ptr<Trainer<XVector>> trainer;
  if (cfg.margin > 0)
    trainer = std::make_unique<AamTrainer>(net, cfg.lr, cfg.margin);
  else
    trainer = std::make_unique<SoftmaxTrainer>(net, cfg.lr);
  trainer->fit(train, dev, cfg.epochs);
  double eer = 1.0;
  try {
    eer = equal_error_rate(net, corpus.trials(200));
  } catch (const ScoringError &err) {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): equal_error_rate() switched net to eval()
    // before anything in it could throw.
    auto emb = net->forward(corpus.utterance(0).unsqueeze(0));
    std::cerr << err.what() << "; probe embedding norm " << emb.norm().item<double>() << '\n';
  }
  std::cout << "EER " << eer << '\n';
  std::map<std::string, torch::Tensor> db;
  build_enrolment_db(net, corpus, db);
  std::cout << "scoring " << to_scoring_mode(*net) << " parameters, " << db.size() << " speakers enrolled\n";
  std::vector<torch::Tensor> cohort;
  for (int64_t spk = 0; spk < kSpeakers; ++spk)
    cohort.push_back(corpus.utterance(spk));
  const auto stats = cohort_stats(net, corpus.utterance(3), cohort);
  std::cout << "cohort mean " << stats.mean << " std " << stats.stddev << '\n';

  torch::nn::Linear head(kEmbed, kSpeakers);
  const auto report = adapt(net, head, in_domain);
  std::cout << "adapted " << report.steps << " steps, mean loss "
            << report.loss_sum.item<double>() / static_cast<double>(report.steps) << '\n';
  std::cout << "in-domain EER " << equal_error_rate(net, corpus.trials(100)) << '\n';
}
