#pragma once
#include <torch/csrc/autograd/autograd.h>
