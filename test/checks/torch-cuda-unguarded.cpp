// RUN: %check_torch_tidy %s torch-cuda-unguarded %t

#include <torch/torch.h>
#include <cassert>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

namespace tc = torch::cuda;

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x; }
};

bool parse_flag(const char *name);
void log_line(const std::string &line);

// ===--- Positives ----------------------------------------------------=== //

void plain_device() {
  torch::Device device(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: CUDA device selected without checking torch::cuda::is_available(); this crashes on a machine without a working CUDA [torch-cuda-unguarded]
}

torch::Tensor dot_cuda(const torch::Tensor &x) {
  return x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: CUDA device selected without checking
}

torch::Tensor to_kcuda(const torch::Tensor &x) {
  return x.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: CUDA device selected without checking
}

torch::Tensor options_device() {
  auto options = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, 0);
  // CHECK-MESSAGES: :[[@LINE-1]]:69: warning: CUDA device selected without checking
  return torch::zeros({2, 2}, options);
}

torch::Tensor factory_device() {
  return torch::randn({4}, torch::device(torch::kCUDA).dtype(torch::kFloat));
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: CUDA device selected without checking
}

void module_to() {
  auto net = std::make_shared<Net>();
  net->to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking
}

torch::Tensor device_strings(const torch::Tensor &x) {
  torch::Device dev("cuda:0");
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: CUDA device selected without checking
  (void)dev;
  return x.to("cuda");
  // CHECK-MESSAGES: :[[@LINE-1]]:15: note: CUDA is selected here too, on the same path
}

void enumerator_and_using(torch::Tensor &x) {
  using torch::kCUDA;
  x = x.to(kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: CUDA device selected without checking
  torch::Device d = torch::Device(torch::DeviceType::CUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:35: note: CUDA is selected here too, on the same path
  (void)d;
}

void guard_on_other_path(torch::Tensor &x) {
  if (torch::cuda::is_available())
    log_line("CUDA is there");
  x = x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE-4]]:7: note: an availability check here does not protect this use
}

void inverted_guard(torch::Tensor &x) {
  if (!tc::is_available()) {
    x = x.cuda();
    // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking
    // CHECK-MESSAGES: :[[@LINE-3]]:7: note: an availability check here
  }
}

void check_after_use(torch::Tensor &x) {
  x = x.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: CUDA device selected without checking
  TORCH_CHECK(torch::cuda::is_available(), "no CUDA");
  // CHECK-MESSAGES: :[[@LINE-1]]:3: note: an availability check here
}

void either_condition(torch::Tensor &x, bool force_gpu) {
  if (force_gpu || torch::cuda::is_available())
    x = x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE-3]]:20: note: an availability check here
}

void in_a_loop(std::vector<torch::Tensor> &batches) {
  for (auto &batch : batches)
    batch = batch.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: CUDA device selected without checking
}

void in_a_lambda(std::vector<torch::Tensor> &batches) {
  auto move = [](const torch::Tensor &t) { return t.cuda(); };
  // CHECK-MESSAGES: :[[@LINE-1]]:53: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE+2]]:13: note: reached from here without a check
  for (auto &batch : batches)
    batch = move(batch);
}

void flag_overwritten(torch::Tensor &x) {
  bool has_cuda = torch::cuda::is_available();
  has_cuda = parse_flag("--gpu");
  if (has_cuda)
    x = x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking
}

// A helper that is called once under a guard and once without.
torch::Tensor upload(const torch::Tensor &x) {
  return x.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE+7]]:12: note: reached from here without a check
}

torch::Tensor upload_callers(const torch::Tensor &x, bool again) {
  if (torch::cuda::is_available())
    return upload(x);
  if (again)
    return upload(x);
  return x;
}

// Reached from main after main's own selection: the same unguarded path,
// reported once at main's (below).
struct Trainer {
  torch::Device device_{torch::kCUDA};
  void run();
};

void make_trainer() {
  Trainer trainer;
  trainer.run();
}

torch::Device kGlobalDevice(torch::kCUDA);
// CHECK-MESSAGES: :[[@LINE-1]]:29: warning: CUDA device selected without checking

struct Runner {
  Runner() : device_(torch::kCUDA) {}
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE+5]]:10: note: reached from here without a check
  torch::Device device_;
};

void make_runner() {
  Runner runner;
  (void)runner;
}

template <typename T> T upload_template(const T &x) {
  return x.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE+3]]:60: note: reached from here without a check
}

torch::Tensor instantiate(const torch::Tensor &x) { return upload_template(x); }

void caught(torch::Tensor &x) {
  try {
    x = x.cuda();
    // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking
  } catch (const c10::Error &) {
    log_line("no CUDA");
  }
}

void flag_parameter(torch::Tensor &x, bool use_cuda) {
  if (use_cuda)
    x = x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking
}

void pass_user_flag(torch::Tensor &x) { flag_parameter(x, parse_flag("--gpu")); }

int main() {
  auto net = std::make_shared<Net>();
  net->to(torch::Device("cuda"));
  // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :141:25: note: CUDA is selected here too, on the same path
  make_trainer();
  return 0;
}

// ===--- Negatives ----------------------------------------------------=== //

torch::Tensor ternary(const torch::Tensor &x) {
  return x.to(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
}

torch::Tensor ternary_count(const torch::Tensor &x) {
  torch::Device device(torch::cuda::device_count() > 0 ? torch::kCUDA : torch::kCPU);
  return x.to(device);
}

torch::Tensor if_else(const torch::Tensor &x) {
  if (torch::cuda::is_available()) {
    return x.cuda();
  } else {
    return x.cpu();
  }
}

torch::Tensor early_return(const torch::Tensor &x) {
  if (!torch::cuda::is_available())
    return x;
  return x.to(torch::kCUDA);
}

torch::Tensor early_throw(const torch::Tensor &x) {
  if (torch::cuda::device_count() == 0)
    throw std::runtime_error("this program needs a GPU");
  return x.to("cuda:0");
}

void early_exit(torch::Tensor &x) {
  if (!tc::is_available())
    std::exit(1);
  x = x.cuda();
}

void early_abort(torch::Tensor &x) {
  if (!tc::is_available()) {
    std::cerr << "no CUDA\n";
    abort();
  }
  x = x.cuda();
}

void torch_check(torch::Tensor &x) {
  TORCH_CHECK(torch::cuda::is_available(), "this program needs a GPU");
  x = x.to(torch::kCUDA);
}

void asserted(torch::Tensor &x) {
  assert(torch::cuda::is_available());
  x = x.to(torch::kCUDA);
}

void flag_variable(torch::Tensor &x) {
  bool has_cuda = torch::cuda::is_available();
  if (has_cuda)
    x = x.cuda();
  const auto n = torch::cuda::device_count();
  if (n > 0 && parse_flag("--gpu"))
    x = x.to(torch::kCUDA);
}

void negated_flag_early_return(torch::Tensor &x) {
  const bool has_cuda = tc::is_available();
  if (!has_cuda)
    return;
  x = x.cuda();
}

void flag_set_under_guard(torch::Tensor &x) {
  bool use_cuda = false;
  if (torch::cuda::is_available())
    use_cuda = true;
  if (use_cuda)
    x = x.cuda();
}

void device_value_from_guard(torch::Tensor &x) {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  x = x.to(device);
  auto net = std::make_shared<Net>();
  net->to(device);
  if (device.is_cuda())
    x = x.to(torch::kCUDA);
}

torch::Device pick_device() {
  if (torch::cuda::is_available())
    return torch::kCUDA;
  return torch::kCPU;
}

void uses_helper(torch::Tensor &x) {
  torch::Device device = pick_device();
  x = x.to(device);
  if (pick_device() == torch::kCUDA)
    x = x.cuda();
}

void train_on_gpu(std::shared_ptr<Net> net) { net->to(torch::kCUDA); }
void train_on_cpu(std::shared_ptr<Net> net) { net->to(torch::kCPU); }

void dispatch(std::shared_ptr<Net> net) {
  if (torch::cuda::is_available())
    train_on_gpu(net);
  else
    train_on_cpu(net);
}

void lambdas(std::vector<torch::Tensor> &batches) {
  auto upload = [](const torch::Tensor &t) { return t.cuda(); };
  if (tc::is_available()) {
    for (auto &batch : batches)
      batch = upload(batch);
    auto inline_lambda = [&] { batches[0] = batches[0].to(torch::kCUDA); };
    inline_lambda();
  }
}

void comparisons_are_not_selections(const torch::Tensor &x, torch::Device d) {
  if (x.device() == torch::kCUDA)
    log_line("on the GPU");
  if (x.device().type() == torch::kCUDA || d == torch::Device("cuda"))
    log_line("on the GPU");
  log_line("cuda");
  std::string backend = "cuda";
  (void)backend;
}

void already_on_cuda(const torch::Tensor &x, torch::Tensor &y) {
  if (x.is_cuda())
    y = y.cuda();
}

void cpu_fallback(torch::Tensor &x, bool use_gpu) {
  torch::Device device(use_gpu ? torch::kCUDA : torch::kCPU);
  x = x.to(device);
  if (parse_flag("--gpu"))
    x = x.cuda();
  else
    x = x.cpu();
}

void every_visible_device() {
  for (size_t i = 0; i < torch::cuda::device_count(); ++i) {
    torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    (void)device;
  }
}

void both_conditions(torch::Tensor &x, bool use_gpu) {
  if (use_gpu && tc::is_available())
    x = x.cuda();
}

struct Session {
  bool use_cuda_ = torch::cuda::is_available();
  torch::Tensor x_;
  void step() {
    if (use_cuda_)
      x_ = x_.cuda();
  }
};

struct GpuWorker {
  torch::Device device_{torch::kCUDA};
};

void start_worker() {
  if (torch::cuda::is_available()) {
    GpuWorker worker;
    (void)worker;
  }
}

template <typename T> void never_instantiated() {
  torch::Device device(torch::kCUDA);
}

void wait_for_cuda(torch::Tensor &x) {
  while (!torch::cuda::is_available())
    log_line("waiting");
  x = x.cuda();
}

static const bool kHasCuda = torch::cuda::is_available();

void global_flag(torch::Tensor &x) {
  if (kHasCuda)
    x = x.cuda();
}

struct GuardedRunner : torch::nn::Module {
  GuardedRunner() : device_(torch::kCUDA) {}
  torch::Device device_;
};

void make_guarded_runner() {
  if (!torch::cuda::is_available())
    return;
  auto runner = std::make_shared<GuardedRunner>();
  (void)runner;
}

struct Model {
  std::shared_ptr<Net> net_;
  void to_gpu() { net_->to(torch::kCUDA); }
  void setup() {
    if (torch::cuda::is_available() == false)
      return;
    to_gpu();
  }
};

void guarded_parameter(torch::Tensor &x, bool use_cuda) {
  if (use_cuda)
    x = x.cuda();
}

void pass_availability(torch::Tensor &x) {
  guarded_parameter(x, torch::cuda::is_available());
  bool has_cuda = false;
  if (torch::cuda::device_count() > 0)
    has_cuda = true;
  guarded_parameter(x, has_cuda);
}

// The device selection of the LibTorch MNIST and DCGAN examples.
void mnist_example(std::shared_ptr<Net> net) {
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    log_line("CUDA available! Training on GPU.");
    device_type = torch::kCUDA;
  } else {
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);
  net->to(device);
}

void dcgan_example(std::shared_ptr<Net> net) {
  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available()) {
    device = torch::Device(torch::kCUDA);
  }
  net->to(device);
}

void suppressed(torch::Tensor &x) {
  x = x.cuda(); // NOLINT(torch-cuda-unguarded)
}

// CPU by default, CUDA only when the user asks: the path that does not ask
// keeps the CPU device, a fallback as much as an `else` would be.
void cpu_unless_asked(int argc, char **argv) {
  auto device = torch::Device(torch::kCPU);
  if (argc > 1)
    device = torch::Device(torch::kCUDA, std::atoi(argv[1]));
  auto x = torch::randn({2, 2}).to(device);
}

// The ordinal the user asks for, and no CPU path: reported.
void ordinal_from_user(int argc, char **argv) {
  auto device = torch::Device(torch::kCUDA, std::atoi(argv[1]));
  // CHECK-MESSAGES: :[[@LINE-1]]:31: warning: CUDA device selected without checking{{.*}}[torch-cuda-unguarded]
  auto x = torch::randn({2, 2}).to(device);
}

// A long function: many loops before the selection do not exhaust the
// solver's budget (it settles each loop before the code after it).
void after_many_loops(int n) {
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  for (int i = 0; i < n; ++i) {}
  auto x = torch::randn({2, 2}).to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:36: warning: CUDA device selected without checking{{.*}}[torch-cuda-unguarded]
}

// The true edge of `a && b` proves both operands, also where a temporary's
// destructor in `b` joins the paths of the operands before the branch.
struct RunConfig { torch::Device device{torch::kCPU}; };
RunConfig config_from_flags(int argc, char **argv) {
  RunConfig c;
  if (torch::cuda::is_available() && !(argc > 1 && std::string(argv[1]) == "--cpu"))
    c.device = torch::Device(torch::kCUDA); // near-miss: checked by the first operand
  return c;
}
RunConfig config_from_flags_unchecked(int argc, char **argv) {
  RunConfig c;
  if (argc > 0 && !(argc > 1 && std::string(argv[1]) == "--cpu"))
    c.device = torch::Device(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:30: warning: CUDA device selected without checking{{.*}}[torch-cuda-unguarded]
  return c;
}
