// ECG beat classification (MIT-BIH style: 187-sample beats, 5 AAMI classes
// N/S/V/F/Q). A convolutional encoder is pretrained as an autoencoder with a
// small decoder, then a classifier head (the "critic" of the latent code) is
// trained on top. An Experiment struct owns the three models and one
// set_mode() switch for all of them. After training, the latent codes feed a
// drift monitor over a 24-hour Holter recording and the model is fine-tuned
// on one patient's labelled beats.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace ecg {
constexpr int64_t kBeatLen = 187, kClasses = 5, kLatent = 32;

struct EncoderImpl : nn::Module {
  EncoderImpl()
      : conv1(register_module("conv1", nn::Conv1d(nn::Conv1dOptions(1, 16, 7).padding(3)))),
        bn1(register_module("bn1", nn::BatchNorm1d(16))),
        conv2(register_module("conv2", nn::Conv1d(nn::Conv1dOptions(16, 32, 5).stride(2).padding(2)))),
        bn2(register_module("bn2", nn::BatchNorm1d(32))),
        proj(register_module("proj", nn::Linear(32, kLatent))) {}
  torch::Tensor forward(const torch::Tensor &beat) {  // B x 1 x 187
    auto h = torch::relu(bn1->forward(conv1->forward(beat)));
    h = torch::relu(bn2->forward(conv2->forward(h)));
    return proj->forward(h.mean(2));
  }
  nn::Conv1d conv1;
  nn::BatchNorm1d bn1;
  nn::Conv1d conv2;
  nn::BatchNorm1d bn2;
  nn::Linear proj;
};
TORCH_MODULE(Encoder);

struct DecoderImpl : nn::Module {
  DecoderImpl()
      : fc1(register_module("fc1", nn::Linear(kLatent, 128))),
        drop(register_module("drop", nn::Dropout(0.1))),
        fc2(register_module("fc2", nn::Linear(128, kBeatLen))) {}
  torch::Tensor forward(const torch::Tensor &z) {
    return fc2->forward(drop->forward(torch::relu(fc1->forward(z)))).unsqueeze(1);
  }
  nn::Linear fc1;
  nn::Dropout drop;
  nn::Linear fc2;
};
TORCH_MODULE(Decoder);

struct CriticImpl : nn::Module {
  CriticImpl()
      : fc1(register_module("fc1", nn::Linear(kLatent, 64))),
        drop(register_module("drop", nn::Dropout(0.3))),
        fc2(register_module("fc2", nn::Linear(64, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &z) { return fc2->forward(drop->forward(torch::relu(fc1->forward(z)))); }
  nn::Linear fc1;
  nn::Dropout drop;
  nn::Linear fc2;
};
TORCH_MODULE(Critic);

struct BeatSet {
  explicit BeatSet(int64_t n)
      : beats(torch::randn({n, 1, kBeatLen})), labels(torch::randint(0, kClasses, {n}, torch::kLong)) {}
  int64_t size() const { return beats.size(0); }
  torch::Tensor x(int64_t i, int64_t bs) const { return beats.narrow(0, i, std::min(bs, size() - i)); }
  torch::Tensor y(int64_t i, int64_t bs) const { return labels.narrow(0, i, std::min(bs, size() - i)); }
  torch::Tensor beats;   // N x 1 x 187, z-scored per beat
  torch::Tensor labels;  // N
};

struct Experiment {
  Encoder encoder;
  Decoder decoder;
  Critic critic;

  // One switch for the whole experiment (written before the critic existed).
  void set_mode(bool train) {
    encoder->train(train);
    decoder->train(train);
  }

  // Beat class per beat; the caller holds the grad guard.
  torch::Tensor predict(const torch::Tensor &beats) {
    auto z = encoder->forward(beats);
    // BUG(torch-eval-mode-missing): the caller's set_mode(false) leaves the critic in training mode.
    return critic->forward(z).argmax(1);
  }

  std::vector<double> recon_error_per_class(const BeatSet &data) {
    set_mode(false);
    std::vector<double> err(kClasses, 0.0);
    for (int64_t c = 0; c < kClasses; ++c) {
      auto idx = (data.labels == c).nonzero().squeeze(1);
      if (idx.numel() == 0) continue;
      auto beats = data.beats.index_select(0, idx);
      // BUG(torch-inference-without-no-grad): set_mode(false) is no grad guard; each class's graph is recorded.
      auto recon = decoder->forward(encoder->forward(beats));
      err[static_cast<size_t>(c)] = F::mse_loss(recon, beats).item<double>();
    }
    set_mode(true);
    return err;
  }
};

const torch::Tensor &aami_weights() {
  static const torch::Tensor w = torch::tensor({0.3, 2.5, 1.2, 6.0, 4.0});
  return w;
}

// Runs fn with the model in eval mode and puts the previous mode back.
template <typename Model, typename Fn>
auto with_eval(Model &model, Fn &&fn) -> decltype(fn()) {
  const bool was_training = model->is_training();
  model->eval();
  auto result = fn();
  model->train(was_training);
  return result;
}

// Runs fn with the model in inference mode (the monitor's helper).
template <typename Model, typename Fn>
void in_eval(Model &model, const Fn &fn) {
  model->eval();
  fn();
}

void pretrain_autoencoder(Experiment &exp, const BeatSet &data, int epochs) {
  exp.set_mode(true);
  std::vector<torch::Tensor> params = exp.encoder->parameters();
  for (const auto &p : exp.decoder->parameters()) params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));
  opt.zero_grad();
  auto update = [&opt](const torch::Tensor &loss) {
    loss.backward();
    // BUG(torch-missing-zero-grad): the gradients are reset once before training; every batch adds to all earlier ones.
    opt.step();
  };
  for (int epoch = 0; epoch < epochs; ++epoch) {
    double running = 0.0;
    for (int64_t i = 0; i < data.size(); i += 128) {
      auto x = data.x(i, 128);
      // OK(torch-eval-mode-missing): set_mode(true) above; this trains the encoder and the decoder.
      auto loss = F::mse_loss(exp.decoder->forward(exp.encoder->forward(x)), x);
      update(loss);
      running += loss.item<double>();
    }
    std::cout << "pretrain " << epoch << " mse " << running / (data.size() / 128.0) << '\n';
  }
}

double validate(Experiment &exp, const BeatSet &val) {
  exp.set_mode(false);
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  double recon = 0.0;
  for (int64_t i = 0; i < val.size(); i += 256) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): set_mode(false) switched the encoder; guard above.
    auto z = exp.encoder->forward(val.x(i, 256));
    // BUG(torch-eval-mode-missing): set_mode() never switches the critic; its dropout is still on.
    auto logits = exp.critic->forward(z);
    // OK(torch-eval-mode-missing): the decoder is switched by set_mode(false).
    recon += F::mse_loss(exp.decoder->forward(z), val.x(i, 256)).item<double>();
    correct += logits.argmax(1).eq(val.y(i, 256)).sum().item<int64_t>();
  }
  exp.set_mode(true);
  std::cout << "  val recon " << recon << '\n';
  return static_cast<double>(correct) / static_cast<double>(val.size());
}

void train_classifier(Experiment &exp, const BeatSet &train, const BeatSet &val, int epochs) {
  std::vector<torch::Tensor> params = exp.encoder->parameters();
  for (const auto &p : exp.critic->parameters()) params.push_back(p);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.01).momentum(0.9));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    exp.set_mode(true);
    for (int64_t i = 0; i < train.size(); i += 64) {
      opt.zero_grad();
      // OK(torch-eval-mode-missing): validate() of the previous epoch put the encoder back with set_mode(true).
      auto z = exp.encoder->forward(train.x(i, 64));
      auto loss = F::cross_entropy(exp.critic->forward(z), train.y(i, 64),
                                   F::CrossEntropyFuncOptions().weight(aami_weights()));
      loss.backward();
      opt.step();
    }
    std::cout << "epoch " << epoch << " val acc " << validate(exp, val) << '\n';
  }
}

torch::Tensor embed_all(Encoder &enc, const BeatSet &data) {
  return with_eval(enc, [&] {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> codes;
    for (int64_t i = 0; i < data.size(); i += 256) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): with_eval switched the encoder; guard in the lambda.
      codes.push_back(enc->forward(data.x(i, 256)));
    }
    return torch::cat(codes);
  });
}

void drift_report(Encoder &enc, const torch::Tensor &holter, const torch::Tensor &ref_mean) {
  in_eval(enc, [&] {
    for (int64_t h = 0; h < holter.size(0); ++h) {
      // BUG(torch-inference-without-no-grad): in_eval only switches the mode; every hour's graph is recorded.
      auto z = enc->forward(holter[h]);
      std::cout << "hour " << h << " drift " << (z.mean(0) - ref_mean).norm().item<double>() << '\n';
    }
  });
}

// A few minutes of annotated beats from one patient adapt the model to their morphology.
void personalise(Experiment &exp, const BeatSet &patient, int epochs) {
  std::vector<torch::Tensor> params = exp.encoder->parameters();
  for (const auto &p : exp.critic->parameters()) params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-4));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = 0; i < patient.size(); i += 32) {
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): drift_report's in_eval left the encoder in eval mode; BatchNorm is frozen while it trains.
      auto z = exp.encoder->forward(patient.x(i, 32));
      // OK(torch-eval-mode-missing): the critic was never switched to eval; it trains in training mode.
      auto logits = exp.critic->forward(z);
      auto loss = F::cross_entropy(logits, patient.y(i, 32));
      loss.backward();
      opt.step();
    }
  }
}

}  // namespace ecg
int main() {
  using namespace ecg;
  torch::manual_seed(396);
  BeatSet train(6000), val(1500), patient(320);
  Experiment exp;

  pretrain_autoencoder(exp, train, 5);
  train_classifier(exp, train, val, 8);
  const auto ref_mean = embed_all(exp.encoder, train).mean(0);
  const auto holter = torch::randn({24, 120, 1, kBeatLen});  // 24 hours x 120 sampled beats
  drift_report(exp.encoder, holter, ref_mean);
  personalise(exp, patient, 3);
  const auto errs = exp.recon_error_per_class(val);
  for (int64_t c = 0; c < kClasses; ++c) std::cout << "class " << c << " recon " << errs[static_cast<size_t>(c)] << '\n';
  const BeatSet holdout(2000);
  exp.set_mode(false);
  torch::NoGradGuard no_grad;
  auto confusion = torch::zeros({kClasses, kClasses}, torch::kLong);
  for (int64_t i = 0; i < holdout.size(); i += 500) {
    const auto pred = exp.predict(holdout.x(i, 500));
    confusion.index_put_({holdout.y(i, 500), pred}, torch::ones_like(pred), /*accumulate=*/true);
  }
  std::cout << confusion << '\n';
  return 0;
}
