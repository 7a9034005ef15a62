// RUN: %check_torch_tidy %s torch-device-mismatch %t

#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

// --- A helper that returns a tensor -----------------------------------------

torch::Tensor make_background() {
  return torch::zeros({3, 4});
}

void helper_returns_cpu_tensor() {
  auto background = make_background();
  auto frame = torch::randn({3, 4}).cuda();
  auto image = frame + background;
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: operator '+' combines 'frame' on CUDA with 'background' on CPU (from 'make_background()' at {{.*}}:15) [torch-device-mismatch]
  // CHECK-MESSAGES: :[[@LINE-3]]:37: note: 'frame' is on CUDA from here
  // CHECK-MESSAGES: :[[@LINE-5]]:21: note: 'background' comes from the call of 'make_background()' here
  // CHECK-MESSAGES: :15:10: note: 'background' is on CPU from here
}

torch::Tensor to_device(torch::Tensor t, torch::Device device) {
  return t.to(device);
}

void helper_moves_its_argument(torch::Device device) {
  Net net;
  net->to(device);
  auto x = to_device(torch::randn({2, 4}), device);
  net->forward(x);
  auto y = to_device(torch::randn({2, 4}), torch::kCPU);
  net->forward(y);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'y' on CPU (from 'to_device()' at {{.*}}:29); this crashes on a machine where 'device' is CUDA
  // CHECK-MESSAGES: :[[@LINE-3]]:12: note: 'y' comes from the call of 'to_device()' here
  // CHECK-MESSAGES: :29:12: note: 'y' is on CPU from here
}

Net make_model(torch::Device device) {
  Net model;
  model->to(device);
  return model;
}

void helper_returns_moved_module(torch::Device device) {
  auto model = make_model(device);
  model->forward(torch::randn({1, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'model' has its parameters on 'device' (from 'make_model()' at {{.*}}:46) but is called with 'torch::randn({1, 4})' on CPU
  // CHECK-MESSAGES: :[[@LINE-3]]:16: note: 'model' comes from the call of 'make_model()' here
  // CHECK-MESSAGES: :46:10: note: 'model' is on 'device' from here
}

// Two levels: the fact keeps its path.
torch::Tensor load_frame() { return make_background(); }

void two_levels_deep() {
  auto a = torch::ones({3, 4}, torch::kCUDA);
  auto b = load_frame();
  a * b;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '*' combines 'a' on CUDA with 'b' on CPU (from 'load_frame()' at {{.*}}:15)
  // CHECK-MESSAGES: :[[@LINE-3]]:12: note: 'b' comes from the call of 'load_frame()' here
  // CHECK-MESSAGES: :[[@LINE-8]]:37: note: 'b' comes from the call of 'make_background()' here
  // CHECK-MESSAGES: :15:10: note: 'b' is on CPU from here
}

// --- A helper that takes one --------------------------------------------------

torch::Tensor render(Net &model, const torch::Tensor &scene,
                     const torch::Tensor &background) {
  auto lit = model->forward(scene);
  return lit + background;
}

void helper_combines_its_parameters() {
  Net model;
  model->to(torch::kCUDA);
  auto scene = torch::randn({2, 4}).cuda();
  auto background = make_background();
  render(model, scene, background);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'render()' combines 'model' on CUDA with 'background' on CPU (from 'make_background()' at {{.*}}:15) in operator '+'
  // CHECK-MESSAGES: :[[@LINE-5]]:10: note: 'model' is on CUDA from here
  // CHECK-MESSAGES: :[[@LINE-4]]:21: note: 'background' comes from the call of 'make_background()' here
  // CHECK-MESSAGES: :15:10: note: 'background' is on CPU from here
  // CHECK-MESSAGES: :[[@LINE-13]]:14: note: operator '+' combines them here
  render(model, scene, background.cuda());
}

void module_parameter_input(Net &model, const torch::Tensor &x) {
  model->forward(x);
}

void helper_calls_its_module_parameter() {
  Net model;
  model->to(torch::kCUDA);
  module_parameter_input(model, torch::randn({1, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'module_parameter_input()' calls module 'model', on CUDA, with 'torch::randn({1, 4})' on CPU
  // CHECK-MESSAGES: :[[@LINE-8]]:10: note: the module is called here
}

// The requirement crosses two calls.
void outer_helper(Net &model, const torch::Tensor &x) {
  module_parameter_input(model, x);
}

void requirement_through_two_calls() {
  Net model;
  model->to(torch::kCUDA);
  auto x = torch::randn({1, 4});
  outer_helper(model, x);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'outer_helper()' calls module 'model', on CUDA, with 'x' on CPU
  // CHECK-MESSAGES: :[[@LINE-9]]:3: note: which calls 'module_parameter_input()' here
  // CHECK-MESSAGES: :[[@LINE-23]]:10: note: the module is called here
}

// --- Effects of a helper ------------------------------------------------------

void move_to_gpu(Net &net) { net->to(torch::kCUDA); }

void helper_moves_the_module() {
  Net net;
  move_to_gpu(net);
  net->forward(torch::randn({1, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on CUDA (from 'move_to_gpu()' at {{.*}}:[[@LINE-6]]) but is called with 'torch::randn({1, 4})' on CPU
  // CHECK-MESSAGES: :[[@LINE-3]]:3: note: 'net' comes from the call of 'move_to_gpu()' here
  // CHECK-MESSAGES: :[[@LINE-8]]:35: note: 'net' is on CUDA from here
}

void move_holder_by_value(Net net) { net->to(torch::kCUDA); }

void a_holder_by_value_shares_its_module() {
  Net net;
  move_holder_by_value(net);
  net->forward(torch::randn({1, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on CUDA (from 'move_holder_by_value()' at {{.*}}:[[@LINE-6]])
}

// --- Class state -----------------------------------------------------------

class Trainer {
public:
  Trainer() : device_(torch::kCUDA) { model_->to(device_); }
  void fit_epoch() {
    auto loader = torch::data::make_data_loader(
        torch::data::datasets::MNIST("data").map(
            torch::data::transforms::Stack<>()),
        64);
    for (auto &batch : *loader) {
      auto output = model_->forward(batch.data);
      // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: module 'model_' has its parameters on CUDA but is called with 'batch.data' on CPU
      // CHECK-MESSAGES: :[[@LINE-9]]:47: note: 'model_' is on CUDA from here
      // CHECK-MESSAGES: :[[@LINE-4]]:16: note: 'batch.data' is on CPU from here
    }
  }
  torch::Tensor predict(const torch::Tensor &x) { return model_->forward(x); }

private:
  Net model_;
  torch::Device device_;
};

class Camera {
public:
  Camera() : image_(torch::zeros({3, 4})) {}
  const torch::Tensor &image() const { return image_; }

private:
  torch::Tensor image_;
};

void getter_over_a_member(Camera &camera) {
  auto gpu = torch::randn({3, 4}, torch::kCUDA);
  gpu - camera.image();
  // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: operator '-' combines 'gpu' on CUDA with 'camera.image()' on CPU (from 'image()' at {{.*}}:[[@LINE-10]])
  // CHECK-MESSAGES: :[[@LINE-2]]:16: note: 'camera.image()' comes from the call of 'image()' here
  // CHECK-MESSAGES: :[[@LINE-12]]:21: note: 'camera.image()' is on CPU from here
}

// --- Templates ---------------------------------------------------------------

template <typename DataLoader>
void train(Net &model, DataLoader &loader, torch::Device device) {
  model->to(device);
  for (auto &batch : loader) {
    auto output = model->forward(batch.data);
    // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: module 'model' has its parameters on 'device' but is called with 'batch.data' on CPU; this crashes on a machine where 'device' is CUDA
  }
}

void run_training(torch::Device device) {
  Net model;
  auto mnist = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(
          torch::data::transforms::Stack<>()),
      64);
  auto other = torch::data::make_data_loader(
      torch::data::datasets::MNIST("test").map(
          torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(32));
  train(model, *mnist, device);
  train(model, *other, device);
}

// --- Negatives ----------------------------------------------------------------

torch::Tensor recursive(int n) {
  if (n == 0)
    return torch::zeros({4});
  return recursive(n - 1);
}

void recursion_is_unknown() {
  auto a = torch::ones({4}).cuda();
  a + recursive(3);
}

// A virtual call that may run either of two definitions: unknown.
struct Source {
  virtual torch::Tensor get() { return torch::zeros({4}); }
};
struct GpuSource : Source {
  torch::Tensor get() override { return torch::zeros({4}).cuda(); }
};

void virtual_calls_are_unknown(Source &source) {
  auto a = torch::ones({4}).cuda();
  a + source.get();
}

void function_pointers_are_unknown(torch::Tensor (*get)()) {
  auto a = torch::ones({4}).cuda();
  a + get();
}

torch::Tensor either(bool gpu) {
  if (gpu)
    return torch::zeros({4}).cuda();
  return torch::zeros({4});
}

void merged_returns_are_unknown(bool gpu) {
  auto a = torch::ones({4}).cuda();
  a + either(gpu);
}

void same_device_arguments_are_fine() {
  Net model;
  model->to(torch::kCUDA);
  auto scene = torch::randn({2, 4}).cuda();
  render(model, scene, scene);
}

torch::Tensor declared_only();

void declared_only_is_unknown() {
  auto a = torch::ones({4}).cuda();
  a + declared_only();
}

class Reassigned {
public:
  Reassigned() : x_(torch::zeros({4})) {}
  void upload() { x_ = x_.cuda(); }
  void use() {
    auto gpu = torch::ones({4}).cuda();
    gpu + x_;
  }

private:
  torch::Tensor x_;
};

struct PublicMember {
  PublicMember() : x(torch::zeros({4})) {}
  void use() {
    auto gpu = torch::ones({4}).cuda();
    gpu + x;
  }
  torch::Tensor x;
};

void writes_the_public_member(PublicMember &p) { p.x = p.x.cuda(); }

class ConstructedElsewhere {
public:
  ConstructedElsewhere();
  void use() {
    auto gpu = torch::ones({4}).cuda();
    gpu + x_;
  }

private:
  torch::Tensor x_;
};

// A trainer keeps the handle it is given and moves the module later: the
// caller's handle shares the module, so its device is no longer known.
class KeepingTrainer {
public:
  KeepingTrainer(Net net, torch::Device device) : net_(net), device_(device) {}
  void fit() { net_->to(device_); }

private:
  Net net_;
  torch::Device device_;
};

void handle_kept_by_a_trainer(torch::Device device) {
  Net net;
  KeepingTrainer trainer(net, device);
  trainer.fit();
  net->forward(torch::randn({2, 4}).to(device));
}

// The trainer's member names the caller's module: fit() moved `net` too.
void handle_kept_and_moved_by_a_trainer(torch::Device device) {
  Net net;
  KeepingTrainer trainer(net, device);
  trainer.fit();
  net->forward(torch::randn({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' (from 'KeepingTrainer' at {{.*}}) but is called with 'torch::randn({2, 4})' on CPU; this crashes on a machine where 'device' is CUDA
  // CHECK-MESSAGES: :[[@LINE-4]]:18: note: 'net' comes from the call of 'KeepingTrainer' here
  // CHECK-MESSAGES: :[[@LINE-3]]:16: note: 'torch::randn({2, 4})' is on CPU from here
}

// A forward that moves its input returns where it moved it, not on the
// module's or the input's device: the sharded model's output is on
// 'placement.dense', as the labels are.
struct Placement {
  torch::Device embedding;
  torch::Device dense;
};
struct ShardedImpl : torch::nn::Module {
  explicit ShardedImpl(Placement placement)
      : placement_(placement),
        table(register_module("table", torch::nn::Linear(4, 4))),
        head(register_module("head", torch::nn::Linear(4, 1))) {
    table->to(placement_.embedding);
    head->to(placement_.dense);
  }
  torch::Tensor forward(torch::Tensor ids) {
    auto emb = table(ids.to(placement_.embedding));
    return head(emb.to(placement_.dense));
  }
  Placement placement_;
  torch::nn::Linear table{nullptr}, head{nullptr};
};
TORCH_MODULE(Sharded);

void forward_that_moves_its_input() {
  Placement placement{torch::Device(torch::kCUDA, 1), torch::Device(torch::kCUDA, 0)};
  Sharded model(placement);
  auto ids = torch::randn({8, 4});
  auto labels = torch::rand({8, 1}, placement.dense);
  auto loss = torch::mse_loss(model->forward(ids), labels);
  loss.backward();
}

// A clone through std::dynamic_pointer_cast is on its original's device; a
// helper that copies weights into it by reference does not move it.
struct EmaNetImpl : torch::nn::Cloneable<EmaNetImpl> {
  EmaNetImpl() { reset(); }
  void reset() override { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(EmaNet);

void copy_weights(EmaNetImpl &dst, EmaNetImpl &src) {
  torch::NoGradGuard no_grad;
  auto to = dst.parameters();
  auto from = src.parameters();
  for (size_t i = 0; i < to.size(); ++i)
    to[i].copy_(from[i]);
}

void ema_copy_of_a_placed_model(torch::Device device) {
  EmaNet model;
  model->to(device);
  auto ema = std::dynamic_pointer_cast<EmaNetImpl>(model->clone());
  copy_weights(*ema, *model);
  auto probe = torch::randn({4, 4});
  ema->forward(probe.to(device));
  ema->forward(probe);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'ema' has its parameters on 'device' but is called with 'probe' on CPU; {{.*}}[torch-device-mismatch]
}

#include <tuple>
#include <vector>

// A range-for that moves every element leaves them all moved; one that may
// stop early (a break) leaves them unknown.
struct ClientImpl : torch::nn::Module {
  ClientImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Client);

void every_client_moved(torch::Device device) {
  std::vector<Client> clients;
  for (int k = 0; k < 3; ++k)
    clients.push_back(Client());
  for (auto &c : clients)
    c->to(device);
  auto holdout = torch::randn({2, 4});
  for (auto &c : clients)
    c->forward(holdout);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'c' has its parameters on 'device' but is called with 'holdout' on CPU; {{.*}}[torch-device-mismatch]
  std::vector<torch::Tensor> batches;
  for (int k = 0; k < 3; ++k)
    batches.push_back(torch::randn({2, 4}));
  for (auto &b : batches)
    b = b.to(device);
  for (const auto &b : batches)
    auto shifted = b + holdout;
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: operator '+' combines 'b' on 'device' with 'holdout' on CPU; {{.*}}[torch-device-mismatch]
}

void some_clients_moved(torch::Device device, int budget) {
  std::vector<Client> clients;
  clients.push_back(Client());
  for (auto &c : clients) {
    if (budget-- == 0)
      break;
    c->to(device);
  }
  for (auto &c : clients)
    c->forward(torch::randn({2, 4}));
}

// A forward that returns a tuple: each part is on the module's device.
struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl() : fc(register_module("fc", torch::nn::Linear(4, 4))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    return {fc(x), fc(x)};
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(TwoHeads);

class Decoder {
public:
  explicit Decoder(torch::Device device) : device_(device) {
    heads_->to(device_);
    for (int l = 0; l < 3; ++l)
      anchors_.push_back(torch::rand({4, 4}));
  }
  torch::Tensor decode(const torch::Tensor &features, size_t level) {
    auto [deltas, scores] = heads_->forward(features);
    return deltas + anchors_[level];
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: operator '+' combines 'deltas' on 'device'{{.*}} with 'anchors_[level]' on CPU{{.*}}[torch-device-mismatch]
  }

private:
  torch::Device device_;
  TwoHeads heads_;
  std::vector<torch::Tensor> anchors_;
};

torch::Tensor decode_level(torch::Device device) {
  Decoder d(device);
  return d.decode(torch::randn({2, 4}, device), 0);
}

// torch::load with a device places the module.
struct LoadedImpl : torch::nn::Module {
  LoadedImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Loaded);

void load_then_run(const std::string &path, torch::Device device) {
  Loaded model;
  torch::load(model, path, device);
  model->forward(torch::randn({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'model' has its parameters on 'device' {{.*}}but is called with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
  model->forward(torch::randn({2, 4}, device));
}

// The same through a shared_ptr that a loader returns.
std::shared_ptr<LoadedImpl> load_shared(const std::string &path,
                                        torch::Device device) {
  auto model = std::make_shared<LoadedImpl>();
  torch::load(model, path, device);
  return model;
}

void run_shared(const std::string &path, torch::Device device) {
  auto model = load_shared(path, device);
  model->forward(torch::randn({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'model' has its parameters on 'device' {{.*}}but is called with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
  model->forward(torch::randn({2, 4}, device));
}

// A module built from its options (`Sized(8)`) is a new module on the CPU,
// not a conversion of its argument.
struct SizedImpl : torch::nn::Module {
  explicit SizedImpl(int64_t width)
      : fc(register_module("fc", torch::nn::Linear(width, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Sized);

void sized_members_moved(torch::Device device) {
  std::vector<Sized> members;
  members.push_back(Sized(8));
  for (auto &m : members)
    m->to(device);
  auto x = torch::randn({2, 8});
  for (auto &m : members)
    m->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'm' has its parameters on 'device' but is called with 'x' on CPU; {{.*}}[torch-device-mismatch]
  Sized host_only(8);
  host_only->forward(x);
}

#include <array>

// A std::array walks its elements through a pointer: a range-for over it
// reads them, and a range-for that writes them moves them.
struct RotationBank {
  std::array<torch::Tensor, 2> rot;
  RotationBank() {
    rot[0] = torch::eye(3);
    rot[1] = torch::eye(3);
  }
  void to(torch::Device d) {
    for (auto &r : rot)
      r = r.to(d);
  }
};

void rotate_all(torch::Device device) {
  auto points = torch::randn({4, 3}, device);
  RotationBank bank;
  for (const auto &r : bank.rot)
    auto y = torch::matmul(points, r);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: 'at::matmul' combines 'points' on 'device' with 'r' on CPU{{.*}}[torch-device-mismatch]
}

void rotate_moved(torch::Device device) {
  auto points = torch::randn({4, 3}, device);
  RotationBank bank;
  bank.to(device);
  auto y = torch::matmul(points, bank.rot[0]);
}

// A struct handed by reference: its fields keep their facts, call by call.
struct Collocation {
  torch::Tensor x, u;
};

torch::Tensor boundary_loss(Net &model, const Collocation &points) {
  return torch::mse_loss(model->forward(points.x), points.u);
}

void fit_boundary(torch::Device device) {
  Net model;
  model->to(device);
  Collocation points{torch::randn({2, 4}, device), torch::randn({2, 4})};
  boundary_loss(model, points);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'boundary_loss()' combines 'model' on 'device' with 'points.u' on CPU in 'at::mse_loss'{{.*}}[torch-device-mismatch]
  Collocation placed{torch::randn({2, 4}, device), torch::randn({2, 4}, device)};
  boundary_loss(model, placed);
}

// An optional mask in a record a helper returns: the value it holds keeps
// its facts through `*o`, `o->` and `o.value()`.
#include <optional>

struct Window {
  torch::Tensor signal;
  std::optional<torch::Tensor> mask;
};

Window read_window(bool masked) {
  Window w{torch::randn({4, 3}), std::nullopt};
  if (masked)
    w.mask = torch::ones({4, 3});
  return w;
}

void apply_mask(torch::Device device) {
  Window w = read_window(true);
  auto signal = w.signal.to(device);
  if (w.mask)
    signal = signal * *w.mask;
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: operator '*' combines 'signal' on 'device' with '*w.mask' on CPU (from 'read_window()' {{.*}}[torch-device-mismatch]
}

void apply_moved_mask(torch::Device device) {
  Window w = read_window(true);
  auto signal = w.signal.to(device);
  std::optional<torch::Tensor> mask;
  if (w.mask)
    mask = w.mask->to(device);
  if (mask)
    signal = signal * mask.value();
}

// Stage functors composed by a factory that takes them by value: the
// composed object keeps each stage's members.
struct Standardize {
  torch::Tensor mean;
  torch::Tensor operator()(const torch::Tensor &x) const { return x - mean; }
  // CHECK-MESSAGES: :[[@LINE-1]]:69: warning: operator '-' combines 'x' on 'device' with 'mean' on CPU{{.*}}[torch-device-mismatch]
};
struct Identity {
  torch::Tensor operator()(const torch::Tensor &x) const { return x; }
};
template <typename First, typename Second> struct Composed {
  First first;
  Second second;
  torch::Tensor operator()(const torch::Tensor &x) const { return second(first(x)); }
};
template <typename First, typename Second>
Composed<First, Second> compose(First first, Second second) {
  return Composed<First, Second>{first, second};
}

void preprocess_on_device(torch::Device device) {
  Standardize standardize{torch::randn({3})};
  auto pipeline = compose(standardize, Identity{});
  auto features = pipeline(torch::randn({4, 3}).to(device));
}

// The same stages with the statistics moved along: silent.
struct StandardizeMoved {
  torch::Tensor mean;
  torch::Tensor operator()(const torch::Tensor &x) const { return x - mean; }
};

void preprocess_moved(torch::Device device) {
  StandardizeMoved standardize{torch::randn({3}).to(device)};
  auto pipeline = compose(standardize, Identity{});
  auto features = pipeline(torch::randn({4, 3}).to(device));
}

// A setter that stores a record it is given: the member keeps the record's
// fields.
struct NormStats {
  torch::Tensor mean, scale;
};
class Normalizer {
public:
  void set_stats(NormStats s) { stats_ = s; }
  torch::Tensor apply(const torch::Tensor &x) { return (x - stats_.mean) * stats_.scale; }
  // CHECK-MESSAGES: :[[@LINE-1]]:59: warning: operator '-' combines 'x' on 'device' with 'stats_.mean' on CPU{{.*}}[torch-device-mismatch]

private:
  NormStats stats_;
};

void normalise_on_device(torch::Device device) {
  Normalizer n;
  n.set_stats(NormStats{torch::randn({3}), torch::ones({3})});
  auto y = n.apply(torch::randn({4, 3}).to(device));
}

class PlacedNormalizer {
public:
  void set_stats(NormStats s) { stats_ = s; }
  torch::Tensor apply(const torch::Tensor &x) { return (x - stats_.mean) * stats_.scale; }

private:
  NormStats stats_;
};

void normalise_placed(torch::Device device) {
  PlacedNormalizer n;
  n.set_stats(NormStats{torch::randn({3}, device), torch::ones({3}, device)});
  auto y = n.apply(torch::randn({4, 3}).to(device));
}

// A record default-constructed, then filled on some paths: its members
// start empty, so a mask set on one path is what the other paths hold too.
struct Frame {
  torch::Tensor pixels;
  std::optional<torch::Tensor> mask;
};

Frame read_frame(bool masked) {
  Frame f;
  f.pixels = torch::randn({4, 3});
  if (masked)
    f.mask = torch::rand({4, 3}) > 0.5;
  return f;
}

void mask_frame(torch::Device device, bool masked) {
  Frame f = read_frame(masked);
  auto pixels = f.pixels.to(device);
  if (f.mask)
    pixels = pixels * *f.mask;
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: operator '*' combines 'pixels' on 'device' with '*f.mask' on CPU (from 'read_frame()' {{.*}}[torch-device-mismatch]
}

// torch::load without a device gives each parameter the device it was saved
// from: the module's device is unknown, not the CPU it was built on.
void load_saved_then_run(const std::string &path, torch::Device device) {
  Loaded model;
  torch::load(model, path);
  model->forward(torch::randn({2, 4}, device));
  Loaded built;
  built->forward(torch::randn({2, 4}, device));
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'built' has its parameters on CPU {{.*}}[torch-device-mismatch]
}

// A getter that returns a member container by reference names the member:
// its elements' fields are what the constructor put there.
struct TokenBatch {
  torch::Tensor inputs;
  torch::Tensor targets;
};
class BatchStore {
public:
  BatchStore() { batches_.push_back({torch::randn({2, 4}), torch::randn({2, 2})}); }
  const std::vector<TokenBatch> &batches() const { return batches_; }
  std::vector<TokenBatch> &mutable_batches() { return batches_; }

private:
  std::vector<TokenBatch> batches_;
};
void train_from_store(torch::Device device) {
  Loaded model;
  model->to(device);
  BatchStore store;
  model->forward(store.batches()[0].inputs);
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'model' has its parameters on 'device' but is called with 'store.batches()[0].inputs' on CPU (from 'BatchStore' {{.*}}[torch-device-mismatch]
  for (auto &b : store.mutable_batches())
    b.inputs = b.inputs.to(device);
  model->forward(store.batches()[0].inputs);
}

// A holder built from a module that exists (a typed clone) holds that
// module: a clone keeps the device of what it copies.
void keep_best(torch::Device device) {
  Loaded net;
  net->to(device);
  Loaded best = std::dynamic_pointer_cast<LoadedImpl>(net->clone());
  best->forward(torch::randn({2, 4}, device));
  Loaded fresh;
  fresh->forward(torch::randn({2, 4}, device));
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'fresh' has its parameters on CPU {{.*}}[torch-device-mismatch]
}

// A scorer called through its base: the override meets what the call hands
// it, on the device the caller put it.
struct Scorer {
  virtual ~Scorer() = default;
  virtual torch::Tensor score(const torch::Tensor &features) = 0;
};
struct BiasedScorer final : Scorer {
  torch::Tensor score(const torch::Tensor &features) override {
    return features + bias_;
  }
  torch::Tensor bias_ = torch::zeros({4});
};
void rank_all(Scorer &scorer, torch::Device device) {
  for (int i = 0; i < 10; ++i)
    scorer.score(torch::randn({2, 4}, device));
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'score()' combines 'torch::randn({2, 4}, device)' on CUDA with 'bias_' on CPU {{.*}}[torch-device-mismatch]
}
void rank_on_gpu(BiasedScorer &scorer) {
  rank_all(scorer, torch::Device(torch::kCUDA));
}

// The same override, called through a base only with CPU features: silent.
struct Ranker {
  virtual ~Ranker() = default;
  virtual torch::Tensor rank(const torch::Tensor &features) = 0;
};
struct BiasedRanker final : Ranker {
  torch::Tensor rank(const torch::Tensor &features) override {
    return features + bias_;
  }
  torch::Tensor bias_ = torch::zeros({4});
};
void rank_on_cpu(Ranker &ranker) {
  for (int i = 0; i < 10; ++i)
    ranker.rank(torch::randn({2, 4}));
}

// A device member chosen on both branches of an initialiser method, and the
// module moved to it: after the call, the module is on what the member
// holds, not on what the member held before (here CUDA: the constant the
// call passes picks the branch).
class Detector {
public:
  void initialize(int gpu_id) {
    if (gpu_id >= 0)
      device_ = torch::Device(torch::kCUDA);
    else
      device_ = torch::Device(torch::kCPU);
    net_->to(device_);
  }
  void run() {
    torch::NoGradGuard no_grad;
    net_->forward(torch::randn({2, 4}).to(device_));
  }
  void run_on_host_input() {
    torch::NoGradGuard no_grad;
    net_->forward(torch::randn({2, 4}));
    // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: module 'net_' has its parameters on CUDA (from 'initialize()' {{.*}}) but is called with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
  }

private:
  torch::Device device_ = torch::Device(torch::kCPU);
  Net net_;
};
void detect() {
  Detector d;
  d.initialize(0);
  d.run();
  d.run_on_host_input();
}

#include <array>
#include <map>
#include <memory>
#include <string>
#include <variant>

// --- A state object passed by pointer ------------------------------------
// A pointer parameter that the function never reseats names one object,
// like a reference: what init_state() does through it is the caller's, and
// switching the module's mode in place keeps its device.
struct TrainState {
  Net net;
  torch::Device device = torch::kCPU;
  int64_t step = 0;
};
void init_state(TrainState *s, torch::Device device) {
  s->device = device;
  s->net->to(device);
}
void train_state(TrainState *s) {
  s->net->train();
  for (; s->step < 10; ++s->step)
    s->net->forward(torch::randn({8, 4}).to(s->device)).sum().backward();
}
void evaluate_state(TrainState *s) {
  torch::NoGradGuard no_grad;
  s->net->eval();
  s->net->forward(torch::randn({8, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: module 's->net' has its parameters on 'device' (from 'init_state()' {{.*}}) but is called with 'torch::randn({8, 4})' on CPU{{.*}}[torch-device-mismatch]
}
void run_state() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TrainState state;
  init_state(&state, device);
  train_state(&state);
  evaluate_state(&state);
}
// Near-miss: a pointer the function reseats points to more than one object.
void evaluate_either(TrainState *a, TrainState *b, bool second) {
  torch::NoGradGuard no_grad;
  TrainState *s = a;
  if (second)
    s = b;
  s->net->forward(torch::randn({8, 4}));
}
void run_either() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TrainState on_device, on_host;
  init_state(&on_device, device);
  evaluate_either(&on_host, &on_device, false);
}

// --- A module member of a base class -------------------------------------
// The base constructor, run from the derived one's initialiser list, moves
// the module: the derived class's methods see it on the device.
struct HeadBase {
  explicit HeadBase(torch::Device d) : fc_(4, 3) { fc_->to(d); }
  torch::nn::Linear fc_;
};
struct ScoreHead : HeadBase {
  explicit ScoreHead(torch::Device d) : HeadBase(d) {}
  torch::Tensor score() {
    return fc_->forward(torch::randn({2, 4}));
    // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: module 'fc_' has its parameters on 'device' (from 'ScoreHead' {{.*}}) but is called with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
  }
  torch::Tensor score_on(torch::Tensor x) { return fc_->forward(x.to(fc_->weight.device())); }
};
void run_heads() {
  torch::NoGradGuard no_grad;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  ScoreHead head(device);
  head.score();
  head.score_on(torch::randn({2, 4}));
}

// --- Owning pointers, variants, maps, arrays ------------------------------
struct Graph {
  torch::Tensor features, adj;
};
void run_holders() {
  torch::NoGradGuard no_grad;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::nn::Linear net(4, 4);
  net->to(device);
  auto g = std::make_unique<Graph>();
  g->features = torch::randn({8, 4}).to(device);
  g->adj = torch::randn({8, 4});
  net->forward(g->features);
  net->forward(g->adj);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'g->adj' on CPU{{.*}}[torch-device-mismatch]
  auto held = std::make_shared<torch::Tensor>(torch::randn({2, 4}));
  net->forward(*held);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with '*held' on CPU{{.*}}[torch-device-mismatch]
  // Near-miss: a shared pointer that is copied may have its object changed
  // through the copy.
  auto shared = std::make_shared<torch::Tensor>(torch::randn({2, 4}));
  auto alias = shared;
  *alias = alias->to(device);
  net->forward(*shared);
  std::map<int, torch::Tensor> by_id;
  by_id.emplace(0, torch::randn({2, 4}));
  net->forward(by_id.at(0));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'by_id.at(0)' on CPU{{.*}}[torch-device-mismatch]
  std::map<std::string, torch::Tensor> named{{"a", torch::randn({2, 4}).to(device)}};
  net->forward(named.at("a"));
  std::variant<double, torch::Tensor> temperature = torch::randn({2, 4});
  net->forward(std::get<torch::Tensor>(temperature));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'std::get<torch::Tensor>(temperature)' on CPU{{.*}}[torch-device-mismatch]
  std::array<torch::Tensor, 2> pair{torch::randn({2, 4}), torch::randn({2, 4})};
  net->forward(std::get<1>(pair));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'std::get<1>(pair)' on CPU{{.*}}[torch-device-mismatch]
  std::vector<torch::Tensor> rows(3, torch::randn({2, 4}));
  net->forward(torch::cat(rows, 0));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'torch::cat(rows, 0)' on CPU{{.*}}[torch-device-mismatch]
}

// A container filled in one loop and copied into another in a second loop:
// the copy holds what the first holds, once the first loop has settled.
// An element-wise function keeps its operand's shape: not a 0-dim tensor.
void run_copied_windows() {
  torch::NoGradGuard no_grad;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::nn::Linear net(4, 4);
  net->to(device);
  std::vector<torch::Tensor> source;
  for (int i = 0; i < 8; ++i)
    source.push_back(torch::randn({4}));
  std::vector<torch::Tensor> copied;
  for (int i = 0; i < 8; ++i)
    copied.push_back(source[i]);
  net->forward(copied[0]);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'copied[0]' on CPU{{.*}}[torch-device-mismatch]
  auto prior = torch::log(torch::full({1, 4}, 0.25));
  auto logits = net->forward(torch::randn({2, 4}).to(device)) + prior;
  // CHECK-MESSAGES: :[[@LINE-1]]:63: warning: operator '+' combines {{.*}} on 'device' with 'prior' on CPU{{.*}}[torch-device-mismatch]
}

// A tensor passed for a c10::optional<Tensor> parameter (stft's window) is
// an operand; the result of the failing op is on no device to report again.
void run_spectrogram() {
  torch::NoGradGuard no_grad;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::nn::Linear net(4, 4);
  net->to(device);
  auto wave = torch::randn({4, 256});
  auto window = torch::ones({64}).to(device);
  auto spec = torch::stft(wave, 64, 16, 64, window, false);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: 'at::stft' combines 'wave' on CPU with 'window' on 'device'{{.*}}[torch-device-mismatch]
  net->forward(spec);
}

// A part of a forward's temporary result is what that part of its summary
// holds: `.first` of a pair.
struct PairHeadsImpl : torch::nn::Module {
  PairHeadsImpl() : a(register_module("a", torch::nn::Linear(4, 4))), b(register_module("b", torch::nn::Linear(4, 4))) {}
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &x) { return {a(x), b(x)}; }
  torch::nn::Linear a, b;
};
TORCH_MODULE(PairHeads);
void run_heads_temporary() {
  torch::NoGradGuard no_grad;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  PairHeads heads;
  heads->to(device);
  auto logits = heads->forward(torch::randn({2, 4}).to(device)).first + torch::randn({2, 4});
  // CHECK-MESSAGES: :[[@LINE-1]]:71: warning: operator '+' combines {{.*}} on 'device' with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
}

// A built-in array of tensors is a container: its elements, and a vector
// built from a range of it, named or temporary.
void run_from_array() {
  torch::NoGradGuard no_grad;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::nn::Linear net(4, 4);
  net->to(device);
  torch::Tensor frames[2] = {torch::randn({2, 4}), torch::randn({2, 4})};
  net->forward(frames[1]);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'frames[1]' on CPU{{.*}}[torch-device-mismatch]
  std::vector<torch::Tensor> batch(frames, frames + 2);
  net->forward(batch[0]);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'batch[0]' on CPU{{.*}}[torch-device-mismatch]
  net->forward(torch::cat(std::vector<torch::Tensor>(frames, frames + 2)));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with {{.*}} on CPU{{.*}}[torch-device-mismatch]
}

// An object an owning pointer is given (`std::make_unique<T>(args)`,
// `reset(new T(args))`) is built by T's constructor with those arguments.
class Sampler {
public:
  explicit Sampler(torch::Device device) : device_(device) {}
  torch::Tensor draw() { return torch::ones({4}, torch::TensorOptions().device(device_)); }
private:
  torch::Device device_;
};
void owned_sampler_on_cpu() {
  auto s = std::make_unique<Sampler>(torch::kCPU);
  auto acc = torch::zeros({4});
  auto r = acc + s->draw(); // near-miss: both on the CPU
}
void owned_sampler_on_cuda() {
  auto s = std::make_shared<Sampler>(torch::Device(torch::kCUDA));
  auto acc = torch::zeros({4});
  auto r = acc + s->draw();
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: operator '+' combines 'acc' on CPU with 's->draw()' on CUDA{{.*}}[torch-device-mismatch]
}
struct Simulation {
  std::unique_ptr<Sampler> owned_;
  Simulation() { owned_.reset(new Sampler(torch::kCPU)); }
  torch::Tensor run() {
    auto acc = torch::zeros({4});
    return acc + owned_->draw(); // near-miss: the constructor's CPU sampler
  }
};
void simulate() { Simulation().run(); }

// A module method other than forward runs a submodule on its argument.
// Where the callers do not agree (forward passes its own input), each call
// judges it with the module it runs on: reported at the call.
struct DecoderNetImpl : torch::nn::Module {
  DecoderNetImpl() : dec(register_module("dec", torch::nn::Linear(4, 4))) {}
  torch::Tensor decode(const torch::Tensor &z) { return torch::relu(dec->forward(z)); }
  torch::Tensor forward(const torch::Tensor &x) { return decode(x); }
  torch::nn::Linear dec;
};
TORCH_MODULE(DecoderNet);
class ProbeWriter {
public:
  void write(DecoderNet &net) {
    if (!probe_)
      probe_ = torch::randn({8, 4});
    auto images = net->decode(*probe_);
  }
private:
  std::optional<torch::Tensor> probe_;
};
void sample_probes(torch::Device device) {
  DecoderNet net;
  net->to(device);
  auto direct = net->decode(torch::randn({8, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: 'decode()' calls module 'dec', on 'device', with 'torch::randn({8, 4})' on CPU{{.*}}[torch-device-mismatch]
  ProbeWriter writer;
  writer.write(net);
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: 'write()' calls module 'dec', on 'device', with '*probe_' on CPU{{.*}}[torch-device-mismatch]
  DecoderNet host;
  writer.write(host); // near-miss: this module stays on the CPU
}

// A helper that combines two of its parameters, given two CPU tensors that
// may be 0-dim (reductions): its result is computed on the CPU.
torch::Tensor combine_stats(const torch::Tensor &a, const torch::Tensor &b) {
  return torch::matmul(a, b);
}
void reduced_stats_meet_cuda() {
  auto x = torch::randn({3, 3});
  auto s = x.sum(0);
  auto c = combine_stats(s, s.sum());
  auto m = torch::mm(c, torch::ones({4, 2}).cuda());
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::mm' combines 'c' on CPU {{.*}}with 'torch::ones({4, 2}).cuda()' on CUDA [torch-device-mismatch]
}

// An object chosen by a ternary has each arm's parts, joined: an empty
// placeholder and a helper's host sample leave the host sample's fields.
struct HostSample {
  torch::Tensor x;
};
HostSample draw_sample() { return {torch::randn({2, 4})}; }
void ternary_struct_elements(bool skip) {
  std::vector<HostSample> samples;
  samples.push_back(skip ? HostSample{} : draw_sample());
  auto m = torch::mm(samples[0].x, torch::ones({4, 2}).cuda());
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::mm' combines 'samples[0].x' on CPU {{.*}}with 'torch::ones({4, 2}).cuda()' on CUDA [torch-device-mismatch]
}

// Who is to blame. A helper that moves one value to a device it holds and
// meets it with a value its callers handed over untouched is the statement
// to fix: reported there when every caller proves it, and at the call that
// proves it when the callers disagree. Two untouched values are the
// callers' to match: reported at each call.
struct LabelledBatch {
  torch::Tensor x, y;
};
LabelledBatch host_batch() { return {torch::randn({2, 4}), torch::zeros({2})}; }
int64_t count_correct(const LabelledBatch &batch, torch::Device device) {
  auto predicted = batch.x.to(device).argmax(1);
  return (predicted == batch.y).sum().item<int64_t>();
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: operator '==' combines 'predicted' on 'device' with 'batch.y' on CPU (from 'host_batch()' at {{.*}}); this crashes on a machine where 'device' is CUDA [torch-device-mismatch]
}
void validate_all(torch::Device device) {
  for (int i = 0; i < 3; ++i)
    count_correct(host_batch(), device);
}
int64_t count_correct_either(const LabelledBatch &batch, torch::Device device) {
  auto predicted = batch.x.to(device).argmax(1);
  return (predicted == batch.y).sum().item<int64_t>();
}
void validate_moved_and_not(torch::Device device) {
  auto batch = host_batch();
  count_correct_either({batch.x, batch.y.to(device)}, device);
  count_correct_either(batch, device);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'count_correct_either()' combines 'predicted' on 'device' {{.*}}with 'batch.y' on CPU {{.*}}[torch-device-mismatch]
}
torch::Tensor add_features(const torch::Tensor &a, const torch::Tensor &b) {
  return a + b;
}
void add_mixed(torch::Device device) {
  add_features(torch::randn({4}, device), torch::randn({4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'add_features()' combines {{.*}}[torch-device-mismatch]
}

// A module handed to a constructor. An object that keeps it (`net_(net)`)
// shares the module and may move it later: the caller's handle becomes
// unknown. One that only reads it, with no member that could share a
// module, leaves the caller's facts as they were.
struct KeepsNet {
  explicit KeepsNet(const Net &net) : net_(net) {}
  void to_host() { net_->to(torch::kCPU); }
  Net net_;
};
struct CountsParameters {
  explicit CountsParameters(const Net &net) : count_(net->parameters().size()) {}
  size_t count_;
};
void constructor_keeps_module() {
  Net net;
  net->to(torch::kCUDA);
  KeepsNet keeper(net);
  keeper.to_host();
  net->forward(torch::randn({2, 4})); // near-miss: the keeper moved it back
}
void constructor_reads_module() {
  Net net;
  net->to(torch::kCUDA);
  CountsParameters counter(net);
  net->forward(torch::randn({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on CUDA but is called with 'torch::randn({2, 4})' on CPU [torch-device-mismatch]
}

// A lambda inside a lambda: the inner one's captures are the outer one's,
// which are the function's.
void nested_lambda_captures(torch::Device device) {
  auto frames = torch::rand({4, 8}).to(device);
  auto target = torch::rand({4, 8});
  auto on_device = torch::rand({4, 8}).to(device);
  auto score = [&](int a) {
    auto middle = [&] { return torch::mse_loss(frames, target); };
    // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: 'at::mse_loss' combines 'frames' on 'device' with 'target' on CPU
    auto same = [&] { return torch::mse_loss(frames, on_device); };
    return middle() + same() * a;
  };
  score(1);
}

// A module held by std::shared_ptr and handed to the program's own helpers:
// each helper's summary says what it does to it, as for a module holder.
struct SharedNetImpl : torch::nn::Module {
  SharedNetImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
float shared_score(const std::shared_ptr<SharedNetImpl> &net, torch::Tensor x) {
  return net->forward(x).sum().item<float>();
}
void shared_back_to_cpu(const std::shared_ptr<SharedNetImpl> &net) {
  net->to(torch::kCPU);
}
void shared_handle_through_helpers(torch::Device device) {
  auto net = std::make_shared<SharedNetImpl>();
  net->to(device);
  shared_score(net, torch::ones({2, 4}).to(device));
  net->forward(torch::ones({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'torch::ones({2, 4})' on CPU
  shared_back_to_cpu(net);
  net->forward(torch::ones({2, 4}));
}

// --- A module held by a plain class ---------------------------------------------
// The wrapper put its module on the device it chose; a tensor its callers hand
// over untouched meets it in operator(): that statement forgot to move it, so
// it is reported there, not at each call.
class Wrapper {
public:
  explicit Wrapper(torch::Device device) : device_(device) { net_->to(device_); }
  torch::Tensor operator()(const torch::Tensor &x) {
    return net_->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: module 'net_' has its parameters on 'device'
  }

private:
  torch::Device device_;
  Net net_;
};

void run_wrapper(torch::Device device) {
  Wrapper wrap(device);
  auto y = wrap(torch::randn({2, 4}));
}

// A helper whose op needs its parameter on its member's device: a caller
// that passes another device fails in the helper (reported at the call),
// and what the helper returned is not reported again.
struct Hasher {
  Hasher() { offsets_ = torch::ones({1, 4}); }
  torch::Tensor global_ids(const torch::Tensor &local) const {
    return local + offsets_;
  }
  torch::Tensor offsets_;
};

void hashed_ids_once(torch::Device device) {
  Net net;
  net->to(device);
  Hasher hasher;
  auto ids = hasher.global_ids(torch::ones({2, 4}).to(device));
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: 'global_ids()' combines {{.*}}[torch-device-mismatch]
  net->forward(ids);
}

// clone(device) copies the module onto that device.
void clone_onto_device(torch::Device device) {
  Net net;
  auto replica = std::dynamic_pointer_cast<NetImpl>(net->clone(device));
  replica->forward(torch::ones({2, 4}).to(device));
  replica->forward(torch::ones({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'replica' has its parameters on 'device' {{.*}}[torch-device-mismatch]
}

// --- A hook that a trainer runs: the captures as its creator held them ------

#include <functional>

struct HookStep {
  int64_t step = 0;
};

class HookedEngine {
public:
  explicit HookedEngine(torch::Device device) : device_(device) {
    model_->to(device_);
  }
  void on(const std::string &name, std::function<void(HookStep &)> hook) {
    hooks_[name] = std::move(hook);
  }
  Net &model() { return model_; }
  torch::Device device() const { return device_; }
  void fit(int64_t steps) {
    HookStep info;
    for (int64_t s = 0; s < steps; ++s) {
      info.step = s;
      for (auto &entry : hooks_)
        entry.second(info);
    }
  }

private:
  torch::Device device_;
  Net model_;
  std::map<std::string, std::function<void(HookStep &)>> hooks_;
};

void preview_hooks(torch::Device device) {
  HookedEngine engine(device);
  auto probe = torch::rand({2, 4});
  auto moved = torch::rand({2, 4}).to(device);
  engine.on("preview", [&engine, probe, moved](HookStep &) {
    auto bad = engine.model()->forward(probe);
    // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: module 'engine.model()' has its parameters on 'device'
    auto good = engine.model()->forward(moved);
  });
  engine.fit(10);
}

// --- Constants that pick a helper's branch; parts of an argument returned ---

enum class ComputeBackend { Cpu, Cuda };

torch::Device backend_device(ComputeBackend b) {
  switch (b) {
  case ComputeBackend::Cpu:
    return torch::Device(torch::kCPU);
  case ComputeBackend::Cuda:
    return torch::Device(torch::kCUDA);
  }
  return torch::Device(torch::kCPU);
}

void host_backend() {
  Net net;
  net->to(backend_device(ComputeBackend::Cpu));
  net->forward(torch::rand({2, 4}));
}

struct WeightedBatch {
  torch::Tensor x;
  torch::Tensor weight;
};
torch::Tensor weight_of(const WeightedBatch &b) { return b.weight; }

void weighted_on_device(torch::Device device) {
  Net net;
  net->to(device);
  WeightedBatch b{torch::rand({2, 4}), torch::rand({2, 2})};
  auto w = weight_of(b);
  auto out = net->forward(b.x.to(device)) * w;
  // CHECK-MESSAGES: :[[@LINE-1]]:43: warning: operator '*' combines {{.*}} with 'w' on CPU
  auto moved = net->forward(b.x.to(device)) * weight_of(b).to(device);
}

torch::Tensor input_batch();

// A virtual call operator, called with call syntax through a pointer to
// the base: what the override that may run requires.
struct Objective {
  virtual ~Objective() = default;
  virtual torch::Tensor operator()(const torch::Tensor &logits) = 0;
};
struct WeightedObjective : Objective {
  torch::Tensor weight_ = torch::ones({2});
  torch::Tensor operator()(const torch::Tensor &logits) override {
    return (logits * weight_).mean();
  }
};
void virtual_call_operator(Net &net, torch::Device device) {
  std::unique_ptr<Objective> objective = std::make_unique<WeightedObjective>();
  net->to(device);
  auto loss = (*objective)(net->forward(input_batch().to(device)));
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: 'operator()()' combines {{.*}} with 'weight_' on CPU
}

// A reference to a map's element through emplace's iterator names the
// element: moving it moves what the map holds.
void moved_through_emplace(torch::Device device) {
  std::map<std::string, Net> nets;
  auto &net = nets.emplace("latin", Net()).first->second;
  net->to(device);
  auto out = nets.at("latin")->forward(input_batch().to(device));
}

// A stacked tensor has one more dimension than what it stacks: never a
// 0-dim CPU scalar that would broadcast to any device.
void stacked_grid(torch::Device device) {
  auto xs = torch::linspace(-1, 1, 32).reshape({2, 4, 4});
  auto base = torch::stack({xs, xs}, -1);
  auto flow = torch::zeros({2, 4, 4, 2}, torch::TensorOptions().device(device));
  auto grid = base + flow;
  // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: operator '+' combines 'base' on CPU {{.*}}with 'flow' on 'device'
}
