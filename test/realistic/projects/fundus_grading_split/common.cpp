// Synthetic fundus photographs, the losses and metrics, the loss meter, and
// the mixed-precision helpers declared in amp.h.
#include "amp.h"
#include "fundus.h"

#include <cmath>
#include <stdexcept>
#include <string>

// A photograph: a vignetted bright disc, the optic disc on the nasal side,
// vessels as thin dark arcs, and dark haemorrhages / microaneurysms whose
// density grows with the grade. One in seven photographs is underexposed
// (ungradable). `red_gain` models another camera's colour response.
FundusBatch synth_fundus(int64_t n, uint64_t seed, torch::Device device, double red_gain) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto grades = torch::randint(0, kGrades, {n}, gen, torch::kLong);
  auto lin = torch::linspace(-1, 1, kSide);
  auto ys = lin.view({1, kSide, 1});
  auto xs = lin.view({1, 1, kSide});
  auto r2 = xs.pow(2) + ys.pow(2);
  auto field = (r2 < 0.9).to(torch::kFloat) * (1.0 - 0.4 * r2);
  auto disc = ((xs - 0.45).pow(2) + ys.pow(2) < 0.02).to(torch::kFloat);
  auto vessels = (torch::sin(6.0 * xs + 3.0 * ys.pow(2)).abs() < 0.05).to(torch::kFloat);
  auto base = field + 0.5 * disc - 0.2 * vessels * field;

  auto density = 0.004 * grades.to(torch::kFloat).view({n, 1, 1});
  auto lesions = (torch::rand({n, kSide, kSide}, gen) < density).to(torch::kFloat);
  auto img = base.expand({n, kSide, kSide}) - 0.35 * lesions * field;

  auto gradable = torch::rand({n}, gen) > 1.0 / 7.0;
  auto exposure = torch::where(gradable, torch::ones({n}), torch::full({n}, 0.2));
  img = img * exposure.view({n, 1, 1});
  auto rgb = torch::stack({red_gain * 0.9 * img, 0.55 * img, 0.25 * img}, 1);
  rgb = rgb + 0.02 * torch::randn({n, 3, kSide, kSide}, gen);
  return {rgb.to(device), grades.to(device), gradable.to(torch::kFloat).to(device)};
}

torch::Tensor grading_loss(const torch::Tensor &logits, const torch::Tensor &grades) {
  return torch::nn::functional::cross_entropy(logits, grades,
                                              torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.05));
}

torch::Tensor quality_loss(const torch::Tensor &logit, const torch::Tensor &gradable) {
  return torch::nn::functional::binary_cross_entropy_with_logits(logit.squeeze(1), gradable);
}

// The share of one micro-batch in an update over `accum` of them.
torch::Tensor accum_share(const torch::Tensor &loss, int64_t accum) {
  return loss / static_cast<double>(accum);
}

// Cohen's kappa with quadratic weights, from a [kGrades, kGrades] confusion
// matrix (rows: truth, columns: prediction).
double quadratic_kappa(const torch::Tensor &confusion) {
  auto observed = confusion.to(torch::kDouble);
  auto total = observed.sum().clamp_min(1.0);
  auto idx = torch::arange(kGrades, torch::kDouble);
  auto weights = (idx.view({-1, 1}) - idx.view({1, -1})).pow(2) / std::pow(kGrades - 1, 2);
  auto expected = observed.sum(1, true) * observed.sum(0, true) / total;
  return 1.0 - ((weights * observed).sum() / (weights * expected).sum().clamp_min(1e-12)).item<double>();
}

void require_finite(const torch::Tensor &t, const char *what) {
  if (!torch::isfinite(t).all().item<bool>())
    throw std::runtime_error(std::string(what) + ": non-finite outputs");
}

void LossMeter::update(const torch::Tensor &loss, int64_t n) {
  if (!sum_.defined())
    sum_ = torch::zeros({}, loss.options());
  // BUG(torch-loss-accumulation-graph): warm_up_head() (train.cpp) hands
  // probe_step()'s loss over with its graph on every step, and the meter
  // lives for the whole probe: every step's graph stays alive.
  sum_ += loss * static_cast<double>(n);
  count_ += n;
}

double LossMeter::mean() const {
  return count_ == 0 ? 0.0 : sum_.item<double>() / static_cast<double>(count_);
}

void LossMeter::reset() {
  sum_ = torch::Tensor();
  count_ = 0;
}

namespace amp {

void enable(bool on) {
  FUNDUS_CUDA_AUTOCAST(on);
  if (!on)
    at::autocast::clear_cache();
}

}  // namespace amp

AutocastScope::AutocastScope(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
  was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
  previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  was_enabled_ = at::autocast::is_enabled();
  previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
  // OK(torch-autocast-region): RAII; the destructor restores the saved state.
  FUNDUS_CUDA_AUTOCAST(true);
}

AutocastScope::~AutocastScope() {
  FUNDUS_CUDA_AUTOCAST(was_enabled_);
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
#else
  at::autocast::set_autocast_gpu_dtype(previous_dtype_);
#endif
  if (!was_enabled_)
    at::autocast::clear_cache();
}
