// Sorts scanned receipts into expense categories from 32 layout features
// (an MLP with Dropout). A Trainer object owns the model, its AdamW
// optimizer and the loss module; fit() calls train_step() once per batch,
// and the gradient-accumulation counter lives in a small struct member. A
// HeadCalibrator then refits only the output layer on the next month's
// receipts, whose features drifted.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kFeatures = 32;
constexpr int64_t kCategories = 6;

struct ReceiptNetImpl : torch::nn::Module {
  ReceiptNetImpl()
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(kFeatures, 96), torch::nn::GELU(),
                                                           torch::nn::Dropout(0.3)))),
        head(register_module("head", torch::nn::Linear(96, kCategories))) {}
  torch::Tensor forward(torch::Tensor x) { return head(body->forward(x)); }
  torch::nn::Sequential body;
  torch::nn::Linear head;
};
TORCH_MODULE(ReceiptNet);

struct Batch {
  torch::Tensor x, y;
};

struct Month {
  std::vector<Batch> batches;
};

// Each category has a prototype layout; `shift` moves every receipt.
Month synth_month(int64_t batches, int64_t batch_size, double shift, torch::Device device) {
  auto proto = torch::linspace(-1, 1, kCategories * kFeatures, torch::TensorOptions().device(device))
                   .view({kCategories, kFeatures});
  Month month;
  for (int64_t b = 0; b < batches; ++b) {
    auto y = torch::randint(kCategories, {batch_size}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto x = proto.index_select(0, y) + shift + 0.5 * torch::randn({batch_size, kFeatures}, device);
    month.batches.push_back({x, y});
  }
  return month;
}

// How many micro-batches make one update, and how many have run.
struct AccumState {
  int64_t micro = 0;
  int64_t every = 4;
};

class Trainer {
public:
  Trainer(ReceiptNet model, int64_t accum_every, double lr)
      : model_(std::move(model)),
        opt_(model_->parameters(), torch::optim::AdamWOptions(lr).weight_decay(0.05)) {
    accum_.every = accum_every;
  }

  torch::Tensor compute_loss(const Batch &batch) {
    // OK(torch-eval-mode-missing): evaluate() switches to eval() before it
    // calls this and back to train() afterwards.
    return criterion_(model_->forward(batch.x), batch.y);
  }

  torch::Tensor train_step(const Batch &batch) {
    auto loss = compute_loss(batch);
    // BUG(torch-grad-accumulation-unscaled): the default CrossEntropyLoss
    // averages each micro-batch and accum_.every of them add up in .grad()
    // before one step: every update is accum_.every times too large.
    loss.backward();
    if (++accum_.micro % accum_.every == 0) {
      // OK(torch-missing-zero-grad): the reset shares the step's condition.
      opt_.step();
      opt_.zero_grad();
    }
    return loss.detach();
  }

  double evaluate(const Month &val) {
    model_->eval();
    torch::NoGradGuard no_grad;
    double total = 0;
    for (const auto &batch : val.batches)
      total += compute_loss(batch).item<double>();
    model_->train();
    return total / static_cast<double>(val.batches.size());
  }

  void fit(const Month &train, const Month &val, int epochs) {
    opt_.zero_grad();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      model_->train();
      auto running = torch::zeros({}, train.batches.front().x.options());
      for (const auto &batch : train.batches)
        running += train_step(batch);
      std::cout << "epoch " << epoch << " train loss "
                << (running / static_cast<double>(train.batches.size())).item<double>() << " val loss "
                << evaluate(val) << '\n';
    }
  }

private:
  ReceiptNet model_;
  AccumState accum_;
  torch::nn::CrossEntropyLoss criterion_;
  torch::optim::AdamW opt_;
};

// Refits the output layer on a newer month; the body stays as trained.
class HeadCalibrator {
public:
  explicit HeadCalibrator(ReceiptNet model)
      : model_(std::move(model)), opt_(model_->head->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9)) {}

  void train_step(const Batch &batch) {
    auto logits = model_->forward(batch.x);
    auto loss = torch::nn::functional::cross_entropy(logits, batch.y);
    // OK(torch-grad-accumulation-unscaled): the head steps after every
    // batch; nothing is accumulated on purpose.
    loss.backward();
    // BUG(torch-missing-zero-grad): fit() resets the gradients once per
    // pass, so inside a pass every step re-applies all earlier batches'.
    opt_.step();
  }

  void fit(const Month &recent, int passes) {
    model_->train();
    for (int pass = 0; pass < passes; ++pass) {
      opt_.zero_grad();
      for (const auto &batch : recent.batches)
        train_step(batch);
    }
  }

private:
  ReceiptNet model_;
  torch::optim::SGD opt_;
};

double accuracy(ReceiptNet &model, const Month &split) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  for (const auto &batch : split.batches) {
    // OK(torch-eval-mode-missing): main() calls model->eval() before each call.
    auto pred = model->forward(batch.x).argmax(1);
    correct += pred.eq(batch.y).sum().item<int64_t>();
    seen += batch.y.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

int main(int argc, char **argv) {
  torch::manual_seed(41);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const int64_t accum = argc > 1 ? std::stoll(argv[1]) : 4;

  ReceiptNet model;
  model->to(device);
  auto train = synth_month(64, 32, 0.0, device);
  auto val = synth_month(8, 128, 0.0, device);

  Trainer trainer(model, accum, 1e-3);
  trainer.fit(train, val, 6);
  model->eval();
  std::cout << "accuracy this month " << accuracy(model, val) << '\n';

  auto next_train = synth_month(16, 32, 0.3, device);
  auto next_val = synth_month(8, 128, 0.3, device);
  HeadCalibrator calibrator(model);
  calibrator.fit(next_train, 3);
  model->eval();
  std::cout << "accuracy next month " << accuracy(model, next_val) << " val loss "
            << trainer.evaluate(next_val) << '\n';
}
