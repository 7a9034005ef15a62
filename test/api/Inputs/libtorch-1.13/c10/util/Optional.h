#pragma once
// The LibTorch 1.13 form of the mock <c10/util/Optional.h> (test/Inputs/),
// found first with `-isystem %S/Inputs/libtorch-1.13`.
#include <c10/core/Scalar.h>
#include <c10/util/ArrayRef.h>
#include <type_traits>
namespace c10 {
// LibTorch 1.13: c10::optional is a class of its own, not std::optional.
struct nullopt_t {
  constexpr explicit nullopt_t(int) {}
};
constexpr nullopt_t nullopt{0};
template <class T> class optional {
public:
  constexpr optional() noexcept {}
  constexpr optional(nullopt_t) noexcept {}
  optional(const optional &rhs);
  optional(optional &&rhs) noexcept;
  constexpr optional(const T &v);
  constexpr optional(T &&v);
  template <typename U = T,
            typename = std::enable_if_t<std::is_constructible<T, U &&>::value &&
                                        !std::is_same<std::decay_t<U>, optional<T>>::value &&
                                        !std::is_same<std::decay_t<U>, nullopt_t>::value>>
  constexpr optional(U &&u);
  ~optional();
  optional &operator=(nullopt_t) noexcept;
  optional &operator=(const optional &rhs);
  constexpr bool has_value() const noexcept;
  constexpr explicit operator bool() const noexcept;
  constexpr const T &operator*() const &;
  constexpr const T &value() const &;
  template <class V> constexpr T value_or(V &&v) const &;
};
template <class T> constexpr optional<std::decay_t<T>> make_optional(T &&v);
} // namespace c10
