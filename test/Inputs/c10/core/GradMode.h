#pragma once
namespace c10 {
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};
struct AutoGradMode {
  AutoGradMode(bool enabled);
  ~AutoGradMode();
};
struct NoGradGuard : public AutoGradMode {
  NoGradGuard() : AutoGradMode(/*enabled=*/false) {}
};
struct InferenceMode {
  InferenceMode(bool enabled = true);
  ~InferenceMode();
  // 2.x (1.13 left them implicit).
  InferenceMode(const InferenceMode &) = delete;
  InferenceMode(InferenceMode &&) = delete;
  InferenceMode &operator=(const InferenceMode &) = delete;
  InferenceMode &operator=(InferenceMode &&) = delete;
};
} // namespace c10
namespace at {
using AutoGradMode = c10::AutoGradMode;
using NoGradGuard = c10::NoGradGuard;
} // namespace at
