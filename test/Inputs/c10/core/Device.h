#pragma once
#include <cstdint>
#include <string>

namespace c10 {
enum class DeviceType : int8_t { CPU = 0, CUDA = 1, HIP = 6, MPS = 13, Meta = 14 };
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;
constexpr DeviceType kHIP = DeviceType::HIP;
constexpr DeviceType kMPS = DeviceType::MPS;
constexpr DeviceType kMeta = DeviceType::Meta;
using DeviceIndex = int8_t;

struct Device final {
  /* implicit */ Device(DeviceType type, DeviceIndex index = -1)
      : type_(type), index_(index) {}
  /* implicit */ Device(const std::string &device_string);
  bool operator==(const Device &other) const noexcept;
  bool operator!=(const Device &other) const noexcept;
  void set_index(DeviceIndex index) { index_ = index; }
  DeviceType type() const noexcept { return type_; }
  DeviceIndex index() const noexcept { return index_; }
  bool has_index() const noexcept { return index_ != -1; }
  bool is_cuda() const noexcept { return type_ == DeviceType::CUDA; }
  bool is_cpu() const noexcept { return type_ == DeviceType::CPU; }
  std::string str() const;

private:
  DeviceType type_;
  DeviceIndex index_ = -1;
};

enum class ScalarType : int8_t { Byte, Char, Short, Int, Long, Half, Float, Double, Bool, BFloat16 };
constexpr ScalarType kByte = ScalarType::Byte;
constexpr ScalarType kInt = ScalarType::Int;
constexpr ScalarType kLong = ScalarType::Long;
constexpr ScalarType kHalf = ScalarType::Half;
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kFloat32 = ScalarType::Float;
constexpr ScalarType kDouble = ScalarType::Double;
constexpr ScalarType kBool = ScalarType::Bool;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
enum class Layout : int8_t { Strided, Sparse };
enum class MemoryFormat : int8_t { Contiguous, Preserve, ChannelsLast };
} // namespace c10
