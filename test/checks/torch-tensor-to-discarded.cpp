// RUN: %check_torch_tidy %s torch-tensor-to-discarded %t

#include <torch/torch.h>

void use(const torch::Tensor &t);

// Positives.

void to_device(torch::Tensor x, torch::Device device) {
  x.to(device);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded; tensor conversions return a new tensor and leave 'x' unchanged; only Module::to moves in place [torch-tensor-to-discarded]
  // CHECK-FIXES: {{^}}  x = x.to(device);{{$}}
  use(x);
}

void cuda_and_cpu() {
  torch::Tensor a = torch::ones({2, 2});
  a.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'a.cuda()' is discarded; tensor conversions return a new tensor and leave 'a' unchanged
  // CHECK-FIXES: {{^}}  a = a.cuda();{{$}}
  auto b = torch::zeros({2});
  b.cpu();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'b.cpu()' is discarded
  // CHECK-FIXES: {{^}}  b = b.cpu();{{$}}
  use(a + b);
}

void dtype_overloads(torch::Tensor &x, const torch::Tensor &other) {
  x.to(torch::kHalf);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(torch::kHalf);{{$}}
  x.to(torch::kCUDA, torch::kFloat, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(torch::kCUDA, torch::kFloat, /*non_blocking=*/true);{{$}}
  x.to(other);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(other);{{$}}
  x.to(torch::TensorOptions().dtype(torch::kDouble));
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(torch::TensorOptions().dtype(torch::kDouble));{{$}}
}

void memory_conversions(torch::Tensor x) {
  x.pin_memory();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.pin_memory()' is discarded
  // CHECK-FIXES: {{^}}  x = x.pin_memory();{{$}}
  x.contiguous();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.contiguous()' is discarded
  // CHECK-FIXES: {{^}}  x = x.contiguous();{{$}}
  x.detach();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.detach()' is discarded
  // CHECK-FIXES: {{^}}  x = x.detach();{{$}}
  x.toType(torch::kFloat);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.toType(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.toType(torch::kFloat);{{$}}
  use(x);
}

void in_branches_and_loops(std::vector<torch::Tensor> &batch, bool gpu) {
  torch::Tensor t = torch::randn({4});
  if (gpu)
    t.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 't.cuda()' is discarded
  // CHECK-FIXES: {{^}}    t = t.cuda();{{$}}
  else
    t.cpu();
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 't.cpu()' is discarded
  // CHECK-FIXES: {{^}}    t = t.cpu();{{$}}
  for (auto &b : batch)
    b.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 'b.to(...)' is discarded
  // CHECK-FIXES: {{^}}    b = b.to(torch::kCUDA);{{$}}
  use(t);
}

void inside_lambda() {
  auto move = [](torch::Tensor t) {
    t.cuda();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 't.cuda()' is discarded
    // CHECK-FIXES: {{^}}    t = t.cuda();{{$}}
    return t;
  };
  use(move(torch::ones({1})));
}

// Warned, but no fix-it: `x = ...` would not compile or would not mean it.

struct Batch {
  torch::Tensor data;
};

void no_fix_const_ref(const torch::Tensor &x) {
  x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.cuda()' is discarded
  // CHECK-FIXES: {{^}}  x.cuda();{{$}}
}

void no_fix_member(Batch &batch, const Batch &frozen) {
  batch.data.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'batch.data.to(...)' is discarded; tensor conversions return a new tensor and leave 'batch.data' unchanged
  // CHECK-FIXES: {{^}}  batch.data.to(torch::kCUDA);{{$}}
  frozen.data.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'frozen.data.cuda()' is discarded
  // CHECK-FIXES: {{^}}  frozen.data.cuda();{{$}}
}

void no_fix_temporary_or_pointer(torch::Tensor *p) {
  torch::ones({3}).cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'torch::ones({3}).cuda()' is discarded
  // CHECK-FIXES: {{^}}  torch::ones({3}).cuda();{{$}}
  p->cpu();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'p->cpu()' is discarded; tensor conversions return a new tensor and leave '*p' unchanged
  // CHECK-FIXES: {{^}}  p->cpu();{{$}}
}

void no_fix_const_local_or_capture() {
  const torch::Tensor c = torch::ones({1});
  c.clone();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'c.clone()' is discarded
  // CHECK-FIXES: {{^}}  c.clone();{{$}}
  torch::Tensor captured = torch::ones({1});
  auto f = [captured] {
    captured.cuda();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 'captured.cuda()' is discarded
    // CHECK-FIXES: {{^}}    captured.cuda();{{$}}
  };
  f();
}

#define MOVE_TO_GPU(t) t.cuda()
void no_fix_in_macro(torch::Tensor x) {
  MOVE_TO_GPU(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: result of 'x.cuda()' is discarded
  // CHECK-FIXES: {{^}}  MOVE_TO_GPU(x);{{$}}
}

// Negatives.

void result_used(torch::Tensor x, torch::Device device) {
  x = x.to(device);
  auto y = x.cuda();
  torch::Tensor z = x.cpu().contiguous();
  use(x.pin_memory());
  use(y + z);
}

torch::Tensor returned(torch::Tensor x) { return x.to(torch::kHalf); }

void explicit_void_discard(torch::Tensor x) {
  (void)x.cuda();
  static_cast<void>(x.contiguous());
}

void module_to_moves_in_place(std::shared_ptr<torch::nn::Module> net,
                              torch::nn::Module &ref, torch::Device device) {
  net->to(device);
  ref.to(torch::kCUDA);
  net->to(torch::kHalf);
}

void in_place_methods(torch::Tensor x, const torch::Tensor &src) {
  x.copy_(src);
  x.detach_();
  x.requires_grad_();
  x.zero_();
}

void non_conversion_results(torch::Tensor x) {
  x.sum();   // Other warnings are for other checks.
  x.device();
  x.is_cuda();
  x.options();
}

void used_in_condition_and_ternary(torch::Tensor x, bool gpu) {
  if (x.cuda().defined())
    use(x);
  torch::Tensor y = gpu ? x.cuda() : x.cpu();
  use(y);
  for (torch::Tensor t = x.cpu(); t.defined();)
    break;
}

void comma_and_init_list(torch::Tensor x) {
  std::vector<torch::Tensor> v = {x.cuda(), x.cpu()};
  use(v[0]);
}

struct Holder {
  torch::Tensor t;
  torch::Tensor get() const { return t.to(torch::kCUDA); }
};

void suppressed(torch::Tensor x) {
  x.cuda(); // NOLINT(torch-tensor-to-discarded)
}

// Converted copies returned by a helper, a lambda or a conditional: the
// model carries the fact to the statement that drops them.
namespace {
torch::Tensor copy_to(const torch::Tensor &t, torch::Device device) {
  auto moved = t.to(device);
  return moved;
}
torch::Tensor staged(torch::Tensor t) { return copy_to(t, torch::kCUDA); }
} // namespace

void helper_results_dropped(torch::Tensor x, torch::Device device, bool gpu) {
  copy_to(x, device);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'copy_to(x, device)' is discarded; it is a converted copy of a tensor, which the conversion left unchanged; only Module::to moves in place [torch-tensor-to-discarded]
  // CHECK-MESSAGES: :[[@LINE-2]]:3: note: the converted copy comes from the call of 'copy_to()' here
  // CHECK-MESSAGES: :[[@LINE-10]]:18: note: the conversion is here
  staged(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'staged(x)' is discarded
  auto upload = [](const torch::Tensor &t) { return t.cuda(); };
  upload(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'upload(x)' is discarded
  gpu ? x.cuda() : x.cpu();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of the conditional expression is discarded
  use(x);
}

// Near misses: the copy is kept where the caller can read it, is not a copy
// on every path, or is not the function's own.
struct Cache {
  torch::Tensor last;
  torch::Tensor put(const torch::Tensor &t) {
    last = t.cuda();
    return last;
  }
  torch::Tensor get() const { return last; }
};
torch::Tensor upload_in_place(torch::Tensor &t) {
  t = t.cuda();
  return t;
}
torch::Tensor passthrough(const torch::Tensor &t) { return t; }
torch::Tensor maybe_moved(const torch::Tensor &t, bool gpu) {
  return gpu ? t.cuda() : t;
}

void kept_results(torch::Tensor x, Cache &cache, bool gpu) {
  cache.put(x);
  cache.get();
  upload_in_place(x);
  torch::Tensor y = x.cuda();
  passthrough(y);
  maybe_moved(x, gpu);
  gpu ? x.cuda() : x;
  (void)copy_to(x, torch::kCUDA);
  use(y);
}
