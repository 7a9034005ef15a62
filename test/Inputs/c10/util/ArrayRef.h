#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>
namespace c10 {
template <class T> class ArrayRef {
public:
  ArrayRef() = default;
  ArrayRef(const T &one) : data_(&one), size_(1) {}
  ArrayRef(std::initializer_list<T> list) : data_(list.begin()), size_(list.size()) {}
  template <class A> ArrayRef(const std::vector<T, A> &v) : data_(v.data()), size_(v.size()) {}
  const T *begin() const { return data_; }
  const T *end() const { return data_ + size_; }
  size_t size() const { return size_; }

private:
  const T *data_ = nullptr;
  size_t size_ = 0;
};
using IntArrayRef = ArrayRef<int64_t>;
} // namespace c10
