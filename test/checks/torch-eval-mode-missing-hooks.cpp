// RUN: %check_torch_tidy %s torch-eval-mode-missing %t
//
// What an object's members hold between its methods' calls (its class
// state): a hook container that no method of a template's instance fills
// holds none; a std::function a setter or the constructor stores holds what
// every caller writes there; a base-class method's virtual call on `*this`
// runs the derived class's override. Modules handed on as they are made
// (`zoo.emplace(k, std::make_shared<Net>())`) and through `*ptr` keep their
// mode.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(8, 2));
    drop = register_module("drop", torch::nn::Dropout(0.5));
  }
  torch::Tensor forward(torch::Tensor x) { return drop(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor batch();

// Trainer<Net> never gets a hook: calling its hooks switches no mode.
template <typename Model> class Trainer {
public:
  explicit Trainer(Model model) : model_(std::move(model)) {}
  void add_hook(std::function<void(int)> hook) { hooks_.push_back(std::move(hook)); }
  void fit() {
    for (int step = 0; step < 10; ++step) {
      model_->train();
      model_->forward(batch()).sum().backward();
      for (auto &hook : hooks_)
        hook(step);
    }
  }
  Model &model() { return model_; }

private:
  Model model_;
  std::vector<std::function<void(int)>> hooks_;
};

double top1(Net &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'trainer.model()' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void template_trainer_without_hooks() {
  Net net;
  Trainer<Net> trainer(net);
  trainer.fit();
  top1(trainer.model());
}

// A validator a setter stores, written by the one caller: run() runs it
// right after training.
class Runner {
public:
  explicit Runner(Net net) : net_(std::move(net)) {}
  void set_validator(std::function<double()> v) { validator_ = std::move(v); }
  void run() {
    for (int step = 0; step < 10; ++step) {
      net_->train();
      net_->forward(batch()).sum().backward();
    }
    if (validator_)
      validator_();
  }

private:
  Net net_;
  std::function<double()> validator_;
};

void validator_set_by_the_caller() {
  Net net;
  Runner runner(net);
  runner.set_validator([&net] {
    torch::NoGradGuard no_grad;
    return net->forward(batch()).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
  });
  runner.run();
}

// The base class's loop calls the virtual steps on `*this`: the derived
// class's members are what its own methods leave.
class Learner {
public:
  virtual ~Learner() = default;
  virtual void train_step() = 0;
  virtual double eval_step() = 0;
  double fit() {
    for (int i = 0; i < 5; ++i)
      train_step();
    torch::NoGradGuard no_grad;
    return eval_step();
  }
};

class DropoutLearner : public Learner {
public:
  void train_step() override {
    net_->train();
    net_->forward(batch()).sum().backward();
  }
  double eval_step() override {
    return net_->forward(batch()).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'net_' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
  }

private:
  Net net_;
};

double fit_learner() {
  std::unique_ptr<Learner> learner = std::make_unique<DropoutLearner>();
  return learner->fit();
}

// Built in place into a registry, evaluated in a range-for.
void registry_of_fresh_models() {
  std::map<std::string, std::shared_ptr<NetImpl>> zoo;
  zoo.emplace("small", std::make_shared<NetImpl>());
  torch::NoGradGuard no_grad;
  for (auto &[name, model] : zoo)
    model->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'model' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

// `*expert` for a `NetImpl &`: the module the pointer holds.
double score(NetImpl &net) {
  torch::NoGradGuard no_grad;
  return net.forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module '*expert' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

std::shared_ptr<NetImpl> lookup(const std::map<std::string, std::shared_ptr<NetImpl>> &zoo);

void dereferenced_pointer() {
  std::map<std::string, std::shared_ptr<NetImpl>> zoo;
  auto expert = lookup(zoo);
  expert->train();
  score(*expert);
}

// A decoding method whose outputs make the caller's loss: training, not
// evaluation.
struct Decoder : torch::nn::Module {
  Decoder() {
    fc = register_module("fc", torch::nn::Linear(8, 8));
    drop = register_module("drop", torch::nn::Dropout(0.1));
  }
  std::tuple<torch::Tensor, torch::Tensor> step(torch::Tensor x) {
    auto h = drop(fc(x));
    return {h, h.sum(1)};
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};

torch::Tensor sample(Decoder &decoder) {
  std::vector<torch::Tensor> logps;
  auto x = batch();
  for (int t = 0; t < 4; ++t) {
    auto [h, logp] = decoder.step(x);
    x = h;
    logps.push_back(logp);
  }
  return torch::stack(logps, 1);
}

void reinforce() {
  Decoder decoder;
  torch::optim::SGD opt(decoder.parameters(), 0.1);
  for (int it = 0; it < 3; ++it) {
    opt.zero_grad();
    sample(decoder).sum().backward();
    opt.step();
  }
}

// A layer registered on some paths only says nothing of the module: the
// baseline built without Monte-Carlo dropout has none. A Cloneable's
// reset(), which its constructor calls, registers on every path.
struct McNetImpl : torch::nn::Module {
  explicit McNetImpl(bool mc_dropout) {
    fc = register_module("fc", torch::nn::Linear(8, 2));
    if (mc_dropout)
      drop = register_module("drop", torch::nn::Dropout(0.3));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(McNet);

struct ResetNetImpl : torch::nn::Cloneable<ResetNetImpl> {
  ResetNetImpl() { reset(); }
  void reset() override {
    fc = register_module("fc", torch::nn::Linear(8, 2));
    drop = register_module("drop", torch::nn::Dropout(0.3));
  }
  torch::Tensor forward(torch::Tensor x) { return drop(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(ResetNet);

void conditional_and_reset_layers() {
  McNet baseline(false);
  ResetNet cloneable;
  torch::NoGradGuard no_grad;
  baseline->forward(batch());
  cloneable->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'cloneable' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}
