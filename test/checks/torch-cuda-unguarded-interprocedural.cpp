// RUN: %check_torch_tidy %s torch-cuda-unguarded %t

#include <torch/torch.h>
#include <vector>

// One unguarded path, reported once at its first use; the other uses are
// its notes.
void three_uses() {
  auto a = torch::ones({2}, torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: CUDA device selected without checking torch::cuda::is_available(); this crashes on a machine without a working CUDA [torch-cuda-unguarded]
  auto b = torch::zeros({2}).cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:30: note: CUDA is selected here too, on the same path
  auto c = torch::randn({2}).to("cuda");
  // CHECK-MESSAGES: :[[@LINE-1]]:33: note: CUDA is selected here too, on the same path
}

// A device held in a member: the class is built in main() without a check.
class Trainer {
public:
  Trainer() : device_(torch::kCUDA) {}
  // CHECK-MESSAGES: :[[@LINE-1]]:23: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE+23]]:11: note: reached from here without a check
  torch::Device device() const { return device_; }

private:
  torch::Device device_;
};

// Devices in a container, guarded by a comparison with the device count.
std::vector<torch::Device> devices() {
  std::vector<torch::Device> out;
  for (int i = 0; i < torch::cuda::device_count(); ++i)
    out.push_back(torch::Device(torch::kCUDA, i));
  return out;
}

torch::Device pick(int i) {
  torch::Device device(torch::kCPU);
  if (i < torch::cuda::device_count())
    device = torch::Device(torch::kCUDA, i);
  return device;
}

int main() {
  Trainer trainer;
  auto all = devices();
  auto d = pick(0);
  return 0;
}

// torch::load onto CUDA selects CUDA; onto a checked device it does not.
struct ResumedImpl : torch::nn::Module {
  ResumedImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Resumed);

Resumed resume_on_gpu(const std::string &path) {
  Resumed model;
  torch::load(model, path, torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: CUDA device selected without checking torch::cuda::is_available(){{.*}}[torch-cuda-unguarded]
  return model;
}

Resumed resume_where_available(const std::string &path) {
  Resumed model;
  torch::load(model, path,
              torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  return model;
}

// --- A device parameter whose default is CUDA -----------------------------------
// A call that leaves the device out selects CUDA where it runs: unguarded in
// one caller, checked in the other.
torch::Tensor reconstruct(const torch::Tensor &slices, torch::Device device = torch::kCUDA);
// CHECK-MESSAGES: :[[@LINE-1]]:79: warning: CUDA device selected without checking{{.*}}[torch-cuda-unguarded]
torch::Tensor reconstruct(const torch::Tensor &slices, torch::Device device) {
  return slices.to(device);
}
torch::Tensor scale(const torch::Tensor &x, torch::Device device = torch::kCUDA) { return x.to(device); }

void defaults_unguarded() { reconstruct(torch::ones({2})); }
void defaults_guarded() {
  if (torch::cuda::is_available())
    scale(torch::ones({2}));
}
