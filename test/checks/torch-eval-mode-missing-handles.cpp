// RUN: %check_torch_tidy %s torch-eval-mode-missing %t
//
// The ways a program holds a module: a std::unique_ptr to its Impl, a
// std::optional built in place by emplace(), the raw pointer of a holder's
// get() handed to a helper, and a member set by a constructor that a
// derived class inherits (`using Base::Base`).

#include <torch/torch.h>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t width = 8) {
    fc = register_module("fc", torch::nn::Linear(width, 2));
    drop = register_module("drop", torch::nn::Dropout(0.5));
  }
  torch::Tensor forward(torch::Tensor x) { return drop(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor batch();

// A server that owns its module through a std::unique_ptr to the Impl.
class Server {
public:
  void start() {
    model_ = std::make_unique<NetImpl>(8);
    warmup();
    model_->eval();
  }
  void warmup() {
    torch::NoGradGuard no_grad;
    model_->forward(batch());
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'model_' is evaluated in training mode
  }
  torch::Tensor serve(const torch::Tensor &x) {
    torch::NoGradGuard no_grad;
    return model_->forward(x);
  }

private:
  std::unique_ptr<NetImpl> model_;
};

// A student built lazily in a std::optional.
class Distiller {
public:
  void ensure_student() {
    if (!student_)
      student_.emplace(8);
  }
  torch::Tensor probe() {
    ensure_student();
    torch::NoGradGuard no_grad;
    return (*student_)->forward(batch());
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module '*student_' is evaluated in training mode
  }

private:
  std::optional<Net> student_;
};

// The helper switches the module through the raw pointer it is given.
void to_inference(NetImpl *net) { net->eval(); }

torch::Tensor score_after_helper(Net &net) {
  net->train();
  to_inference(net.get());
  torch::NoGradGuard no_grad;
  return net->forward(batch());
}

// A derived engine inherits the constructor that switches the module.
class Engine {
public:
  explicit Engine(Net net) : net_(net) { net_->eval(); }
  virtual ~Engine() = default;
  virtual torch::Tensor score(const torch::Tensor &x) {
    torch::NoGradGuard no_grad;
    return net_->forward(x);
  }

protected:
  Net net_;
};
class FastEngine : public Engine {
public:
  using Engine::Engine;
  torch::Tensor score(const torch::Tensor &x) override {
    torch::NoGradGuard no_grad;
    return net_->forward(x).sigmoid();
  }
};

// Folds built by the count constructor: each a new module, in training
// mode until something switches it.
void fold_ensemble() {
  std::vector<Net> folds(3);
  torch::NoGradGuard no_grad;
  for (auto &fold : folds)
    fold->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'fold' is evaluated in training mode
}

// A helper that downcasts an experiment's base handle (and tests it) hands
// back the same module: its mode is the experiment's.
struct Experiment {
  std::shared_ptr<torch::nn::Module> model;
};
template <typename T> std::shared_ptr<T> as(const Experiment &exp) {
  auto net = std::dynamic_pointer_cast<T>(exp.model);
  if (!net)
    throw std::logic_error("another architecture");
  return net;
}
void train_experiment(Experiment &exp) {
  auto net = as<NetImpl>(exp);
  net->train();
  net->forward(batch()).sum().backward();
}
void score_experiment(const Experiment &exp) {
  auto net = as<NetImpl>(exp);
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode
}

int main() {
  Server server;
  server.start();
  server.serve(batch());
  Distiller distiller;
  distiller.probe();
  Net net;
  score_after_helper(net);
  Net other;
  FastEngine engine(other);
  engine.score(batch());
  fold_ensemble();
  Experiment exp{std::make_shared<NetImpl>()};
  train_experiment(exp);
  score_experiment(exp);
}
