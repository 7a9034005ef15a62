// A gradient-checking tool for a custom gated layer: it compares the
// gradients autograd computes for each parameter with central finite
// differences, in double precision. The same layer is checked twice: a CPU
// reference copy and the copy on the accelerator, so that a kernel that is
// only wrong on one device shows up as a disagreement between the reports.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>

struct GatedUnitImpl : torch::nn::Module {
  GatedUnitImpl(int64_t in, int64_t out)
      : value(register_module("value", torch::nn::Linear(in, out))),
        gate(register_module("gate", torch::nn::Linear(in, out))) {}
  torch::Tensor forward(torch::Tensor x) { return value(x) * torch::sigmoid(gate(x)); }
  torch::nn::Linear value, gate;
};
TORCH_MODULE(GatedUnit);

struct GradReport {
  std::string name;
  double max_abs_err = 0.0;
  int64_t checked = 0;
};

// The scalar whose gradient is checked.
torch::Tensor objective(GatedUnit &unit, const torch::Tensor &x) {
  // BUG(torch-inference-without-no-grad): check_parameter() calls this in its
  // finite-difference loop, which never runs backward(), with autograd on.
  return unit->forward(x).pow(2).sum();
}

GradReport summarize(const std::string &name, const torch::Tensor &analytic, const torch::Tensor &numeric) {
  GradReport r;
  r.name = name;
  const double *a = analytic.data_ptr<double>();
  const double *n = numeric.data_ptr<double>();
  r.checked = numeric.numel();
  for (int64_t i = 0; i < r.checked; ++i)
    r.max_abs_err = std::max(r.max_abs_err, std::abs(a[i] - n[i]));
  return r;
}

GradReport check_parameter(GatedUnit &unit, const std::string &name, const torch::Tensor &x, double eps,
                           int64_t max_entries) {
  torch::Tensor param = unit->named_parameters()[name];
  unit->zero_grad();
  objective(unit, x).backward();
  auto analytic = param.grad().reshape({-1}).slice(0, 0, max_entries).cpu();

  auto flat = param.data().view({-1});
  const int64_t n = std::min<int64_t>(flat.numel(), max_entries);
  auto numeric = torch::empty({n}, flat.options());
  for (int64_t i = 0; i < n; ++i) {
    auto orig = flat[i].clone();
    flat[i].copy_(orig + eps);
    auto plus = objective(unit, x);
    flat[i].copy_(orig - eps);
    auto minus = objective(unit, x);
    flat[i].copy_(orig);
    numeric[i].copy_((plus - minus) / (2.0 * eps));
  }
  auto numeric_host = numeric.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): for the accelerator copy the numeric
  // gradients are still being copied back when summarize() reads them.
  return summarize(name, analytic, numeric_host);
}

int main() {
  torch::manual_seed(0);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  GatedUnit reference(8, 4);
  reference->to(torch::kDouble);
  GatedUnit accel(8, 4);
  {
    torch::NoGradGuard no_grad;
    auto src = reference->parameters();
    auto dst = accel->parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].copy_(src[i]);
  }
  accel->to(device, torch::kDouble);

  auto probe = torch::randn({16, 8}, torch::kDouble);
  const char *names[] = {"value.weight", "value.bias", "gate.weight", "gate.bias"};
  for (const char *name : names) {
    // OK(torch-device-mismatch): the reference unit and the probe are both on
    // the CPU.
    GradReport ref = check_parameter(reference, name, probe, 1e-6, 32);
    // BUG(torch-device-mismatch): the unit is on 'device' and the probe was
    // never moved; objective() combines them two calls down.
    GradReport dev = check_parameter(accel, name, probe, 1e-6, 32);
    std::cout << name << ": cpu err " << ref.max_abs_err << ", device err " << dev.max_abs_err << " ("
              << dev.checked << " entries)\n";
  }
  return 0;
}
