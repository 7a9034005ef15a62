// RUN: %check_torch_tidy %s torch-eval-mode-missing %t
//
// Modules held in containers: one element switched by a constant index
// leaves the others as they were (the elements' mode is then unknown, not
// the switched one's); `emplace_back(name, net)` builds a pair from its
// arguments; `std::swap` of two elements of one container changes nothing
// of what the container holds.

#include <torch/torch.h>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

void named_folds() {
  std::vector<std::pair<std::string, Net>> zoo;
  for (int k = 0; k < 3; ++k) {
    Net fold;
    zoo.emplace_back("fold" + std::to_string(k), fold);
  }
  torch::NoGradGuard no_grad;
  for (auto &[name, model] : zoo)
    model->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'model' is evaluated in training mode
}

void named_folds_in_eval() {
  std::vector<std::pair<std::string, Net>> zoo;
  for (int k = 0; k < 3; ++k) {
    Net fold;
    fold->eval();
    zoo.emplace_back("fold" + std::to_string(k), fold);
  }
  torch::NoGradGuard no_grad;
  for (auto &[name, model] : zoo)
    model->forward(batch());
}

// Online and target networks: only the target is put in evaluation mode.
void polish(Net &online, Net &target, torch::optim::SGD &opt) {
  auto loss = (online->forward(batch()) - target->forward(batch()).detach()).pow(2).mean();
  loss.backward();
  opt.step();
}

void online_and_target(std::array<Net, 2> &nets, torch::optim::SGD &opt) {
  nets[0]->train();
  nets[1]->eval();
  polish(nets[0], nets[1], opt);
}

void swapped_pair(std::array<Net, 2> &nets) {
  for (auto &net : nets)
    net->train();
  std::swap(nets[0], nets[1]);
  torch::NoGradGuard no_grad;
  nets[1]->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'nets[1]' is evaluated in training mode
}

void swapped_locals(Net &a, Net &b) {
  a->eval();
  b->train();
  std::swap(a, b);
  torch::NoGradGuard no_grad;
  b->forward(batch());
  a->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'a' is evaluated in training mode
}

// A zoo whose eval_all() switches every module it holds: a handle taken out
// of it earlier shares its module, so its mode is no longer the train() it
// had (unknown: silent).
class ModelZoo {
public:
  void add(const std::string &name, std::shared_ptr<torch::nn::Module> m) {
    models_[name] = std::move(m);
  }
  template <typename T> std::shared_ptr<T> get(const std::string &name) {
    return std::dynamic_pointer_cast<T>(models_.at(name));
  }
  void eval_all() {
    for (auto &kv : models_)
      kv.second->eval();
  }

private:
  std::map<std::string, std::shared_ptr<torch::nn::Module>> models_;
};

void score_after_zoo_eval(ModelZoo &zoo) {
  auto net = zoo.get<NetImpl>("cnn");
  net->train();
  net->forward(batch()).sum().backward();
  zoo.eval_all();
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

// Switching the modes of a container's heads forgets what other handles of
// the heads' class hold (one may share a head's module), not the mode of an
// encoder of another class.
struct HeadImpl : torch::nn::Module {
  HeadImpl() { drop = register_module("drop", torch::nn::Dropout(0.2)); }
  torch::Tensor forward(torch::Tensor x) { return drop(x); }
  torch::nn::Dropout drop{nullptr};
};
struct MultiTask {
  Net encoder;
  std::vector<std::shared_ptr<HeadImpl>> heads{std::make_shared<HeadImpl>()};
  void train_all() {
    encoder->train();
    for (auto &h : heads)
      h->train();
  }
};
double probe(MultiTask &m) {
  torch::NoGradGuard no_grad;
  return m.encoder->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'm.encoder' is evaluated in training mode
  // CHECK-MESSAGES: :[[@LINE+5]]:5: note: 'm.encoder' comes from the call of 'train_all()' here
  // CHECK-MESSAGES: :[[@LINE-10]]:14: note: 'm.encoder' is in training mode from here
}
void curriculum() {
  MultiTask m;
  m.train_all();
  probe(m);
}

// A range-for over a braced list of handles switches copies that share the
// listed modules: theirs follows.
double score(Net &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
}
void braced_list_switch() {
  Net champion, challenger;
  champion->train();
  for (auto net : {champion, challenger})
    net->eval();
  score(champion);
}
