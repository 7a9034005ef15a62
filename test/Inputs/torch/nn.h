#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules.h>
