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
};
} // namespace c10
namespace at {
using AutoGradMode = c10::AutoGradMode;
using NoGradGuard = c10::NoGradGuard;
} // namespace at
