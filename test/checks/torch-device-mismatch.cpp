// RUN: %check_torch_tidy %s torch-device-mismatch %t

#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

torch::Device pick_device();
torch::Tensor load_batch();

// --- Positives -------------------------------------------------------------

void module_on_cuda_input_on_cpu() {
  Net net;
  net->to(torch::kCUDA);
  auto x = torch::randn({8, 4});
  auto y = net->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: module 'net' has its parameters on CUDA but is called with 'x' on CPU [torch-device-mismatch]
  // CHECK-MESSAGES: :[[@LINE-4]]:8: note: 'net' is on CUDA from here
  // CHECK-MESSAGES: :[[@LINE-4]]:12: note: 'x' is on CPU from here
}

void holder_call_operator() {
  Net net;
  net->to(torch::Device(torch::kCUDA));
  auto y = net(torch::zeros({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'net' has its parameters on CUDA but is called with 'torch::zeros({2, 4})' on CPU
}

void symbolic_device_variable(bool use_gpu) {
  torch::Device device(use_gpu ? torch::kCUDA : torch::kCPU);
  auto model = std::make_shared<NetImpl>();
  model->to(device);
  auto x = torch::randn({8, 4});
  model->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'model' has its parameters on 'device' but is called with 'x' on CPU; this crashes on a machine where 'device' is CUDA
}

void device_from_helper() {
  auto device = pick_device();
  torch::nn::Sequential seq(torch::nn::Linear(4, 4), torch::nn::ReLU());
  seq->to(device);
  auto x = torch::ones({1, 4});
  seq->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'seq' has its parameters on 'device' but is called with 'x' on CPU; this crashes on a machine where 'device' is CUDA
}

void device_parameter(torch::Device device) {
  torch::nn::Linear fc(4, 2);
  fc->to(device);
  fc(torch::randn({3, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'fc' has its parameters on 'device'
}

void fresh_module_is_on_cpu() {
  torch::nn::Linear fc(4, 2);
  auto x = torch::randn({3, 4}, torch::kCUDA);
  fc(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'fc' has its parameters on CPU but is called with 'x' on CUDA
}

void binary_operator() {
  auto a = torch::randn({4}).cuda();
  auto b = torch::randn({4});
  auto c = a + b;
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: operator '+' combines 'a' on CUDA with 'b' on CPU
}

void two_ordinals() {
  auto a = torch::randn({4}, torch::Device(torch::kCUDA, 0));
  auto b = torch::randn({4}).to(torch::Device("cuda:1"));
  auto c = a * b;
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: operator '*' combines 'a' on cuda:0 with 'b' on cuda:1
}

void multi_tensor_functions() {
  auto a = torch::randn({4, 4}, torch::TensorOptions().device(torch::kCUDA));
  auto b = torch::eye(4);
  auto c = torch::cat({a, b});
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::cat' combines 'a' on CUDA with 'b' on CPU
  auto d = torch::matmul(a, b);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::matmul' combines 'a' on CUDA with 'b' on CPU
}

void loss_with_cpu_target() {
  Net net;
  net->to(torch::kCUDA);
  auto input = torch::randn({8, 4}).to(torch::kCUDA, /*non_blocking=*/false);
  auto target = torch::randn({8, 2});
  auto loss = torch::nn::functional::mse_loss(net(input), target);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: 'torch::nn::functional::mse_loss' combines 'net(input)' on CUDA with 'target' on CPU
}

void in_a_loop(int steps) {
  Net net;
  net->to(torch::kCUDA);
  for (int i = 0; i < steps; ++i) {
    auto x = torch::rand({4, 4});
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' has its parameters on CUDA but is called with 'x' on CPU
  }
}

void data_loader_batches() {
  Net net;
  net->to(torch::kCUDA);
  auto loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>()), 64);
  for (auto &batch : *loader) {
    net->forward(batch.data);
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' has its parameters on CUDA but is called with 'batch.data' on CPU
  }
}

void like_factories_keep_device() {
  auto a = torch::randn({4}).cuda();
  auto zeros = torch::zeros_like(a);
  auto cpu = torch::ones({4});
  auto s = zeros - cpu;
  // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: operator '-' combines 'zeros' on CUDA with 'cpu' on CPU
}

void every_to_overload(torch::Tensor other) {
  auto base = torch::randn({4});
  auto a = base.to(torch::kCUDA);
  auto b = base.to(torch::Device(torch::kCUDA), torch::kHalf);
  auto c = base.to(torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat));
  auto d = a.to(torch::kHalf);
  auto e = torch::randn({4}).to(a);
  auto h = base.to(torch::kDouble);
  a + h;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'a' on CUDA with 'h' on CPU
  b + h;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'b' on CUDA with 'h' on CPU
  c + h;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'c' on CUDA with 'h' on CPU
  d + h;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'd' on CUDA with 'h' on CPU
  e + h;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'e' on CUDA with 'h' on CPU
}

struct Trainer {
  Net net_;
  torch::Device device_;
  void step() {
    net_->to(device_);
    auto x = torch::randn({2, 4});
    net_->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: module 'net_' has its parameters on 'device_' but is called with 'x' on CPU; this crashes on a machine where 'device_' is CUDA
  }
};

void inside_lambda() {
  auto run = [] {
    Net net;
    net->to(torch::kCUDA);
    net->forward(torch::randn({1, 4}));
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' has its parameters on CUDA
  };
  run();
}

void reference_parameter_moved_here(Net &net, torch::Device device) {
  net->to(device);
  auto sample = torch::randn({1, 4});
  net->forward(sample);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'sample' on CPU; this crashes on a machine where 'device' is CUDA
}

// --- Negatives -------------------------------------------------------------

void reference_parameter_not_moved(Net &net) {
  net->forward(torch::randn({1, 4}));
}

void both_moved_with_same_device(torch::Device device) {
  Net net;
  net->to(device);
  auto x = torch::randn({2, 4}).to(device);
  net->forward(x);
  auto y = torch::randn({2, 4}, device);
  x + y;
}

void input_moved_before_call() {
  Net net;
  net->to(torch::kCUDA);
  auto x = torch::randn({2, 4});
  x = x.to(torch::kCUDA);
  net->forward(x);
}

void branches_merge_to_unknown(bool gpu) {
  Net net;
  auto x = torch::randn({2, 4});
  if (gpu) {
    net->to(torch::kCUDA);
    x = x.cuda();
  }
  net->forward(x);
}

void opaque_inputs_never_warn(Net net, torch::Tensor param) {
  net->forward(param);
  net->forward(load_batch());
  auto x = torch::randn({2, 4});
  net->forward(x);
}

void zero_dim_cpu_operand_is_allowed() {
  auto a = torch::randn({4}).cuda();
  auto scale = torch::tensor(2.0);
  auto b = a * scale;
  auto c = a + a.sum().cpu();
}

void device_known_cpu() {
  torch::Device device(torch::kCPU);
  Net net;
  net->to(device);
  net->forward(torch::randn({1, 4}));
}

void unspecified_and_explicit_ordinal() {
  auto a = torch::randn({4}).cuda();
  auto b = torch::randn({4}, torch::Device(torch::kCUDA, 0));
  a + b;
}

void two_device_variables(torch::Device d1, torch::Device d2) {
  auto a = torch::randn({4}).to(d1);
  auto b = torch::randn({4}).to(d2);
  a + b;
}

void reassigned_in_loop(int n) {
  auto x = torch::randn({4});
  auto y = torch::randn({4});
  for (int i = 0; i < n; ++i) {
    x + y;
    x = x.cuda();
    y = y.cuda();
  }
}

void escaped_through_reference(void (*move)(torch::Tensor &)) {
  auto a = torch::randn({4}).cuda();
  auto b = torch::randn({4});
  auto mover = [&] { b = b.cuda(); };
  mover();
  a + b;
}

void dtype_options_keep_device() {
  auto a = torch::randn({4}).cuda();
  auto b = a.to(torch::TensorOptions().dtype(torch::kHalf));
  a + b;
}

void module_copied_from_elsewhere(Net other) {
  Net net = other;
  auto x = torch::randn({2, 4}).cuda();
  net->forward(x);
}

void suppressed() {
  auto a = torch::randn({4}).cuda();
  auto b = torch::randn({4});
  a + b; // NOLINT(torch-device-mismatch)
}

// torch::stack runs where the container's elements are.
void stacked_probe_states(torch::Device device, int64_t probes) {
  Net net;
  net->to(device);
  std::vector<torch::Tensor> states;
  for (int64_t i = 0; i < probes; ++i)
    states.push_back(torch::randn({4}));
  auto stacked = torch::stack(states);
  net->forward(stacked.to(device));
  net->forward(stacked);
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: module 'net' has its parameters on 'device' but is called with 'stacked' on CPU; {{.*}}[torch-device-mismatch]
}

// A reduction that keeps its dimensions is no 0-dim scalar.
void residual_of_row_sums(Net &model, torch::Device device) {
  model->to(device);
  auto x = torch::randn({8, 4});
  auto target = x.sum(1, /*keepdim=*/true);
  auto residual = model->forward(x.to(device)) - target;
  // CHECK-MESSAGES: :[[@LINE-1]]:48: warning: operator '-' combines 'model->forward(x.to(device))' on 'device' with 'target' on CPU{{.*}}[torch-device-mismatch]
  auto total = x.sum();
  auto scaled = model->forward(x.to(device)) * total;
}

// An operator broadcasts: a mask compared from a full host tensor is no
// 0-dim scalar; one compared from a 0-dim sum is.
void mask_from_comparison(Net &model, torch::Device device) {
  model->to(device);
  auto x = torch::randn({8, 4});
  auto keep = torch::rand({8, 2}) > 0.1;
  auto kept = model->forward(x.to(device)) * keep;
  // CHECK-MESSAGES: :[[@LINE-1]]:44: warning: operator '*' combines 'model->forward(x.to(device))' on 'device' with 'keep' on CPU{{.*}}[torch-device-mismatch]
  auto gate = x.sum() > 0.0;
  auto gated = model->forward(x.to(device)) * gate;
}

// A narrowed view keeps the rank: its row sums with keepdim are no scalar.
void residual_of_narrowed_sums(Net &model, torch::Device device) {
  model->to(device);
  auto x = torch::randn({8, 4});
  auto target = x.narrow(1, 0, 2).sum(1, /*keepdim=*/true);
  auto residual = model->forward(x.to(device)) - target;
  // CHECK-MESSAGES: :[[@LINE-1]]:48: warning: operator '-' combines 'model->forward(x.to(device))' on 'device' with 'target' on CPU{{.*}}[torch-device-mismatch]
}

// A std::array built by braces holds what the braces put there.
#include <array>
std::array<torch::Tensor, 2> host_pair() { return {torch::randn({2, 4}), torch::randn({2, 4})}; }
void compare_with_array(torch::Device device) {
  auto sr = torch::randn({2, 4}, device);
  std::array<torch::Tensor, 2> local{torch::randn({2, 4}), torch::randn({2, 4})};
  auto a = torch::mse_loss(sr, local[0]);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::mse_loss' combines 'sr' on 'device' with 'local[0]' on CPU{{.*}}[torch-device-mismatch]
  auto levels = host_pair();
  auto b = torch::mse_loss(sr, levels[1]);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::mse_loss' combines 'sr' on 'device' with 'levels[1]' on CPU (from 'host_pair()'{{.*}}[torch-device-mismatch]
  std::array<torch::Tensor, 2> moved{local[0].to(device), local[1].to(device)};
  auto c = torch::mse_loss(sr, moved[0]);
}

// A host constant reshaped to a spelled shape is no 0-dim scalar: the
// normalisation constants must be on the batch's device.
void normalise(torch::Device device) {
  auto batch = torch::randn({4, 3, 8, 8}).to(device);
  auto mean = torch::tensor({0.485, 0.456, 0.406}).view({1, 3, 1, 1});
  auto centred = batch - mean;
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: operator '-' combines 'batch' on 'device' with 'mean' on CPU{{.*}}[torch-device-mismatch]
  auto scale = torch::tensor(0.5);
  auto scaled = batch * scale;
  auto moved = batch - mean.to(device);
}

// One mismatch is one finding: what is computed from the failed op is on no
// device that a later operand could decide.
void normalise_twice(torch::Device device) {
  auto batch = torch::randn({4, 3, 8, 8}).to(device);
  auto mean = torch::tensor({0.485, 0.456, 0.406}).view({1, 3, 1, 1});
  auto stdev = torch::tensor({0.229, 0.224, 0.225}).view({1, 3, 1, 1});
  auto x = (batch - mean) / stdev;
  // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: operator '-' combines 'batch' on 'device' with 'mean' on CPU{{.*}}[torch-device-mismatch]
  auto y = x + torch::randn({4, 3, 8, 8}, device);
}

// The tensors of a (values, indices) tuple are computed where the receiver
// is, whether bound by std::get, a structured binding or a tuple variable.
void beam_scores(torch::Device device) {
  auto logits = torch::randn({4, 16}, device);
  auto penalty = torch::randn({4});
  auto [best, index] = logits.topk(4);
  auto a = best / penalty;
  // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: operator '/' combines 'best' on 'device' with 'penalty' on CPU{{.*}}[torch-device-mismatch]
  auto b = std::get<0>(logits.max(1)) + penalty;
  // CHECK-MESSAGES: :[[@LINE-1]]:39: warning: operator '+' combines 'std::get<0>(logits.max(1))' on 'device' with 'penalty' on CPU{{.*}}[torch-device-mismatch]
  auto sorted = logits.sort(1);
  auto c = std::get<1>(sorted) * penalty;
  // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: operator '*' combines 'std::get<1>(sorted)' on 'device' with 'penalty' on CPU{{.*}}[torch-device-mismatch]
  auto d = best / penalty.to(device);
  auto host = torch::randn({4, 16});
  auto e = std::get<0>(host.topk(2)) + penalty;
}

// torch::tensor(values) of a std::vector is one-dimensional, not a 0-dim
// scalar that may meet any device.
void host_rewards(torch::Device device, const std::vector<float> &rewards) {
  auto q = torch::randn({2}, device);
  auto r = torch::tensor(rewards);
  auto target = r + q;
  // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: operator '+' combines 'r' on CPU with 'q' on 'device'{{.*}}[torch-device-mismatch]
  auto scale = torch::tensor(0.5f);
  auto scaled = scale * q;
  auto moved = torch::tensor(rewards).to(device) + q;
}

// A comparison computes element-wise on its operands' device; an in-place
// op writes its output where it computes, so a CPU output takes no 0-dim
// exception.
void accuracy_and_average(torch::Device device, std::vector<torch::Tensor> &avg) {
  auto logits = torch::randn({8, 4}, device);
  auto labels = torch::randn({8});
  auto hits = logits.argmax(1) == labels;
  // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: operator '==' combines 'logits.argmax(1)' on 'device' with 'labels' on CPU{{.*}}[torch-device-mismatch]
  auto total = torch::tensor(0.0f);
  total += logits.sum();
  // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: operator '+=' combines 'total' on CPU with 'logits.sum()' on 'device'{{.*}}[torch-device-mismatch]
  auto moved_hits = logits.argmax(1) == labels.to(device);
  auto count = torch::tensor(0.0f);
  logits += count;
}

// A loss module held by a module subclass moves with it, and has no
// parameters to mismatch: near-miss.
class MaskedCrossEntropy : public torch::nn::Module {
public:
  MaskedCrossEntropy() { loss_ = torch::nn::CrossEntropyLoss(); }
  torch::Tensor forward(torch::Tensor pred, torch::Tensor label) {
    return loss_->forward(pred, label);
  }
private:
  torch::nn::CrossEntropyLoss loss_{nullptr};
};
void masked_loss_on_device() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  MaskedCrossEntropy criterion;
  auto l = criterion.forward(torch::ones({3, 10}).to(device),
                             torch::ones({3}).to(device));
}

// The tensors of a LibTorch call that returns a list (`chunk`, `split`,
// `unbind`, `meshgrid`) are computed where its operands are.
void pixel_grid(torch::Device device) {
  auto K = torch::eye(3);
  auto axes = torch::meshgrid({torch::arange(8, torch::TensorOptions().device(device)),
                               torch::arange(8, torch::TensorOptions().device(device))});
  auto grid = torch::stack(axes, -1);
  auto rays = torch::matmul(grid, K);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: '{{.*}}matmul' combines 'grid' on 'device' with 'K' on CPU{{.*}}[torch-device-mismatch]
}
void split_heads() {
  auto qkv = torch::randn({4, 12}, torch::kCUDA);
  auto bias = torch::zeros({4, 4});
  auto parts = qkv.chunk(3, 1);
  auto q = parts[0] + bias;
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: operator '+' combines 'parts[0]' on CUDA with 'bias' on CPU{{.*}}[torch-device-mismatch]
  for (const auto &row : qkv.unbind(0))
    auto shifted = row + bias;
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: operator '+' combines 'row' on CUDA with 'bias' on CPU{{.*}}[torch-device-mismatch]
  auto head = qkv.split(4, 1)[2] * bias;
  // CHECK-MESSAGES: :[[@LINE-1]]:34: warning: operator '*' combines 'qkv.split(4, 1)[2]' on CUDA with 'bias' on CPU{{.*}}[torch-device-mismatch]
}
void split_heads_on_host() {
  auto qkv = torch::randn({4, 12});
  auto bias = torch::zeros({4, 4});
  auto parts = qkv.chunk(3, 1);
  auto q = parts[0] + bias; // near-miss: both on the CPU
}
// ctc_loss reads its lengths on the host and moves its targets itself.
torch::Tensor ctc(torch::Device device) {
  auto log_probs = torch::log_softmax(torch::randn({50, 2, 20}).to(device), 2);
  auto targets = torch::randint(1, 20, {2, 30});
  auto input_lengths = torch::full({2}, 50);
  auto target_lengths = torch::full({2}, 30);
  return torch::ctc_loss(log_probs, targets, input_lengths, target_lengths); // near-miss
}

// One report per mistake: what is computed from a mismatched operation is on
// the accelerator operand's device, and is not judged again.
void mismatch_reported_once() {
  auto x = torch::randn({4}).cuda();
  auto mixed = x * torch::rand({4});
  // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: operator '*' combines 'x' on CUDA with 'torch::rand({4})' on CPU{{.*}}[torch-device-mismatch]
  auto shifted = mixed + torch::ones({4});
  auto host = torch::ones({4}) * 2;
  auto back = shifted.cpu() + host;
}

// A pointer that only names a local module (`Net *p = &net;`, used through
// `*p` and `->`) is the module.
void module_through_local_pointer() {
  Net net;
  net->to(torch::kCUDA);
  Net *current = &net;
  (*current)->forward(torch::randn({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: module '*current' has its parameters on CUDA but is called with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
}

// A pointer kept beyond naming (stored in a vector) lets other code move
// the module: unknown.
void module_pointer_stored(std::vector<Net *> &registry) {
  Net net;
  net->to(torch::kCUDA);
  Net *current = &net;
  registry.push_back(current);
  (*current)->forward(torch::randn({2, 4}));
}

// A module called once, with a host input: reported at the call, not again
// at the forward's submodule call.
struct HeadImpl : torch::nn::Module {
  HeadImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Head);
void head_called_once(torch::Device device) {
  Head head;
  head->to(device);
  head->forward(torch::randn({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: module 'head' has its parameters on {{.*}} but is called with 'torch::randn({2, 4})' on CPU{{.*}}[torch-device-mismatch]
}
void run_head() { head_called_once(torch::Device(torch::kCUDA, 0)); }

// A size list (`{4, 4}`) holds numbers, no operand: host indices and values
// that may be 0-dim build a host tensor.
void sparse_host_adjacency() {
  auto a = torch::zeros({3}, torch::kLong);
  auto adj = torch::sparse_coo_tensor(torch::stack({a, a}), a.sum(), {4, 4});
  auto h = torch::mm(adj, torch::ones({4, 2}).cuda());
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'at::mm' combines 'adj' on CPU with 'torch::ones({4, 2}).cuda()' on CUDA [torch-device-mismatch]
}

// A holder copied before the move shares the module: the copy moved too.
void holder_copy_shares_module() {
  Net model;
  Net copy = model;
  model->to(torch::kCUDA);
  copy->forward(torch::rand({2, 4}).cuda());
  copy->forward(torch::rand({2, 4}));
  // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: module 'copy' has its parameters on CUDA but is called with 'torch::rand({2, 4})' on CPU [torch-device-mismatch]
}

// Tensor methods that compute with a second tensor: the same rule as the
// operators and the functions.
void methods_of_two_tensors(torch::Device device) {
  auto pred = torch::randn({8}, device);
  auto labels = torch::randn({8});
  auto hits = pred.eq(labels);
  // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'eq()' combines 'pred' on 'device' with 'labels' on CPU
  auto proj = pred.matmul(labels);
  // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'matmul()' combines 'pred' on 'device' with 'labels' on CPU
  // A 0-dim CPU tensor may meet a CUDA one element-wise: `torch::zeros({})`.
  auto shifted = pred.add(torch::zeros({}));
  // Only the other's shape: no device to share.
  auto flat = labels.flatten();
  auto scaled = pred.sub(flat);
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: 'sub()' combines 'pred' on 'device' with 'flat' on CPU
  (void)hits; (void)proj; (void)shifted; (void)scaled;
}

// One report per mistake: the output of a module called with an input on
// another device decides nothing more.
void cascade_after_module_mismatch(torch::Device device) {
  Net net;
  net->to(device);
  auto x = torch::randn({8, 4});
  auto logits = net->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: module 'net' has its parameters on 'device' but is called with 'x' on CPU
  auto labels = torch::zeros({8}, torch::kLong);
  auto hits = logits.argmax(1).eq(labels);
  (void)hits;
}

// Members whose addresses go into a list walked by a loop: the loop's
// moves reach them, so their device is not the one they were built on.
class TwinCritics {
public:
  explicit TwinCritics(torch::Device device) {
    for (auto *critic : {&q1_, &q2_})
      (*critic)->to(device);
  }
  torch::Tensor score(torch::Device device) {
    auto x = torch::randn({2, 4}, device);
    return q1_->forward(x) + q2_->forward(x);
  }

private:
  Net q1_, q2_;
};

// A loader batch stacks its examples: its targets are no 0-dim tensor.
void accuracy_against_batch_targets(torch::Device device) {
  Net net;
  net->to(device);
  auto loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>()), 64);
  for (auto &batch : *loader) {
    auto pred = net->forward(batch.data.to(device)).argmax(1);
    auto hits = pred.eq(batch.target);
    // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: 'eq()' combines 'pred' on 'device' with 'batch.target' on CPU
    (void)hits;
  }
}

// The tensors a functional loss's options hold are its operands too.
void weighted_loss(torch::Device device) {
  auto logits = torch::randn({8, 3}, device);
  auto labels = torch::zeros({8}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto weights = torch::ones({3});
  auto loss = torch::nn::functional::cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().weight(weights));
  // CHECK-MESSAGES: :[[@LINE-2]]:15: warning: 'torch::nn::functional::cross_entropy' combines 'logits' on 'device' with 'weights' on CPU
  auto moved = weights.to(device);
  auto fine = torch::nn::functional::cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().weight(moved));
  (void)loss; (void)fine;
}

// An AnyModule's module is moved through ptr(): its device is not followed.
void any_module_moved_through_ptr(torch::Device device) {
  torch::nn::AnyModule head(torch::nn::Linear(4, 2));
  head.ptr()->to(device);
  auto y = head.forward(torch::randn({2, 4}, device));
  (void)y;
}

// A reduction over one dimension of a 2-d CPU tensor has one dimension
// left: no 0-dim scalar that CUDA operands could take.
void reduced_statistics(torch::Device device) {
  auto table = torch::randn({10, 80});
  auto mean = table.mean(0);
  auto peak = table.amax(1).clamp_max(1.0);
  auto x = torch::randn({4, 80}, device);
  auto centred = x - mean;
  // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: operator '-' combines 'x' on 'device' with 'mean' on CPU
  auto total = table.sum();
  auto shifted = x - total; // a 0-dim CPU tensor: allowed
  auto rows = torch::randn({10}, device) * peak;
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: operator '*' combines 'torch::randn({10}, device)' on 'device' with 'peak' on CPU
  auto from_vector = torch::randn({8}).mean(0);
  auto fine = x + from_vector; // 1-d reduced to 0-d: allowed
  (void)centred; (void)shifted; (void)rows; (void)fine;
}
