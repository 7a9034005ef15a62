// RUN: %check_torch_tidy %s torch-device-index-unchecked %t

#include <torch/torch.h>
#include <vector>

// --- Containers and members ---------------------------------------------------

std::vector<torch::Device> all_devices() {
  std::vector<torch::Device> devices;
  for (int i = 0; i < torch::cuda::device_count(); ++i)
    devices.push_back(torch::Device(torch::kCUDA, i));
  // The loop's comparison checks only the ordinals the loop makes.
  devices.push_back(torch::Device(torch::kCUDA, 2));
  // CHECK-MESSAGES: :[[@LINE-1]]:49: warning: hard-coded CUDA device ordinal 2 is never checked against torch::cuda::device_count(); CUDA_VISIBLE_DEVICES renumbers the devices a process sees, so ordinal 2 may not exist [torch-device-index-unchecked]
  return devices;
}

class Replica {
public:
  Replica() : device_(torch::kCUDA, 1) {}
  // CHECK-MESSAGES: :[[@LINE-1]]:37: warning: hard-coded CUDA device ordinal 1 is never checked
  torch::Device device() const { return device_; }

private:
  torch::Device device_;
};

// --- Guards ---------------------------------------------------------------------

torch::Device pick(int i) {
  torch::Device device(torch::kCPU);
  if (i < torch::cuda::device_count())
    device = torch::Device(torch::kCUDA, i);
  return device;
}

void inside_the_guarded_if(std::vector<torch::Device> &devices) {
  if (devices.size() < torch::cuda::device_count())
    devices.push_back(torch::Device(torch::kCUDA, 3));
}

void early_exit(int wanted) {
  if (wanted >= torch::cuda::device_count())
    return;
  torch::Device second(torch::kCUDA, 1);
}

void constant_bound_guards_the_function() {
  if (torch::cuda::device_count() > 2) {
  }
  torch::Device third(torch::kCUDA, 2);
}

void guarded_caller_helper() { torch::Device d("cuda:1"); }

void guarded_caller(int n) {
  for (int i = 0; i < torch::cuda::device_count(); ++i)
    guarded_caller_helper();
}

// The ordinal written elsewhere than the device: a string local, a
// constant, a ternary's arm, a caller's argument. The warning goes to the
// literal.
namespace {
constexpr const char *kServingSpec = "cuda:3";
// CHECK-MESSAGES: :[[@LINE-1]]:38: warning: hard-coded CUDA device ordinal 3 is never checked
torch::Device device_from(const std::string &spec) { return torch::Device(spec); }
torch::Device checked_device_from(const std::string &spec) {
  return torch::Device(spec);
}
} // namespace

void spec_in_a_local() {
  std::string spec = "cuda:2";
  // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: hard-coded CUDA device ordinal 2 is never checked
  torch::Device d(spec);
}

void spec_in_a_constant() {
  torch::Device d(kServingSpec);
}

void spec_from_environment(const char *env) {
  torch::Device d(env != nullptr ? env : "cuda:1");
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: hard-coded CUDA device ordinal 1 is never checked
}

void spec_handed_to_a_helper() {
  auto d = device_from("cuda:4");
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: hard-coded CUDA device ordinal 4 is never checked
}

void spec_checked_before_the_helper() {
  if (torch::cuda::device_count() > 5)
    checked_device_from("cuda:5");
  std::string first = "cuda:0";
  torch::Device d(first);
}

// An enumerator written with its value is a constant too.
enum Card : int { kTrainCard = 0, kBriefingCard = 2 };
// CHECK-MESSAGES: :[[@LINE-1]]:51: warning: hard-coded CUDA device ordinal 2 is never checked

void card_from_an_enumerator() {
  torch::Device d(torch::kCUDA, kBriefingCard);
}

void card_from_an_enumerator_checked() {
  if (torch::cuda::device_count() > 2)
    torch::Device d(torch::kCUDA, kBriefingCard);
}
